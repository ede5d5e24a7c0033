"""The memory timeline of a device: the allocated and reserved step functions of its `[memory]`
events, decimated only where events crowd into one bucket (see `step_function`)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.trace import Trace

MB = 1024 * 1024  # MiB: memory is shown in MiB everywhere


def step_function(trace: Trace, ev: pl.DataFrame, points: int) -> pl.DataFrame:
    """The allocated and reserved step functions per device, decimated only where events crowd
    into one of `points` buckets: a bucket keeps its first and last event and the events of its
    smallest and largest value (allocated and reserved: the M4 rule), so every change point of
    a sparse stretch is kept, the envelope drawn at that resolution is exact, and an empty
    bucket holds the value before it (never a maximum over time with no event)."""
    if ev.is_empty():
        return pl.DataFrame(
            schema={"device": pl.String, "t_us": pl.Float64, "allocated_mb": pl.Float64, "reserved_mb": pl.Float64}
        )
    lo, hi = ev["ts_ns"].min(), ev["ts_ns"].max()
    width = max((hi - lo) // max(points, 1) + 1, 1)
    s = ev.sort("device", "ts_ns", "pos").with_row_index("_i").with_columns(_b=(pl.col("ts_ns") - lo) // width)
    i = pl.col("_i")
    res = pl.col("total_reserved").fill_null(0)
    keep = (
        s.group_by("device", "_b")
        .agg(
            pl.concat_list(
                i.first(),
                i.last(),
                i.sort_by("allocated").first(),
                i.sort_by("allocated").last(),
                i.sort_by(res).first(),
                i.sort_by(res).last(),
            ).alias("_k")
        )
        .explode("_k")
        .select(_i="_k")
        .unique()
    )
    return (
        s.join(keep, on="_i", how="semi")
        .sort("_i")
        .select(
            "device",
            t_us=(pl.col("ts_ns") - trace.meta.origin_ns) / 1000.0,
            allocated_mb=pl.col("allocated") / MB,
            reserved_mb=pl.col("total_reserved") / MB,
        )
    )
