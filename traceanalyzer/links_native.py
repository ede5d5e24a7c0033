"""`links.nest` natively (`_native.nest`, native/src/nest.rs): each thread's rows a run of a
permutation sorted in place, their depth and parent in one pass, the same as the numpy and
polars versions give (tests/test_links_native.py). A 1 GB trace's 1 M ops: the polars version
held +129 MB of sorted key columns, ranks and as-of joins at the load's peak and took ~0.2 s."""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.links import clean_ints, with_nesting

# From this many rows a table is nested natively even where numpy, which hands the columns
# over, is not imported yet: its import (~0.12 s) against the polars version's transients.
NATIVE_ROWS = 500_000


def nest_native(df: pl.DataFrame, id_col: str, group: list[str]) -> pl.DataFrame | None:
    """`nest(df, id_col, group)` natively; None (another version) where the module is not built
    or turned off (TRACEANALYZER_NATIVE=0), the group is not two columns, numpy is neither
    imported nor worth importing (`NATIVE_ROWS`), a key or time is null or no integer, or two
    rows of a thread have the same start, end and id (their order is the polars version's)."""
    from traceanalyzer.load import native

    fn = native.kernel("nest")
    if fn is None or len(group) != 2 or df.schema[id_col] == pl.UInt64:
        return None
    if "numpy" not in sys.modules and df.height < NATIVE_ROWS:
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
