"""A chain of frame operations run as one polars query, exactly as the eager calls would run.

Each eager call on a DataFrame (`filter`, `join`, `group_by(...).agg`, `sort`, ...) is a lazy
query of its own, run on the in-memory engine without the optimizer; on a small trace (a rank
of a multi-rank job) its fixed cost, ~20-40 µs, is most of the work. `collect` runs a whole
chain written on `df.lazy()` the same way: the same steps in the same order on the same engine
with the same flags (so the same rows in the same order, whatever the size of the trace), in
one query (2026-12-01, polars 2.1: six steps 246 µs eager, 159 µs as one such query, 235 µs
as one optimised lazy query)."""

from __future__ import annotations

import polars as pl

# What the eager methods run with (`QueryOptFlags._eager()`: no optimisation but expression
# simplification), on the engine they run on.
AS_EAGER = pl.QueryOptFlags.none(simplify_expression=True)


def collect(lf: pl.LazyFrame) -> pl.DataFrame:
    """`lf` on the in-memory engine with the eager methods' flags: one query for the chain."""
    return lf.collect(engine="in-memory", optimizations=AS_EAGER)
