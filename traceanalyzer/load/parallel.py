"""Decode a large trace's chunks in worker processes, one per CPU.

The main process reads (and inflates) the bytes and cuts the `traceEvents` array into chunks
with the same `EventSplitter` as the serial path, but without decoding them itself: each chunk
goes to a worker, which decodes it into the same per-kind polars tables as the serial loader
(`RawTables.add_chunk`) and sends them back (polars pickles a frame as Arrow IPC). Results are
put back in file order, so the tables are identical to the serial path's.

Memory stays bounded: at most `2 x workers` chunks are in flight; the main process waits for the
oldest before reading on.

A chunk is not validated before it is sent, so a cut that falls inside an event (possible
where a string holds `},{`), or a trace that is malformed or cut short, makes a worker reject
its chunk. Then the whole file is read again by the serial loader, which validates every cut
and salvages broken traces; that costs a second read, only on such files.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter, deque
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import polars as pl

from traceanalyzer.load.chunks import EventSplitter
from traceanalyzer.load.source import ByteSource

# Below this much JSON, starting worker processes (~0.5 s) costs more than it saves.
MIN_PARALLEL_BYTES = 64 << 20
PARALLEL_CHUNK_BYTES = 8 << 20
_ENV_WORKERS = "TRACEANALYZER_WORKERS"  # "1" turns parallel decoding off


def cpu_count() -> int:
    env = os.environ.get(_ENV_WORKERS)
    if env and env.isdigit():
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def estimated_json_bytes(source: ByteSource) -> int:
    """The trace's JSON size: the file size, or for gzip the size in its trailer (ISIZE, the
    size mod 4 GiB, lifted to at least the compressed size)."""
    size = source.total_size
    if not source.compressed:
        return size
    fh = getattr(source, "_fh", None)
    try:
        pos = fh.tell()
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
        fh.seek(pos)
    except (AttributeError, OSError, ValueError):
        return size * 10
    while isize < size:
        isize += 1 << 32
    return isize


def should_use(source: ByteSource) -> bool:
    """Parallel decoding pays off: a large trace, a path we can reopen, more than one CPU."""
    if getattr(source, "_serial_only", False) or not getattr(source, "_owns", False):
        return False
    return cpu_count() > 1 and estimated_json_bytes(source) > MIN_PARALLEL_BYTES


def _decode_chunk(data: bytes) -> tuple[bool, dict[str, pl.DataFrame], Counter, int]:
    """Worker: one chunk `[ev, ...]` -> (ok, non-empty tables by kind, (cat, ph) counts, events)."""
    from traceanalyzer.load.loader import RawTables

    raw = RawTables()
    if not raw.add_chunk(data):
        return False, {}, Counter(), 0
    return True, {k: p[0] for k, p in raw.parts.items() if p}, raw.counts, raw.events


class _Rejected(Exception):
    """A worker could not decode a chunk: read the file serially instead."""


def read_tables(source: ByteSource, chunk_bytes: int | None = None) -> tuple[dict[str, pl.DataFrame], dict, Counter, list[str]]:
    """Same contract as `loader.read_tables`, decoding in worker processes."""
    from traceanalyzer.load.loader import read_tables as serial_read_tables
    from traceanalyzer.load.normalize import FRAME_BUILDERS, empty_frame

    chunk = min(chunk_bytes or PARALLEL_CHUNK_BYTES, PARALLEL_CHUNK_BYTES)
    workers = cpu_count()
    parts: dict[str, list[pl.DataFrame]] = {k: [] for k in FRAME_BUILDERS}
    counts: Counter = Counter()
    events = 0
    pending: deque[Future] = deque()

    def collect(f: Future) -> None:
        nonlocal events
        ok, tables, c, n = f.result()
        if not ok:
            raise _Rejected()
        for kind, df in tables.items():
            parts[kind].append(df)
        counts.update(c)
        events += n

    splitter = EventSplitter(source, chunk)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:

            def submit(data: bytes) -> bool:
                while len(pending) >= 2 * workers:
                    collect(pending.popleft())
                pending.append(pool.submit(_decode_chunk, data))
                return True

            try:
                for _ in splitter.chunks(submit):
                    pass
                while pending:
                    collect(pending.popleft())
            except _Rejected:
                for f in pending:
                    f.cancel()
                raise
    except _Rejected:
        return _serial_again(source, serial_read_tables)

    warnings = []
    split = splitter.split
    if split.truncated:  # the serial path words and salvages this; let it
        return _serial_again(source, serial_read_tables)
    tables = {
        kind: pl.concat(p, how="vertical_relaxed", rechunk=True) if p else empty_frame(kind)
        for kind, p in parts.items()
    }
    del parts
    return tables, split.metadata, counts, warnings


def _serial_again(source: ByteSource, serial_read_tables: Any):
    fresh = ByteSource(source.name, max_decompressed=source.max_decompressed, progress=source.progress)
    fresh._serial_only = True  # type: ignore[attr-defined]
    with fresh:
        return serial_read_tables(fresh)
