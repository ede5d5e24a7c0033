"""The interval that overlaps each GPU idle gap's CPU span longest: the runtime call the gap's
thread was in (`runtime_call` gaps, among the trace's other calls), the blocking call another
thread made, the data range of a loading gap. A sweep over sorted intervals (`overlap_join`),
never a cross join."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.cpu_activity import THREAD, rows_at
from traceanalyzer.analyses.intervals import collected, filter_rows, merge, overlap_join, picked
from traceanalyzer.trace import Trace

__all__ = ["largest_overlap", "longest_other_call"]


def largest_overlap(
    gaps: pl.DataFrame, intervals: pl.DataFrame, id_col: str, out: str, same_thread: bool
) -> pl.DataFrame:
    """For each gap (gap_id, cpu_a, cpu_b, pid, tid), the interval overlapping [cpu_a, cpu_b]
    longest: on the gap's thread (same_thread) or on another thread of its process."""
    if gaps.is_empty() or intervals.is_empty():
        return pl.DataFrame(
            schema={"gap_id": pl.UInt32, out: intervals.schema.get(id_col, pl.Int64), f"{out}_overlap_ns": pl.Int64}
        )
    # the gaps and (when small) the intervals as frames of Series: a frame `select` is a polars
    # query, ~25 µs
    names = {id_col: out, "pid": "_pid", "tid": "_tid", "ts_ns": "_s", "end_ns": "_e"}
    iv = picked(intervals, names)
    g = pl.DataFrame([gaps.get_column(c) for c in ("gap_id", "pid", "tid", "cpu_a", "cpu_b")])
    spans = ("cpu_a", "cpu_b"), ("_s", "_e")
    same = (pl.col("_tid") == pl.col("tid")) & (pl.col("_pid") == pl.col("pid"))
    if same_thread:  # pairs on one thread only, never gaps x every thread's intervals
        j = overlap_join(g, iv, ["pid", "tid"], *spans, right_by=["_pid", "_tid"])
    elif not g.get_column("pid").null_count() and not iv.get_column("_pid").null_count():
        # every process known (the usual case): the keyed join alone, without its filters
        j = overlap_join(g, iv, ["pid"], *spans, right_by=["_pid"])
        # the pids are equal: another thread, or one not known to be the same (a null tid)
        other = j.get_column("_tid") != j.get_column("tid")
        j = filter_rows(j, other.fill_null(True) if other.null_count() else other)
    else:
        # Another thread of the gap's process; an unknown process matches any (kept as it was).
        unknown_g, unknown_iv = pl.col("pid").is_null(), pl.col("_pid").is_null()
        keyed = overlap_join(g.filter(~unknown_g), iv.filter(~unknown_iv), ["pid"], *spans, right_by=["_pid"])
        rest = [
            overlap_join(g.filter(unknown_g), iv, [], *spans),
            overlap_join(g.filter(~unknown_g), iv.filter(unknown_iv), [], *spans),
        ]
        j = pl.concat([keyed, *(r.select(keyed.columns) for r in rest)]).filter(~same.fill_null(False))
    # the overlap of each pair (no null time: overlap_join keeps none), then the longest per gap
    # in one query (four frame calls were four)
    e, b, s_, a = (j.get_column(c) for c in ("_e", "cpu_b", "_s", "cpu_a"))
    ov = (e.zip_with(e <= b, b) - s_.zip_with(s_ >= a, a)).alias("_ov")
    return collected(
        pl.DataFrame([j.get_column("gap_id"), j.get_column(out), ov])
        .lazy()
        .sort(["_ov", out], descending=[True, False], nulls_last=True)  # ties: the lowest id, every run
        .unique("gap_id", keep="first")
        .select("gap_id", out, pl.col("_ov").alias(f"{out}_overlap_ns"))
    )


# How many of the other runtime calls are gathered at once to find the runtime_call gaps' calls.
OTHER_CALLS_CHUNK = 1 << 16


def longest_other_call(trace: Trace, rc: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """`largest_overlap` of the runtime_call gaps `rc` with the runtime calls `ids` (those that
    neither launch nor synchronise: most of a trace's calls), on the gap's thread, the calls'
    columns gathered a chunk at a time: the longest of each chunk's longest is the longest,
    ties to the lowest id as in one pass. Gathered whole, with `overlap_join`'s helpers over
    them, they were the largest transient of `classify_gaps` (~120 MB at 1 GB)."""
    cols = {c: c for c in ("runtime_id", *THREAD, "ts_ns", "end_ns")}
    ids = _meeting(trace, rc, ids)
    parts = [
        largest_overlap(
            rc,
            rows_at(trace.runtime, "runtime_id", ids.slice(i, OTHER_CALLS_CHUNK), **cols),
            "runtime_id",
            "rt_call",
            True,
        )
        for i in range(0, max(ids.len(), 1), OTHER_CALLS_CHUNK)
    ]
    if len(parts) == 1:
        return parts[0]
    return (
        pl.concat(parts)
        .sort(["rt_call_overlap_ns", "rt_call"], descending=[True, False], nulls_last=True)
        .unique("gap_id", keep="first")
    )


def _meeting(trace: Trace, rc: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """The calls of `ids` that meet the union of the gaps' spans [cpu_a, cpu_b] on any thread:
    a superset of those `largest_overlap` pairs, found by a search of each call's start among
    the union's ends, the calls' times gathered a block at a time. At 1 GB 38 gaps meet 38 of
    1.06 M calls, whose 17 chunks were each gathered and joined (190 ms of `classified`)."""
    spans = rc.select(lo=pl.min_horizontal("cpu_a", "cpu_b"), hi=pl.max_horizontal("cpu_a", "cpu_b")).drop_nulls()
    union = merge(spans, [], "lo", "hi")
    us, ue, parts = union.get_column("start_ns"), union.get_column("end_ns"), [ids.clear()]
    for i in range(0, ids.len() if union.height else 0, MEET_BLOCK):
        block = ids.slice(i, MEET_BLOCK)
        t = rows_at(trace.runtime, "runtime_id", block, s="ts_ns", e="end_ns")
        s, e = t.get_column("s"), t.get_column("e")
        at = ue.search_sorted(s.fill_null(ue[-1] + 1), side="left")  # the first union span ending at or after s
        meets = (at < union.height) & (us.gather(at.clip(upper_bound=union.height - 1)) <= e)
        parts.append(block.filter(meets.fill_null(False) & s.is_not_null()))
    return pl.concat(parts)


MEET_BLOCK = 1 << 20  # calls whose times `_meeting` gathers at once (16 MB)
