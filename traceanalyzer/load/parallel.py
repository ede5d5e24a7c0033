"""Decode a large trace's chunks in worker processes, one per CPU.

The main process reads (and inflates) the bytes and cuts the `traceEvents` array into chunks
with the same `EventSplitter` as the serial path, but without decoding them itself: each chunk
goes to a worker, which decodes it into the same per-kind polars tables as the serial loader
(`RawTables.add_chunk`) and sends them back pickled (polars pickles a frame as Arrow IPC).
Results are taken back in file order, so the tables equal the serial path's.

Workers are plain subprocesses (`python -c` running `_worker_main`) talking over pipes
with length-prefixed messages: unlike a multiprocessing spawn pool they never re-import the
caller's `__main__` (a script without an `if __name__ == "__main__"` guard stays safe), and
unlike fork they never inherit a polars thread pool in a half-copied state.

Memory stays bounded: each worker holds at most one chunk; the main process collects a worker's
result before giving it the next chunk.

A chunk is not validated before it is sent, so a cut that falls inside an event (possible
where a string holds `},{`), or a trace that is malformed or cut short, makes a worker reject
its chunk. Then the whole file is read again by the serial loader, which validates every cut
and salvages broken traces; that costs a second read, only on such files.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from traceanalyzer.load import native
from traceanalyzer.load.chunks import EventSplitter
from traceanalyzer.load.cpus import cpu_count
from traceanalyzer.load.source import ByteSource
from traceanalyzer.load.tables import RawTables, read_serial, read_warnings

# Below this much JSON, starting worker processes (~0.5 CPU-s and ~130 MB each) costs more
# than it saves: at 100 MB the serial loader is as fast in wall time and uses 2/3 the memory.
MIN_PARALLEL_BYTES = 256 << 20
PARALLEL_CHUNK_BYTES = 4 << 20


def estimated_json_bytes(source: ByteSource) -> int:
    """The trace's JSON size: the file size, or for gzip the size in its trailer (ISIZE, the
    size mod 4 GiB, lifted to at least the compressed size)."""
    size = source.total_size
    if not source.compressed:
        return size
    isize = source.gzip_trailer_size()
    if isize is None:
        return size * 10
    while isize < size:
        isize += 1 << 32
    return isize


def should_use(source: ByteSource) -> bool:
    """Parallel decoding pays off: a large trace, a path we can reopen, more than one CPU, and
    no native decoder (its threads decode in this process, with no pickling)."""
    if source.serial_only or source.path is None or native.enabled():
        return False
    return cpu_count() > 1 and estimated_json_bytes(source) > MIN_PARALLEL_BYTES


def _decode_chunk(data: bytes) -> tuple[bool, dict[str, pl.DataFrame], Counter, int, Counter]:
    """One chunk `[ev, ...]` -> (ok, non-empty tables by kind, (cat, ph) counts, events, fixes)."""
    raw = RawTables()
    if not raw.add_chunk(data):
        return False, {}, Counter(), 0, Counter()
    return True, {k: p[0] for k, p in raw.parts.items() if p}, raw.counts, raw.events, getattr(raw, "fixes", Counter())


def _send(fh: BinaryIO, payload: bytes) -> None:
    fh.write(len(payload).to_bytes(8, "little"))
    fh.write(payload)
    fh.flush()


def _receive(fh: BinaryIO) -> bytes | None:
    head = fh.read(8)
    if len(head) < 8:
        return None
    n = int.from_bytes(head, "little")
    data = fh.read(n)
    return data if len(data) == n else None


def _worker_main() -> None:
    """A worker: read chunks from stdin until it closes, answer each with its pickled tables."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by a library goes to stderr, never into the answers
    inp = sys.stdin.buffer
    while (data := _receive(inp)) is not None:
        _send(out, pickle.dumps(_decode_chunk(data), protocol=pickle.HIGHEST_PROTOCOL))


class _Rejected(Exception):
    """A worker could not decode a chunk (or died): read the file serially instead."""


# Not `-m traceanalyzer.load.parallel`: runpy would import the package (which imports this
# module) before running this file again as __main__, and warn about it on stderr every run.
_WORKER = "from traceanalyzer.load.parallel import _worker_main; _worker_main()"


class _Workers:
    """`n` worker processes used round robin, one chunk in flight per worker."""

    def __init__(self, n: int) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # importable even when not installed
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            for _ in range(n)
        ]
        self.busy = [False] * n
        self.next = 0

    def submit(self, data: bytes) -> Any | None:
        """Give `data` to the next worker; returns that worker's previous result, if any."""
        i = self.next
        self.next = (i + 1) % len(self.procs)
        previous = self._collect(i) if self.busy[i] else None
        try:
            _send(self.procs[i].stdin, data)
        except (BrokenPipeError, OSError):
            raise _Rejected() from None
        self.busy[i] = True
        return previous

    def drain(self):
        """The remaining results, in submission order."""
        n = len(self.procs)
        for k in range(n):
            i = (self.next + k) % n
            if self.busy[i]:
                yield self._collect(i)

    def _collect(self, i: int) -> Any:
        self.busy[i] = False
        data = _receive(self.procs[i].stdout)
        if data is None:
            raise _Rejected()
        return pickle.loads(data)

    def close(self) -> None:
        """Close the workers' input and wait for them (killing any that hang)."""
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()


def read_tables(
    source: ByteSource, chunk_bytes: int | None = None
) -> tuple[dict[str, pl.DataFrame], dict, Counter, list[str]]:
    """Same contract as `loader.read_tables`, decoding in worker processes. The per-chunk
    results are put into the serial loader's own `RawTables`, so its tables and warnings are
    built by the very same code."""
    chunk = min(chunk_bytes or PARALLEL_CHUNK_BYTES, PARALLEL_CHUNK_BYTES)
    raw = RawTables()

    def collect(result: Any) -> None:
        if result is None:
            return
        ok, tables, counts, n, fixes = result
        if not ok:
            raise _Rejected()
        for kind, df in tables.items():
            raw.parts[kind].append(df)
        raw.counts.update(counts)
        raw.events += n
        raw.fixes.update(fixes)

    def submit(data: bytes) -> bool:
        collect(workers.submit(data))
        return True

    splitter = EventSplitter(source, chunk)
    workers = _Workers(cpu_count())
    try:
        for _ in splitter.chunks(submit):
            pass
        for result in workers.drain():
            collect(result)
    except _Rejected:
        workers.close()
        return _serial_again(source)
    except BaseException:
        for p in workers.procs:
            p.kill()
        workers.close()
        raise
    workers.close()

    split = splitter.split
    if split.truncated or split.damaged or any(split.repairs.values()):
        # the serial path validates every cut, salvages what it can and words the warnings
        return _serial_again(source)
    return raw.tables(), split.metadata, raw.counts, read_warnings(split, raw, source)


def _serial_again(source: ByteSource):
    """Read the whole file again in this process (it validates every cut and salvages damage)."""
    with ByteSource(
        source.path, max_decompressed=source.max_decompressed, progress=source.progress, serial_only=True
    ) as fresh:
        return read_serial(fresh)
