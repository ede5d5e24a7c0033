"""Who caused each idle gap: the op, range and Python line behind it, the call it sat in, what the
GPU waited on, and any other thread of the process blocked meanwhile. Reads the classified gaps
of `gap_causes`; `gaps` turns the result into its tables."""

from __future__ import annotations

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses.attribution import op_context, python_line_at
from traceanalyzer.analyses.cpu_activity import by_gap, rows_at
from traceanalyzer.analyses.gap_causes import ClassifiedGaps
from traceanalyzer.analyses.gap_overlaps import largest_overlap
from traceanalyzer.analyses.intervals import SMALL_ROWS, filled, filter_rows, overlap_join, picked, series_of
from traceanalyzer.analyses.modules import op_modules
from traceanalyzer.causes import CULPRITS, WAITED_ON, culprit_causes
from traceanalyzer.patterns import COLLECTIVE, GRAPH_LAUNCH, PROFILER_STEP
from traceanalyzer.trace import Trace


def _most_self_time_op(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """For cpu_bound gaps, the op with the most self time inside [cpu_a, cpu_b] on the thread."""
    cols = ["gap_id", "pid", "tid", "cpu_a", "cpu_b"]
    g = filter_rows(pl.DataFrame(series_of(gaps, cols)), gaps.get_column("cause") == "cpu_bound")  # no query
    if g.is_empty():
        return pl.DataFrame(schema={"gap_id": pl.UInt32, "cpu_op_id": pl.Int64})
    # Every op of the gap's threads near the gaps (`overlap_join` narrows the op table to them
    # before sorting it), then those that are real ops: on a large trace the kind and name tests
    # run on the pairs, not on every op of the trace; a small op table is tested whole first
    # (the same pairs, and the join's pairs fewer).
    names = {"op_id": "op_id", "parent_id": "parent_id", "kind": "kind", "name": "name"}
    names |= {"pid": "_pid", "tid": "_tid", "ts_ns": "_s", "end_ns": "_e"}
    ops = picked(trace.ops, names)
    real = (pl.col("kind") == "cpu_op") & ~pl.col("name").str.contains(PROFILER_STEP)
    if ops.height < SMALL_ROWS:
        ops = ops.filter(real)
    # pairs on the gap's own thread only (never gaps x every thread's ops)
    j = overlap_join(g, ops, ["pid", "tid"], ("cpu_a", "cpu_b"), ("_s", "_e"), right_by=["_pid", "_tid"])
    if ops.height >= SMALL_ROWS:
        j = j.filter(real)
    # Four columns of the pairs from here on: they are the largest frame of `gaps`. (One query
    # run as the eager calls run, `chain`: they were five, ~0.3 ms a small rank.)
    j = j.lazy().select(
        "gap_id", "op_id", "parent_id", _ov=pl.min_horizontal("_e", "cpu_b") - pl.max_horizontal("_s", "cpu_a")
    )
    child = j.group_by("gap_id", "parent_id").agg(_child=pl.col("_ov").sum()).rename({"parent_id": "op_id"})
    j = j.join(child, on=["gap_id", "op_id"], how="left").select(
        "gap_id", "op_id", _self=pl.col("_ov") - pl.col("_child").fill_null(0)
    )
    # The most self time per gap, ties to the lowest op id (every run alike): one group-by, no
    # window and no sort of the pairs.
    return chain.collect(
        j.group_by("gap_id").agg(cpu_op_id=pl.col("op_id").filter(pl.col("_self") == pl.col("_self").max()).min())
    )


def _runtime_at(trace: Trace, ids: pl.Series, **cols: str) -> pl.DataFrame:
    """`rows_at` of the runtime calls."""
    return rows_at(trace.runtime, "runtime_id", ids, **cols)


def _waited_on(gaps: pl.DataFrame) -> pl.Expr:
    name = pl.col("next_name").fill_null("")
    api = pl.col("launch_api").fill_null("")
    return (
        pl.when(~pl.col("cause").is_in(WAITED_ON))
        .then(pl.lit(None, pl.String))
        .when(pl.col("launched_before_trace").fill_null(False))
        .then(pl.lit("work queued before the trace began (its launch is not in the trace)"))
        .when(api.str.contains(GRAPH_LAUNCH))
        .then(pl.lit("a dependency inside a CUDA graph replay (") + api + pl.lit(")"))
        .when(name.str.contains(COLLECTIVE))
        .then(pl.lit("a collective's peers (") + name.str.slice(0, 40) + pl.lit(")"))
        .when(pl.col("stream_wait").is_not_null())
        .then(
            pl.lit("an event recorded on stream ")
            + pl.col("stream_wait").cast(pl.String)
            + pl.lit(" (Stream Wait Event)")
        )
        .otherwise(
            pl.lit("another stream or an event (queued ")
            + ((pl.col("start_ns") - pl.col("launch_ts_ns")) / 1000).round(1).cast(pl.String)
            + pl.lit(" µs before the gap)")
        )
    )


def _stream_waits(trace: Trace, gaps: pl.DataFrame) -> pl.Series:
    """stream_wait per gap (in the gaps' order): the stream of the latest `Stream Wait Event`
    marker on the next activity's stream before it started, found on five narrow columns (the
    as-of join sorts what it carries)."""
    if trace.sync_markers.is_empty() or gaps.is_empty():  # no marker: no query (three were)
        return filled(None, gaps.height).alias("stream_wait")
    marks = trace.sync_markers.filter(pl.col("name").str.contains("Wait")).select(
        "device", "stream", "wait_on_stream", pl.col("ts_ns").alias("_mts")
    )
    if marks.is_empty():
        return filled(None, gaps.height).alias("stream_wait")
    j = (
        gaps.select("gap_id", "device", "next_stream", "end_ns", "launch_ts_ns")
        .sort("end_ns")
        .join_asof(
            marks.sort("_mts").rename({"stream": "next_stream"}),
            left_on="end_ns",
            right_on="_mts",
            by=["device", "next_stream"],
            strategy="backward",
            check_sortedness=False,
        )
    )
    found = j.select(
        "gap_id",
        stream_wait=pl.when(pl.col("_mts") >= pl.col("launch_ts_ns").fill_null(0)).then(pl.col("wait_on_stream")),
    )
    return by_gap(gaps.height, found).to_series()


def _python_line_fallback(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """Where no op names a Python line, the user-code line the thread was at in the middle of
    the CPU interval."""
    need = chain.collect(
        gaps.lazy()
        .filter(pl.col("python_frame").is_null() & pl.col("pid").is_not_null())
        .select("gap_id", "pid", "tid", ts_ns=((pl.col("cpu_a") + pl.col("cpu_b")) // 2))
    )
    found = python_line_at(trace, need, "gap_id").rename({"python_frame": "_line"})
    line = by_gap(gaps.height, found).to_series()
    return gaps.with_columns(python_frame=pl.coalesce(pl.col("python_frame"), line))


def name_culprits(trace: Trace, classified: ClassifiedGaps) -> pl.DataFrame:
    """The classified pieces (`gap_causes.PIECE_COLUMNS`) with, per gap: op, range, op_chain, python_frame (the culprit's
    context), sync_api, call_api / call_ns (the runtime call a sync, slow_launch or
    runtime_call gap sat in), waited_on (gpu_wait) and blocked_thread."""
    # What is found per gap is put beside the pieces by gap_id, their row number (`cpu_activity.by_gap`):
    # no join copies the pieces' ~25 columns (a 1 GB trace has ~300 k gaps).
    pieces = classified.pieces
    n = pieces.height
    ids = pieces.get_column("gap_id")
    if n and not (ids[0] == 0 and ids[n - 1] == n - 1 and ids.is_sorted()):  # classify_gaps numbers its rows
        raise ValueError("the classified pieces are not in gap_id order (gap_causes.classify_gaps)")
    pieces = pieces.hstack([_stream_waits(trace, pieces)])
    # Name the culprit: the blocking call, the data range, the busiest op, or the launching op.
    loading = filter_rows(
        pl.DataFrame(series_of(pieces, ["gap_id", "pid", "tid", "cpu_a", "cpu_b"])),
        pieces.get_column("cause") == "data_loading",
    )
    data_range = largest_overlap(loading, classified.data_ranges, "op_id", "data_op", True)
    busiest = _most_self_time_op(trace, pieces)
    pieces = pieces.hstack([*by_gap(n, data_range.select("gap_id", "data_op")), *by_gap(n, busiest)])
    pieces = pieces.hstack(_runtime_at(trace, pieces["sync_call"], sync_op_id="op_id", sync_api="name"))
    # The runtime call a runtime_call gap sat in (the longest on the thread in the interval).
    # (found by gap_causes, which keys start-up on it)
    # (Series filters and frames of Series: a frame's `select`, `filter` and `drop` are a polars
    # query each, ~25 µs, and a DLRM rank names its few hundred gaps so)
    call = pieces.get_column("rt_call")
    known = call.is_not_null()
    found = _runtime_at(trace, call.filter(known), rt_op_id="op_id", rt_api="name", rt_ns="dur_ns")
    found.insert_column(0, pieces.get_column("gap_id").filter(known))
    pieces = pl.DataFrame([c for c in pieces.get_columns() if c.name not in ("rt_call", "rt_call_overlap_ns")])
    pieces = pieces.hstack(by_gap(n, found))
    del call, known, found
    pieces = pieces.hstack(_runtime_at(trace, pieces["sync_call"], sync_ns="dur_ns"))
    cause = pl.col("cause")
    python_only = pl.col("t_python") > pl.col("t_cpu_op")
    # A slow launch names its call when the call took the time, else the op that did.
    slow_call = (pl.col("launch_end_ns") - pl.col("launch_ts_ns")) * 2 >= pl.col("end_ns") - pl.col("start_ns")
    # The culprit op, found as the registry says for each cause (causes.Cause.culprit); a cause
    # with no culprit (kernel_spacing: nothing on the CPU made that gap) or found by its Python
    # line only gets none.
    how = {
        "blocking_call": pl.col("sync_op_id"),
        "data_range": pl.col("data_op"),
        # CPU time in Python frames with no op under them: the frame names it (python_frame).
        "busiest_op": pl.when(python_only).then(None).otherwise(pl.col("cpu_op_id")),
        "runtime_call": pl.col("rt_op_id"),
        "launching_op": pl.col("launch_op_id"),
        "python_line": pl.lit(None, pl.Int64),
    }
    culprit_op = pl.lit(None, pl.Int64)
    for kind in reversed(CULPRITS):
        culprit_op = pl.when(cause.is_in(culprit_causes(kind))).then(how[kind]).otherwise(culprit_op)
    pieces = pieces.with_columns(
        call_api=pl.when(cause == "sync")
        .then(pl.col("sync_api"))
        .when((cause == "slow_launch") & (slow_call))
        .then(pl.col("launch_api"))
        .when(cause == "runtime_call")
        .then(pl.col("rt_api")),
        call_ns=pl.when(cause == "sync")
        .then(pl.col("sync_ns"))
        .when((cause == "slow_launch") & slow_call)
        .then(pl.col("launch_end_ns") - pl.col("launch_ts_ns"))
        .when(cause == "runtime_call")
        .then(pl.col("rt_ns")),
        culprit_op_id=culprit_op,
    )
    # The culprit's context and the nn.Module it ran in (traces captured with_modules): joined
    # to the culprit column alone, then put beside the pieces (in their order).
    ctx = op_context(trace, pieces["culprit_op_id"]).rename({"op_id": "culprit_op_id"})
    modules = op_modules(trace).select(culprit_op_id="op_id", module="module_path")
    named = chain.collect(
        pieces[["culprit_op_id"]]
        .lazy()
        .join(ctx.lazy(), on="culprit_op_id", how="left", maintain_order="left")
        .join(modules.lazy(), on="culprit_op_id", how="left", maintain_order="left")
    )
    # The culprit's helper columns go once read (311 MB: ~6 MB of 85 k rows, beside the gaps'
    # widest frame while the blocked threads and the waits are told below).
    helpers = {"data_op", "cpu_op_id", "sync_op_id", "rt_op_id", "rt_api", "rt_ns", "sync_ns", "culprit_op_id"}
    pieces = pl.DataFrame(
        [c for c in pieces.get_columns() if c.name not in helpers]
        + [c for c in named.get_columns() if c.name not in ("culprit_op_id", "named_op_id")]
    )
    del named
    pieces = _python_line_fallback(trace, pieces)
    # Any other thread of the process sitting in a blocking call during the gap.
    # The launching thread is left out (its state is the cause); with no known launch, none is.
    span = picked(
        pieces, {"gap_id": "gap_id", "pid": "pid", "launch_tid": "tid", "start_ns": "cpu_a", "end_ns": "cpu_b"}
    )
    other = largest_overlap(span, classified.blocking, "runtime_id", "blocked_call", False)
    blocked = other.hstack(
        rows_at(
            trace.runtime, "runtime_id", other["blocked_call"], tid="tid", api="name", op_id="op_id", dur_ns="dur_ns"
        )
    )
    bctx = op_context(trace, blocked["op_id"])
    blocked = chain.collect(
        blocked.lazy()
        .join(bctx.lazy(), on="op_id", how="left")
        .select(
            "gap_id",
            blocked_thread=pl.struct(
                "tid",
                "api",
                "op",
                "range",
                "python_frame",
                blocked_ns=pl.col("blocked_call_overlap_ns"),
                call_id="blocked_call",
                call_ns=pl.col("dur_ns"),
            ),
        )
    )
    pieces = pieces.hstack(by_gap(n, blocked))
    # What the GPU waited on, told for the gaps of those causes only (the text is built per row),
    # from the next activity's name (a collective's peers), read and not kept.
    read = ["gap_id", "cause", "next_gpu_id", "launched_before_trace", "launch_api", "stream_wait", "start_ns"]
    asked = chain.collect(pieces.lazy().select(*read, "launch_ts_ns").filter(pl.col("cause").is_in(WAITED_ON)))
    if asked.is_empty():  # none asked: no text to build (its expression took ~0.4 ms on no rows)
        told = pl.DataFrame(schema={"gap_id": asked.schema["gap_id"], "waited_on": pl.String})
    else:
        named = asked.hstack(rows_at(trace.gpu, "gpu_id", asked["next_gpu_id"], next_name="name"))
        told = named.select("gap_id", waited_on=_waited_on(named))
    return pieces.hstack(by_gap(n, told))
