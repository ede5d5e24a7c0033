"""GPU busy and idle time inside the analysis windows, shared by every analysis that speaks of
idle time.

Work is the union over all streams of a device of kernels, memcpys and memsets; `cuda_sync`
markers are not work. The windows are those of `analyses.windows` (the steps, or the trace as
one step).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.intervals import (
    collected,
    coverage_index,
    covered,
    filled,
    filter_rows,
    merge,
    overlap_join,
    series_of,
)
from traceanalyzer.trace import Trace


def busy_intervals(trace: Trace) -> pl.DataFrame:
    """Disjoint busy intervals per device: device, start_ns, end_ns."""
    return merge(trace.gpu.select("device", "ts_ns", "end_ns").filter(pl.col("device").is_not_null()), ["device"])


def clip_to_windows(intervals: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """Intersect intervals (device, start_ns, end_ns, ...) with windows; adds `step`,
    `w_start_ns`, `w_end_ns` and clips start/end. An interval crossing a window boundary is
    split, one piece per window."""
    renamed = {"start_ns": "w_start_ns", "end_ns": "w_end_ns", "device": "w_device"}
    w = pl.DataFrame([c.alias(renamed.get(c.name, c.name)) for c in wins.get_columns()])  # `rename` is a query
    if intervals.is_empty() or w.is_empty():
        return intervals.with_columns(
            step=pl.lit(None, pl.Int64), w_start_ns=pl.lit(None, pl.Int64), w_end_ns=pl.lit(None, pl.Int64)
        ).clear()
    if w.height == 1 and (one := _clip_to_one_window(intervals, w)) is not None:
        return one
    # A sorted sweep per device, sized by its answer (`intervals.overlap_join`): a `join_where`
    # here (IEJoin over every device's pairs, then a filter on the device) took 30 % of `gaps`.
    j = overlap_join(intervals, w, ["device"], ("start_ns", "end_ns"), ("w_start_ns", "w_end_ns"), ["w_device"])
    # one order, every run, whatever the join's (a total one: windows of one device never start
    # together, or differ in their end); then clipped in place and w_device left out, in one query
    clip = {"start_ns": pl.max_horizontal("start_ns", "w_start_ns"), "end_ns": pl.min_horizontal("end_ns", "w_end_ns")}
    return collected(
        j.lazy()
        .sort("device", "start_ns", "w_start_ns", "end_ns", "w_end_ns", "step", maintain_order=True)
        .select(clip.get(c, pl.col(c)).alias(c) for c in j.columns if c != "w_device")
    )


def _clip_to_one_window(intervals: pl.DataFrame, w: pl.DataFrame) -> pl.DataFrame | None:
    """`clip_to_windows` against one window (one device, one step or none: a single-GPU trace
    without ProfilerStep, say) in Series calls, the pairs `overlap_join` finds (an interval
    holding the window's start, or starting strictly inside it); None (the general path) when a
    time is null or the intervals are not in strictly increasing starts (their order there)."""
    dev, s, e = series_of(intervals, ["device", "start_ns", "end_ns"])
    win = w.row(0, named=True)
    d, ws, we = win["w_device"], win["w_start_ns"], win["w_end_ns"]
    if dev.null_count() or s.null_count() or e.null_count() or None in (d, ws, we):
        return None
    keep = (dev == d) & (((s <= ws) & (e > ws) & (we > s)) | ((s > ws) & (s < we)))
    j = filter_rows(intervals, keep)
    n, s, e = j.height, j.get_column("start_ns"), j.get_column("end_ns")
    if n > 1 and not (s.slice(1) > s.slice(0, n - 1)).all():
        return None
    clipped = {"start_ns": s.zip_with(s >= ws, filled(ws, n)), "end_ns": e.zip_with(e <= we, filled(we, n))}
    cols = [clipped[c].alias(c) if c in clipped else j.get_column(c) for c in intervals.columns]
    rest = [filled(win[c], n, w.schema[c]).alias(c) for c in w.columns if c != "w_device"]
    return pl.DataFrame([*cols, *rest])


def idle_intervals(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """Complement of `busy` inside the windows: device, start_ns, end_ns (before clipping),
    prev_end_ns / next_start_ns (the busy edges around it, null at a window edge with no work)."""
    # one lazy query (its dozen frame calls were a query each)
    lo = wins.lazy().group_by("device").agg(pl.col("start_ns").min().alias("lo"), pl.col("end_ns").max().alias("hi"))
    b = busy.lazy().sort(["device", "start_ns"])
    between = b.with_columns(gap_start=pl.col("end_ns"), gap_end=pl.col("start_ns").shift(-1).over("device")).filter(
        pl.col("gap_end").is_not_null()
    )
    first = b.group_by("device").agg(first=pl.col("start_ns").min(), last=pl.col("end_ns").max())
    edges = lo.join(first, on="device", how="left")
    lead = edges.select("device", gap_start=pl.col("lo"), gap_end=pl.coalesce("first", "hi"))
    trail = edges.filter(pl.col("last").is_not_null()).select("device", gap_start=pl.col("last"), gap_end=pl.col("hi"))
    gaps = pl.concat(
        [
            between.select("device", "gap_start", "gap_end"),
            lead.filter(pl.col("gap_end") > pl.col("gap_start")),
            trail.filter(pl.col("gap_end") > pl.col("gap_start")),
        ]
    )
    return collected(
        gaps.select(
            "device",
            start_ns=pl.col("gap_start"),
            end_ns=pl.col("gap_end"),
            prev_end_ns=pl.col("gap_start"),
            next_start_ns=pl.col("gap_end"),
        )
        .unique()
        .sort(["device", "start_ns"])
    )


def busy_by_window(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """device, step, window_ns, busy_ns."""
    clipped = clip_to_windows(busy, wins).lazy()  # then one query (three calls were three)
    per = clipped.group_by("device", "step").agg(busy_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    joined = (
        wins.lazy()
        .join(per, on=["device", "step"], how="left", nulls_equal=True)
        .select(
            "device",
            "step",
            "start_ns",
            "end_ns",
            window_ns=pl.col("end_ns") - pl.col("start_ns"),
            busy_ns=pl.col("busy_ns").fill_null(0),
        )
    )
    return collected(joined)


def idle_within(idle: pl.DataFrame, q: pl.DataFrame, a: str, b: str, out: str) -> pl.DataFrame:
    """Add `out` to `q` (device, a, b): the device's idle time (`idle`: pieces device, start_ns,
    end_ns, as `gap_causes` classifies them) inside [q[a], q[b]]: the GPU time lost while a CPU
    call held its thread, say. Null bounds count nothing."""
    if q.is_empty():
        return q.with_columns(pl.lit(0, pl.Int64).alias(out))
    index = coverage_index(merge(idle.select("device", "start_ns", "end_ns"), ["device"], start="start_ns"), ["device"])
    known = q.filter(pl.col(a).is_not_null() & pl.col(b).is_not_null() & pl.col("device").is_not_null())
    found = covered(known.with_row_index("_q"), index, ["device"], a, b, out).select("_q", out)
    return q.with_row_index("_q").join(found, on="_q", how="left").with_columns(pl.col(out).fill_null(0)).drop("_q")
