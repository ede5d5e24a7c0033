"""Reading reuses its buffers: `ByteSource.readinto` fills the caller's buffer (plain and gzip,
truncated gzip up to the cut), `Prefetch` cycles a fixed pool of blocks, and the splitter keeps
one buffer for the whole file unless a decoded value holds a view of it or an event outgrows it."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from traceanalyzer.load.chunks import EventSplitter
from traceanalyzer.load.source import GZ_PIECE, ByteSource, Prefetch


def _payload(n: int = 20000) -> bytes:
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{i % 97}", "pid": 0, "tid": 7, "ts": i, "dur": 1} for i in range(n)
    ]
    return json.dumps({"traceEvents": events}).encode()


def _drain(src, size: int) -> bytes:
    buf = bytearray(size)
    out = bytearray()
    while k := src.readinto(buf):
        out += buf[:k]
    return bytes(out)


@pytest.mark.parametrize("size", [1, 1000, 4096, GZ_PIECE + 7])
def test_readinto_gives_the_inflated_bytes_whatever_the_buffer(tmp_path, size):
    data = _payload()
    path = tmp_path / "t.json.gz"
    # two gzip members: the second must be read too
    path.write_bytes(gzip.compress(data[:50000]) + gzip.compress(data[50000:]))
    with ByteSource(path) as src:
        assert _drain(src, size) == data
        assert src.decompressed_bytes == len(data) and src.truncated is None


def test_readinto_fills_a_plain_buffer_to_the_end(tmp_path):
    data = _payload()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with ByteSource(path) as src:
        buf = bytearray(len(data) // 3 + 1)
        sizes = []
        while k := src.readinto(buf):
            sizes.append(k)
        # full buffers until the last one: 3 reads of len//3+1 cover the file
        assert sizes[:2] == [len(buf)] * 2 and sum(sizes) == len(data)


def test_truncated_gzip_keeps_every_byte_before_the_cut(tmp_path):
    data = _payload()
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    body = comp.compress(data) + comp.flush(zlib.Z_FULL_FLUSH)  # every byte so far is inflatable
    path = tmp_path / "t.json.gz"
    path.write_bytes(body)  # no final block, no trailer
    with ByteSource(path) as src:
        assert _drain(src, 4096) == data
        assert src.truncated == "gzip stream ends before its end marker"


def test_prefetch_cycles_its_blocks_and_keeps_order(tmp_path):
    data = _payload()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with ByteSource(path) as src, Prefetch(src, block=10000) as pre:
        out = bytearray()
        buf = bytearray(10000)
        while k := pre.readinto(buf):
            out += buf[:k]
        assert bytes(out) == data
        assert len(data) // 10000 > 20  # many blocks read through a pool of two
        assert len(pre._blocks) == 2
    assert all(b.map.closed for b in pre._blocks)  # unmapped when done


def test_prefetch_stopped_early_stops_its_thread(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(_payload())
    with ByteSource(path) as src:
        pre = Prefetch(src, block=1000)
        assert pre.readinto(bytearray(1000)) == 1000
        pre.close()
        assert not pre._thread.is_alive()


def test_splitter_keeps_one_buffer(tmp_path):
    data = _payload()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    seen = []

    def decode(chunk) -> bool:
        seen.append(bytes(chunk))
        return True

    with ByteSource(path) as src:
        splitter = EventSplitter(src, chunk_bytes=8192)
        buffers = set()
        for _ in splitter.chunks(decode):
            buffers.add(id(splitter._buffer))
    assert len(seen) > 50 and len(buffers) == 1
    events = [e for c in seen for e in json.loads(c)]
    assert events == json.loads(data)["traceEvents"]


def test_an_event_larger_than_the_buffer_grows_it(tmp_path):
    big = {"ph": "X", "cat": "cpu_op", "name": "x" * 50000, "pid": 1, "tid": 1, "ts": 5, "dur": 2}
    small = [{"ph": "X", "cat": "cpu_op", "name": "s", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(2000)]
    events = small[:1000] + [big] + small[1000:]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got = []

    def decode(chunk) -> bool:
        got.extend(json.loads(bytes(chunk)))
        return True

    with ByteSource(path) as src:
        list(EventSplitter(src, chunk_bytes=4096).chunks(decode))
    assert got == events


def test_prefetch_read_gives_at_most_n_bytes(tmp_path):
    data = _payload()
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with ByteSource(path) as src, Prefetch(src, block=10000) as pre:
        assert pre.read(100) == data[:100]  # not the rest of the 10,000-byte block
        assert pre.read(20000) == data[100:10000]  # at most the rest of that block
        out = bytearray(pre.read(7))
        while piece := pre.read(4096):
            out += piece
        assert bytes(out) == data[10000:]


@pytest.mark.parametrize("pad", [10, 64 * 1024 - 20, 300_000])
def test_metadata_before_the_events_read_in_small_steps(tmp_path, pad):
    # The header is read 64 KiB first, then doubling: metadata of any size before the key,
    # the key itself across the first read's end (pad 64 KiB - 20), every event read once.
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i, "dur": 1} for i in range(3000)]
    doc = {"schemaVersion": 1, "note": "n" * pad, "traceEvents": events, "traceName": "t"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    got = []

    def decode(chunk) -> bool:
        got.extend(json.loads(bytes(chunk)))
        return True

    with ByteSource(path) as src, Prefetch(src, block=1 << 20) as pre:
        splitter = EventSplitter(pre, chunk_bytes=1 << 20)
        list(splitter.chunks(decode))
    assert got == events
    assert splitter.split.metadata == {"schemaVersion": 1, "note": "n" * pad, "traceName": "t"}


def test_a_plain_file_is_read_without_a_thread_and_gzip_with_one(tmp_path, monkeypatch):
    # A plain local file is read straight into the splitter's buffer (the kernel reads ahead);
    # gzip is inflated on the Prefetch thread. Both give the same 20,000 kernels.
    from traceanalyzer.load import native, tables

    if not native.enabled():
        pytest.skip("the reading thread runs beside the native decoder only")
    data = _payload()
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    started = []
    real = tables.Prefetch

    def prefetch(source, block):
        started.append(source.name)
        return real(source, block)

    monkeypatch.setattr(tables, "Prefetch", prefetch)
    out = {}
    for path in (plain, packed):
        with ByteSource(path) as src:
            assert src.regular
            out[path.name] = tables.read_serial(src)[0]["gpu"]
    assert started == [str(packed)]
    assert out["t.json"].height == 20000 and out["t.json"].equals(out["t.json.gz"])
    with open(plain, "rb") as fh, ByteSource(fh) as src:
        assert not src.regular  # a file object given to us: read ahead on the thread


def test_read_survives_a_view_of_its_block_outliving_readinto(tmp_path, monkeypatch):
    # A sampling profiler (Dask's, on a worker thread) can hold the frame of `readinto` past its
    # return, and with it the memoryview of `read`'s block: resizing that block raised
    # BufferError ('Existing exports of data') in `summary DIR --executor dask`.
    data = _payload()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data))
    kept = []
    readinto = ByteSource.readinto

    def holding(self, out):
        kept.append(memoryview(out))  # what the held frame keeps alive
        return readinto(self, out)

    monkeypatch.setattr(ByteSource, "readinto", holding)
    with ByteSource(path) as src:
        blocks = []
        while chunk := src.read(len(data) // 3 + 5):
            blocks.append(chunk)
    assert b"".join(blocks) == data and len(blocks) == 3 and len(kept) == 4
