"""`load(path) -> Trace`: stream, decode, normalise, link."""

from __future__ import annotations

import os
from collections import Counter
from typing import BinaryIO

import msgspec
import polars as pl

from traceanalyzer.load.chunks import CHUNK_BYTES, EventSplitter
from traceanalyzer.load.decode import COLUMN_BUILDERS, DECODER, bucket
from traceanalyzer.load.normalize import FRAME_BUILDERS, empty_frame
from traceanalyzer.load.source import DEFAULT_MAX_DECOMPRESSED, ByteSource, ProgressFn


class RawTables:
    """Accumulates the typed tables of a trace chunk by chunk."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pl.DataFrame]] = {k: [] for k in FRAME_BUILDERS}
        self.counts: Counter = Counter()
        self.events = 0

    def add_chunk(self, data: bytes) -> bool:
        try:
            events = DECODER.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False
        self.events += len(events)
        for kind, evs in bucket(events, self.counts).items():
            self.parts[kind].append(FRAME_BUILDERS[kind](COLUMN_BUILDERS[kind](evs)))
        return True

    def tables(self) -> dict[str, pl.DataFrame]:
        out = {}
        for kind, parts in self.parts.items():
            out[kind] = pl.concat(parts, how="vertical_relaxed", rechunk=True) if parts else empty_frame(kind)
        return out


def read_tables(
    source: ByteSource, chunk_bytes: int = CHUNK_BYTES
) -> tuple[dict[str, pl.DataFrame], dict, Counter, list[str]]:
    """Decode every event of `source` into per-kind tables; returns (tables, metadata, counts,
    warnings)."""
    raw = RawTables()
    splitter = EventSplitter(source, chunk_bytes)
    for _ in splitter.chunks(raw.add_chunk):
        pass
    warnings = []
    split = splitter.split
    if split.truncated:
        warnings.append(
            f"trace is truncated: {split.truncated}; analysed the {raw.events:,} complete events "
            f"read from {source.decompressed_bytes:,} bytes ({split.skipped_bytes:,} bytes after "
            "the last complete event were skipped)"
        )
    return raw.tables(), split.metadata, raw.counts, warnings


def load(
    path: str | os.PathLike[str] | BinaryIO,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    progress: ProgressFn | None = None,
):
    """Read a Kineto / Chrome trace (`.json` or `.json.gz`, by content) into a `Trace`.

    Streams in bounded memory: the events are decoded chunk by chunk into typed columns and
    never held whole as Python objects.
    """
    from traceanalyzer.trace import build_trace

    with ByteSource(path, max_decompressed=max_decompressed, progress=progress) as source:
        tables, metadata, counts, warnings = read_tables(source)
        name = source.name
    return build_trace(name, tables, metadata, counts, warnings)
