"""The native decoder: `traceanalyzer._native` (Rust, native/) reads a chunk of events into the
same per-kind tables as `decode` + `normalize`, on several threads with the GIL released.

It is used whenever the extension is importable and `TRACEANALYZER_NATIVE` is not "0". It reads a
chunk natively only when every value follows the rules it implements (int64 ns from the number's
text, ids beyond int64 null and counted, string pids, names as a dictionary of distinct strings,
raw texts of list args); for anything else (damage, invalid UTF-8, floats or booleans where ids
belong, exponents in times, duplicate keys) it returns None and `RawTables.add_chunk` reads the
chunk with the Python decoder, which validates, salvages and words the warnings. So a damaged or
odd file gives the Python path's answer, and a clean one the same tables, faster.

A decoded chunk is appended to the trace's columns in Rust (`_native.Columns`, held by
`RawTables`): one column per kind and field for the whole trace, strings as one dictionary of
distinct values per column (each distinct name becomes a string once per trace) and a code per
row. At the end `frames` takes each finished column once as an Arrow array through the Arrow
PyCapsule protocol (`__arrow_c_array__`), which polars imports without copying the buffers;
a string column is its dictionary (an Arrow string array built in Rust) gathered by its codes,
so every row is a view into one compact buffer of the distinct values, as
`normalize.interned` keeps names. No Python object per chunk per column, no concatenation.

The same module holds the what-if model's replay loop (`replay_loop`, used by
`analyses.replay`), under the same switch.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import polars as pl

from traceanalyzer.load.cpus import cpu_count
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


def kernel(name: str, force: bool = False) -> Any:
    """`_native.<name>`, one of the module's loops besides the decoder (the what-if model's,
    the nesting's of `links_native`, the health check's crossing events), or None: not built (or built before it had that one),
    or turned off with the decoder by TRACEANALYZER_NATIVE=0 (`force`: regardless)."""
    if _native is None or not (force or enabled()):
        return None
    return getattr(_native, name, None)


def threads() -> int:
    """Decoding threads: the CPUs this process may use (`load.cpus`)."""
    return cpu_count()


def chunk_bytes() -> int:
    """The splitter's chunk size on the native path (a piece per thread)."""
    return CHUNK_BYTES_PER_THREAD * threads()


def decode(data: bytes | bytearray | memoryview) -> Any | None:
    """One chunk `[ev, ...]` decoded (to `append` to a `columns()`), or None when Python must read it."""
    if _native is None:
        return None
    return _native.decode_chunk(data, threads())  # read in place, no copy


def columns() -> Any:
    """A trace's native columns (`_native.Columns`): chunks are appended in file order, the
    finished tables taken once by `frames`."""
    return _native.Columns()


def add_pieces(decoded: Any, cols: Any, counts: Counter, fixes: Counter) -> int:
    """Append a decoded chunk to the trace's columns, and its (cat, ph) counts and fixes to
    a `RawTables`'; the events read."""
    events, piece_counts, big, strings = cols.append(decoded)
    for cat, ph, k in piece_counts:
        counts[(cat, ph)] += k
    if big:
        fixes[BIG_IDS] += big
    if strings:
        fixes[STRING_IDS] += strings
    return events


def _null_column(name: str, dtype: pl.DataType, rows: int) -> pl.Series:
    """A column without a value, whose buffers are never written: a gather of nulls writes a
    view per row (~22 bytes a row measured), and a null numeric column from Rust holds 8 bytes a
    row (`graph_id` of most traces: 2.4 MB at 1 GB); this one holds untouched zeroed pages.
    A short one is a null repeated by index: no polars query (~40 µs each, ~15 a small rank)."""
    if rows <= SHORT_NULL_ROWS:
        return pl.Series(name, [None], dtype=dtype).new_from_index(0, rows)
    return pl.repeat(None, rows, dtype=dtype, eager=True).alias(name)


SHORT_NULL_ROWS = 1 << 16


def _strings(name: str, dictionary: Any, codes: Any) -> pl.Series:
    """A dictionary column: the distinct values (entry 0 is null) gathered by code. Raw JSON
    texts are made compact and grids parsed once per distinct value of the trace."""
    distinct = pl.Series(dictionary)
    if name in _JSON_TEXT:
        distinct = pl.Series(name, [v if v is None else compact(v) for v in distinct.to_list()], dtype=pl.String)
    elif name in _INT_LIST:
        distinct = int_list_of(distinct.alias(name))
    codes = pl.Series(codes)
    if distinct.len() - distinct.null_count() == 0:  # no value at all: nothing to gather
        return _null_column(name, distinct.dtype, codes.len())
    # indexing by a Series of positions is the same take as `gather`, without a polars query
    # (~25 µs each, a few dozen string columns a small rank); a null code would need `gather`
    return (distinct[codes] if not codes.null_count() else distinct.gather(codes)).alias(name)


def _numbers(name: str, array: Any) -> pl.Series:
    """A numeric column moved from Rust; one entirely null is replaced (its buffer freed)."""
    column = pl.Series(array).alias(name)
    if column.len() and column.null_count() == column.len():
        return _null_column(name, column.dtype, column.len())
    return column


def frames(cols: Any) -> dict[str, pl.DataFrame]:
    """The trace's finished tables by kind (those with rows), each column one Arrow array
    moved from Rust (numbers are not copied; strings are views into their dictionary)."""
    out = {}
    for kind, _rows, specs in cols.finish():
        out[kind] = pl.DataFrame(
            [_strings(name, a, b) if tag == "s" else _numbers(name, a) for name, tag, a, b in specs]
        )
    return out
