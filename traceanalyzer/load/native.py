"""The native decoder: `traceanalyzer._native` (Rust, native/) reads a chunk of events into the
same per-kind tables as `decode` + `normalize`, on several threads with the GIL released.

It is used whenever the extension is importable and `TRACEANALYZER_NATIVE` is not "0". It reads a
chunk natively only when every value follows the rules it implements (int64 ns from the number's
text, ids beyond int64 null and counted, string pids, names as a dictionary of distinct strings,
raw texts of list args); for anything else (damage, invalid UTF-8, floats or booleans where ids
belong, exponents in times, duplicate keys) it returns None and `RawTables.add_chunk` reads the
chunk with the Python decoder, which validates, salvages and words the warnings. So a damaged or
odd file gives the Python path's answer, and a clean one the same tables, faster.

The columns come back as little-endian buffers (int64/float64 values, uint32 null rows, uint32
dictionary codes) and become polars Series through numpy, without a Python object per value;
strings come as the list of their distinct values, gathered by the codes (one buffer per
distinct value, as `normalize.interned` keeps names).

The same module holds the what-if model's replay loop (`replay_loop`, used by
`analyses.replay`), under the same switch.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.load.normalize import BIG_IDS, STRING_IDS, compact, int_list_of

try:
    import traceanalyzer._native as _native  # the extension module alone, not the package's API
except ImportError:  # pragma: no cover - built by `pip install -e .`; the pure path still works
    _native = None

ENV = "TRACEANALYZER_NATIVE"  # "0": always the pure Python decoder
# Bytes of JSON per thread and chunk: a few ms of work per thread, little to hold. At 8 MiB
# (16 MiB chunks) the peak RSS of loading 100 MB was 304 MB against 224 MB at 2 MiB, for the
# same CPU time: big short-lived buffers fragment the heap.
CHUNK_BYTES_PER_THREAD = 2 << 20
_JSON_TEXT = frozenset({"input_dims", "input_type", "concrete_inputs"})
_INT_LIST = frozenset({"grid", "block"})


def available() -> bool:
    """The extension module is built and importable."""
    return _native is not None


def enabled() -> bool:
    """The native decoder is used: built, and not turned off with TRACEANALYZER_NATIVE=0."""
    return _native is not None and os.environ.get(ENV, "1").strip() != "0"


def replay_loop(force: bool = False) -> Any:
    """The native replay loop of `analyses.replay` (`_native.replay`), or None: not built (or
    built before it had one), or turned off with TRACEANALYZER_NATIVE=0 (`force`: regardless)."""
    if _native is None or not (force or enabled()):
        return None
    return getattr(_native, "replay", None)


def threads() -> int:
    """Decoding threads: the CPUs this process may use (`TRACEANALYZER_WORKERS` overrides)."""
    env = os.environ.get("TRACEANALYZER_WORKERS")
    if env and env.isdigit():
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def chunk_bytes() -> int:
    """The splitter's chunk size on the native path (a piece per thread)."""
    return CHUNK_BYTES_PER_THREAD * threads()


def decode(data: bytes | bytearray | memoryview) -> list[tuple] | None:
    """The pieces of one chunk `[ev, ...]` (see `add_pieces`), or None when Python must read it."""
    if _native is None:
        return None
    return _native.decode_chunk(data, threads())  # read in place, no copy


def _u32(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.uint32)


def _strings(name: str, values: list[str | None], codes: bytes) -> pl.Series:
    """The column of a dictionary: the distinct values (values[0] is null) gathered by code."""
    if name in _JSON_TEXT:
        distinct = pl.Series(name, [v if v is None else compact(v) for v in values], dtype=pl.String)
    elif name in _INT_LIST:
        distinct = int_list_of(pl.Series(name, values, dtype=pl.String))
    else:
        distinct = pl.Series(name, values, dtype=pl.String)
    return distinct.gather(pl.Series(_u32(codes)))


def _column(name: str, tag: str, values: Any, extra: bytes) -> pl.Series:
    if tag == "s":
        return _strings(name, values, extra)
    s = pl.Series(name, np.frombuffer(values, dtype=np.int64 if tag == "i" else np.float64))
    return s.scatter(_u32(extra), None) if extra else s


def add_pieces(pieces: list[tuple], parts: dict[str, list[pl.DataFrame]], counts: Counter, fixes: Counter) -> int:
    """Put decoded pieces into a `RawTables`' parts, (cat, ph) counts and fixes; the events read."""
    events = 0
    for n, piece_counts, big, strings, tables in pieces:
        events += n
        for cat, ph, k in piece_counts:
            counts[(cat, ph)] += k
        if big:
            fixes[BIG_IDS] += big
        if strings:
            fixes[STRING_IDS] += strings
        for kind, (_rows, cols) in tables.items():
            parts[kind].append(pl.DataFrame([_column(*c) for c in cols]))
    return events
