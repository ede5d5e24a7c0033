"""Communication that compute did not hide, per step, from one rank's own trace.

For each step: `comm_us`, the time collective kernels ran (their union: two groups at once count
once); `exposed_us`, the part of it no compute kernel on the same device overlapped (see
`collectives.exposed_segments`); `overlap_share`, the rest over `comm_us`. Whether the exposed
time was waiting for peers or the transfer itself needs the other ranks: the directory mode
(`multirank`) splits it; one file alone cannot.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses import collectives, windows
from traceanalyzer.analyses.intervals import merge
from traceanalyzer.trace import Trace

SCHEMA = {"step": pl.Int64, "comm_us": pl.Float64, "exposed_us": pl.Float64, "overlap_share": pl.Float64}


def _per_step(df: pl.DataFrame, steps: pl.DataFrame, out: str) -> pl.DataFrame:
    """step, `out`: the union of intervals (start_ns, end_ns) inside each step window, in µs."""
    clipped = df.join_where(steps, pl.col("start_ns") < pl.col("_b"), pl.col("end_ns") > pl.col("_a")).select(
        _step=pl.col("step").fill_null(-1),
        ts_ns=pl.max_horizontal("start_ns", "_a"),
        end_ns=pl.min_horizontal("end_ns", "_b"),
    )
    if clipped.is_empty():
        return pl.DataFrame(schema={"_step": pl.Int64, out: pl.Float64})
    m = merge(clipped, ["_step"])
    return m.group_by("_step").agg(((pl.col("end_ns") - pl.col("start_ns")).sum() / 1000.0).alias(out))


def exposed_communication(trace: Trace, collective_pattern: str) -> pl.DataFrame:
    """step, comm_us, exposed_us, overlap_share: one row per step with collective kernels."""
    coll = collectives.rank_collectives(
        trace.gpu, collective_pattern, pl.DataFrame(schema=collectives.COMM_ARGS_SCHEMA)
    )
    if coll.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    exposed = collectives.exposed_segments(trace.gpu, coll)
    steps = windows.step_windows(trace).rename({"start_ns": "_a", "end_ns": "_b"})
    comm = _per_step(coll.select(start_ns="ts_ns", end_ns="end_ns"), steps, "comm_us")
    hidden = _per_step(exposed.select("start_ns", "end_ns"), steps, "exposed_us")
    per = comm.join(hidden, on="_step", how="left").with_columns(pl.col("exposed_us").fill_null(0.0))
    return (
        per.select(
            step=pl.when(pl.col("_step") >= 0).then(pl.col("_step")),
            comm_us="comm_us",
            exposed_us="exposed_us",
            overlap_share=pl.when(pl.col("comm_us") > 0).then(1 - pl.col("exposed_us") / pl.col("comm_us")),
        )
        .cast(SCHEMA)
        .sort("step")
    )
