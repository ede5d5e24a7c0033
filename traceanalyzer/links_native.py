"""`links.nest` and `links.innermost_containing` natively (`_native.nest`, native/src/nest.rs;
`_native.innermost_containing`, native/src/contain.rs): each thread's rows a run of a
permutation sorted in place, then one pass (depth and parent) or a binary search per point and
its climb, the same as the numpy and polars versions give (tests/test_links_native.py). At
1 GB the polars versions' sorted key columns, ranks and as-of joins were the load's peak: the
1 M ops nested in 0.45-0.59 s, +75-80 MB (natively 0.14-0.28 s, +31-44), the 1.3 M runtime
calls' innermost op +117 MB (the load's own peak 466 -> 434 MB, live)."""

from __future__ import annotations

import sys
from typing import Any

import polars as pl

from traceanalyzer.links import CLIMB_LEVELS, clean_ints, with_nesting

# From this many rows (of both tables, for the innermost intervals; of the CPU tables of the
# trace, for the loader, which imports numpy then) the native versions run even where numpy,
# which hands them the columns, is not imported yet: its import costs ~0.12 s and ~13 MB of RSS
# for the rest of the run (311 MB `gaps`: 221-223 -> 235-239 MB), more than the transients it
# saves below that (~50 B a row, at the load's peak only).
NATIVE_ROWS = 1_000_000


def native_loop(name: str, rows: int) -> Any:
    """`_native.<name>` (`load.native.kernel`) for a table of `rows` rows, numpy imported for
    it; None where the module is not built or is turned off (TRACEANALYZER_NATIVE=0), or numpy
    is neither imported nor worth importing (`NATIVE_ROWS`)."""
    from traceanalyzer.load import native

    fn = native.kernel(name)
    if fn is None or ("numpy" not in sys.modules and rows < NATIVE_ROWS):
        return None
    import numpy  # noqa: F401 - what hands the columns to the native loops

    return fn


def nest_native(df: pl.DataFrame, id_col: str, group: list[str]) -> pl.DataFrame | None:
    """`nest(df, id_col, group)` natively; None (another version) where the module is not built
    or turned off (TRACEANALYZER_NATIVE=0), the group is not two columns, numpy is neither
    imported nor worth importing (`NATIVE_ROWS`), a key or time is null or no integer, or two
    rows of a thread have the same start, end and id (their order is the polars version's)."""
    if len(group) != 2 or df.schema[id_col] == pl.UInt64 or (fn := native_loop("nest", df.height)) is None:
        return None
    import numpy as np

    cols = clean_ints(df, [*group, "ts_ns", "end_ns", id_col])
    if cols is None:
        return None
    cols = [np.ascontiguousarray(c, dtype=np.int64) for c in cols]
    depth, at = np.empty(df.height, dtype=np.int32), np.empty(df.height, dtype=np.int64)
    if not fn(*cols, depth, at):
        return None
    has = at >= 0
    return with_nesting(df, id_col, depth, cols[4][np.maximum(at, 0)], has)


def innermost_native(
    points: pl.DataFrame, intervals: pl.DataFrame, id_col: str, out_col: str, group: list[str], point_end: str
) -> pl.DataFrame | None:
    """`innermost_containing(points, intervals, ...)` natively (`_native.innermost_containing`);
    None (another version) where `nest_native` would decline, or ids repeat."""
    rows = points.height + intervals.height
    if len(group) != 2 or intervals.schema[id_col] == pl.UInt64:
        return None
    if (fn := native_loop("innermost_containing", rows)) is None:
        return None
    import numpy as np

    deep = ["depth"] if "depth" in intervals.columns else []
    pcols = clean_ints(points, [*group, "ts_ns", point_end])
    icols = clean_ints(intervals, [*group, "ts_ns", "end_ns", *deep, id_col])
    parent = intervals.get_column("parent_id")
    if pcols is None or icols is None or not parent.dtype.is_integer():
        return None
    *icols, ids = icols
    depth = icols.pop() if deep else np.zeros(0, dtype=np.int64)
    has_parent = parent.is_not_null().to_numpy().view(np.uint8)
    parent_ids = parent.fill_null(0).cast(pl.Int64).to_numpy()
    c = [np.ascontiguousarray(a, dtype=np.int64) for a in (*pcols, *icols, depth, ids, parent_ids)]
    out, found = np.empty(points.height, dtype=np.int64), np.empty(points.height, dtype=np.uint8)
    if not fn(*c, np.ascontiguousarray(has_parent), CLIMB_LEVELS, out, found):
        return None
    id_type = intervals.schema[id_col]
    col = pl.Series(out_col, out).cast(id_type)
    col = col.zip_with(pl.Series(found.view(np.bool_)), pl.Series([None], dtype=id_type).new_from_index(0, len(out)))
    return points.with_columns(col) if out_col in points.columns else points.hstack([col])
