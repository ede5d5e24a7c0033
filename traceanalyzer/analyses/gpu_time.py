"""GPU busy and idle time inside the analysis windows, shared by every analysis that speaks of
idle time.

Work is the union over all streams of a device of kernels, memcpys and memsets; `cuda_sync`
markers are not work. The windows are those of `analyses.windows` (the steps, or the trace as
one step).
"""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.analyses.intervals import (
    SMALL_ROWS,
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


def _idle_small(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame | None:
    """`idle_intervals` on numpy arrays (its query was ~1 ms on a DLRM rank's few hundred
    intervals); None (the query) where a column holds a null or the frames' types differ."""
    if (np := sys.modules.get("numpy")) is None:  # imported by the decoder; its own import costs more
        return None
    cols = [*series_of(busy, ["device", "start_ns", "end_ns"]), *series_of(wins, ["device", "start_ns", "end_ns"])]
    if any(c.null_count() or c.dtype != pl.Int64 for c in cols[1:3] + cols[4:]) or cols[0].dtype != cols[3].dtype:
        return None
    if any(c.null_count() for c in (cols[0], cols[3])) or not cols[0].dtype.is_integer() or cols[0].dtype == pl.UInt64:
        return None
    bd, bs, be, wd, ws, we = (c.cast(pl.Int64).to_numpy() for c in cols)
    order = np.lexsort((bs, bd))
    bd, bs, be = bd[order], bs[order], be[order]
    same = bd[1:] == bd[:-1]
    parts = [np.stack([bd[:-1][same], be[:-1][same], bs[1:][same]], axis=1)]  # between two busy intervals
    for dev in np.unique(wd):
        in_w, in_b = wd == dev, bd == dev
        lo, hi = ws[in_w].min(), we[in_w].max()
        first, last = (bs[in_b].min(), be[in_b].max()) if in_b.any() else (hi, None)
        edges = [(dev, lo, first)] + ([(dev, last, hi)] if last is not None else [])
        parts.append(np.array([e for e in edges if e[2] > e[1]], dtype=np.int64).reshape(-1, 3))
    # distinct rows in (device, start, end) order: the query's `unique` then sort
    rows = np.unique(np.concatenate(parts), axis=0)
    device = pl.Series("device", rows[:, 0]).cast(cols[0].dtype)
    start, end = pl.Series("start_ns", rows[:, 1]), pl.Series("end_ns", rows[:, 2])
    return pl.DataFrame([device, start, end, start.alias("prev_end_ns"), end.alias("next_start_ns")])


def _idle_disjoint(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame | None:
    """`idle_intervals` of busy intervals as `merge` returns them (sorted by device, then start,
    each starting after the one before it on its device ends), in Series slices: there the
    query's gaps are already distinct and, per device, in start order (the leading gap before
    the first, the trailing one after the last), so neither its `unique` nor its sort is needed
    (1 GB: ~0.2 s). None (the query, or `_idle_small`) where the busy intervals are not so, a
    column holds a null, or the frames' types differ."""
    bd, bs, be, wd, ws, we = cols = [
        *series_of(busy, ["device", "start_ns", "end_ns"]),
        *series_of(wins, ["device", "start_ns", "end_ns"]),
    ]
    if wins.is_empty() or any(c.null_count() for c in cols) or bd.dtype != wd.dtype or not bd.dtype.is_integer():
        return None
    if any(c.dtype != pl.Int64 for c in (bs, be, ws, we)):
        return None
    n = bd.len()
    head, tail = (lambda c: c.slice(1)), (lambda c: c.slice(0, max(n - 1, 0)))
    same = head(bd) == tail(bd)
    if (head(bd) < tail(bd)).any() or (same & (head(bs) <= tail(be))).any() or (be < bs).any():
        return None
    w_of = {
        d: (lo, hi)
        for d, lo, hi in pl.DataFrame([wd, ws, we])
        .group_by("device")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .iter_rows()
    }
    devices = sorted(set(bd.unique().to_list()) | set(w_of))
    out_d, out_s, out_e = [], [], []
    for dev in devices:
        a, b = int(bd.search_sorted(dev, side="left")), int(bd.search_sorted(dev, side="right"))
        lead, trail = None, None
        if dev in w_of:
            lo, hi = w_of[dev]
            lead = (lo, bs[a] if b > a else hi)
            trail = (be[b - 1], hi) if b > a else None
        starts, ends = [], []
        if lead is not None and lead[1] > lead[0]:
            starts.append(pl.Series([lead[0]], dtype=pl.Int64)), ends.append(pl.Series([lead[1]], dtype=pl.Int64))
        if b > a:  # between two busy intervals
            starts.append(be.slice(a, b - a - 1)), ends.append(bs.slice(a + 1, b - a - 1))
        if trail is not None and trail[1] > trail[0]:
            starts.append(pl.Series([trail[0]], dtype=pl.Int64)), ends.append(pl.Series([trail[1]], dtype=pl.Int64))
        s = pl.concat(starts, rechunk=False) if starts else pl.Series([], dtype=pl.Int64)
        out_s.append(s), out_e.append(pl.concat(ends, rechunk=False) if ends else s)
        out_d.append(pl.Series([dev], dtype=bd.dtype).new_from_index(0, s.len()))
    start = pl.concat(out_s).alias("start_ns")
    end = pl.concat(out_e).alias("end_ns")
    return pl.DataFrame(
        [pl.concat(out_d).alias("device"), start, end, start.alias("prev_end_ns"), end.alias("next_start_ns")]
    )


def idle_intervals(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """Complement of `busy` inside the windows: device, start_ns, end_ns (before clipping),
    prev_end_ns / next_start_ns (the busy edges around it, null at a window edge with no work)."""
    if (disjoint := _idle_disjoint(busy, wins)) is not None:
        return disjoint
    if busy.height + wins.height < SMALL_ROWS and (small := _idle_small(busy, wins)) is not None:
        return small
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


def _busy_small(clipped: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame | None:
    """`busy_by_window` of the clipped busy intervals summed per window in a dict (its query was
    ~0.5 ms on a small rank); None (the query) for many rows or windows, or busy time not Int64."""
    if clipped.height >= SMALL_ROWS or wins.height >= SMALL_ROWS:  # a Python loop over the rows
        return None
    if clipped.schema["start_ns"] != pl.Int64 or clipped.schema["end_ns"] != pl.Int64:
        return None
    per: dict[tuple, int] = {}
    device, step, a, b = (clipped.get_column(c).to_list() for c in ("device", "step", "start_ns", "end_ns"))
    for key, s, e in zip(zip(device, step), a, b):
        per[key] = per.get(key, 0) + (e - s if s is not None and e is not None else 0)
    w_device, w_step, w_start, w_end = series_of(wins, ["device", "step", "start_ns", "end_ns"])
    got = [per.get(key, 0) for key in zip(w_device.to_list(), w_step.to_list())]
    window = (w_end - w_start).alias("window_ns")
    return pl.DataFrame([w_device, w_step, w_start, w_end, window, pl.Series("busy_ns", got, pl.Int64)])


def busy_by_window(busy: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """device, step, window_ns, busy_ns."""
    clipped = clip_to_windows(busy, wins)
    if (small := _busy_small(clipped, wins)) is not None:
        return small
    clipped = clipped.lazy()  # then one query (three calls were three)
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
