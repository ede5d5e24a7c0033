"""`load(path) -> Trace`: stream, decode, normalise, sanitise, link."""

from __future__ import annotations

import os
from collections import Counter
from typing import BinaryIO

import polars as pl

from traceanalyzer.errors import TraceReadError
from traceanalyzer.load import parallel
from traceanalyzer.load.build import build_trace
from traceanalyzer.load.sanitize import sanitize
from traceanalyzer.load.source import DEFAULT_MAX_DECOMPRESSED, ByteSource, ProgressFn
from traceanalyzer.load.tables import RawTables, read_serial

__all__ = ["RawTables", "load", "read_tables"]


def read_tables(
    source: ByteSource, chunk_bytes: int | None = None
) -> tuple[dict[str, pl.DataFrame], dict, Counter, list[str]]:
    """Decode every event of `source` into per-kind tables; returns (tables, metadata, counts,
    warnings). With the native decoder (`native.py`) everything is read here on threads; without
    it, large files with more than one CPU are decoded in worker processes (`parallel.py`), the
    rest here (`tables.read_serial`); every path salvages damage alike."""
    if parallel.should_use(source):
        return parallel.read_tables(source, chunk_bytes)
    return read_serial(source, chunk_bytes)


def load(
    path: str | os.PathLike[str] | BinaryIO,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    progress: ProgressFn | None = None,
):
    """Read a Kineto / Chrome trace (`.json` or `.json.gz`, by content) into a `Trace`.

    Streams in bounded memory: the events are decoded chunk by chunk into typed columns and
    never held whole as Python objects. Damaged input is salvaged and `Trace.warnings` says
    what was lost or fixed; unreadable input raises a `TraceAnalyzerError`.
    """
    with ByteSource(path, max_decompressed=max_decompressed, progress=progress) as source:
        tables, metadata, counts, warnings = read_tables(source)
        name = source.name
    try:
        tables, more = sanitize(tables, counts)
        return build_trace(name, tables, metadata, counts, warnings + more)
    except (pl.exceptions.PolarsError, OverflowError) as exc:
        # Values no check above foresaw: still one line for the user, never a traceback.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceReadError(name, f"cannot be analysed: {first[:200]}") from exc
