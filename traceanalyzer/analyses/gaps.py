"""GPU idle gaps and their CPU-side causes.

For each device, idle time is the complement of the union of its kernels, memcpys and memsets
inside the analysis windows (see gpu_time). Each gap gets one cause, decided from the thread
that launched the work which ended the gap (the "next" activity):

- queued before the gap began (its launch call started before the gap):
  `launch_latency` when it started within `launch_latency_us` of its launch call returning,
  else `gpu_wait` (the GPU waited on another stream, an event, a collective's peers or a
  dependency inside a CUDA graph replay);
- launched during the gap: `data_loading` when a data-loading range fills over half the time
  before the launch; `sync` when the thread was blocked in a synchronising call at the
  instant the GPU went idle (the sync drained the queue; the gap is its bubble);
  `launch_latency` when the call came within `launch_latency_us` of the gap's start; otherwise what the thread did for the largest part of the time between the
  gap's start and the launch: `sync` (blocked in a synchronising call), `data_loading`,
  `cpu_bound` (in ops that launched nothing) or `untraced` (no event at all).
A gap with no next activity (idle until the window ends) is judged from the step's thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import gpu_time
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.cpu_activity import THREAD, CpuActivity
from traceanalyzer.analyses.intervals import covered
from traceanalyzer.options import GapOptions
from traceanalyzer.trace import Trace

CAUSES = ("sync", "data_loading", "cpu_bound", "launch_latency", "gpu_wait", "untraced")
HINTS = {
    "sync": "the CPU waited for the GPU; remove the synchronising call or move it out of the loop",
    "data_loading": "the CPU was loading data; raise DataLoader num_workers, pin_memory, prefetch_factor",
    "cpu_bound": "the CPU was busy in ops that launched no GPU work; move that work off the critical path",
    "launch_latency": "kernels too short for their launch overhead; fuse them (torch.compile) or use CUDA graphs",
    "gpu_wait": "work was queued but waited on another stream, an event, a collective or a graph dependency",
    "untraced": "no CPU event explains the gap; profile with with_stack=True and record_function ranges",
}


@dataclass(frozen=True)
class GapsResult:
    trace_path: str
    options: GapOptions
    has_gpu_work: bool
    window_kind: str  # "steps" or "gpu_span"
    devices: pl.DataFrame  # device, window_us, busy_us, idle_us, busy_share
    steps: pl.DataFrame  # device, step, window_us, busy_us, idle_us, busy_share
    idle_by_cause: pl.DataFrame  # cause, idle_us, gaps, share_of_idle
    culprits: pl.DataFrame  # cause, op, python_frame, gaps, idle_us
    gaps: pl.DataFrame  # every gap >= min_gap_us, see GAP_COLUMNS
    all_gaps: pl.DataFrame  # every gap, whatever its length (same columns)
    note: str | None = None


def _next_activity(trace: Trace) -> pl.DataFrame:
    """For each (device, start instant), the activity a gap ending there waited for: the one
    launched first among those starting at that instant.

    Work whose launch is not in the trace but whose correlation id is below every traced
    runtime call's was queued before profiling began: it counts as queued before the gap."""
    first_corr = trace.runtime["correlation"].drop_nulls().min() if trace.runtime.height else None
    before = (
        pl.col("launch_ts_ns").is_null() & pl.col("correlation").is_not_null() & (pl.col("correlation") < first_corr)
        if first_corr is not None
        else pl.lit(False)
    )
    return (
        trace.gpu.select(
            "device",
            "ts_ns",
            "name",
            "kind",
            "stream",
            "correlation",
            "launch_api",
            "launch_ts_ns",
            "launch_end_ns",
            "launch_pid",
            "launch_tid",
            "op_id",
        )
        .filter(pl.col("device").is_not_null())
        .with_columns(launched_before_trace=before)
        .sort("ts_ns", "launch_ts_ns", nulls_last=True)
        .unique(["device", "ts_ns"], keep="first")
        .select(
            "device",
            next_start_ns=pl.col("ts_ns"),
            next_name=pl.col("name"),
            next_kind=pl.col("kind"),
            next_stream=pl.col("stream"),
            launch_api=pl.col("launch_api"),
            launch_ts_ns=pl.col("launch_ts_ns"),
            launch_end_ns=pl.col("launch_end_ns"),
            launch_pid=pl.col("launch_pid"),
            launch_tid=pl.col("launch_tid"),
            launch_op_id=pl.col("op_id"),
            launched_before_trace=pl.col("launched_before_trace"),
        )
    )


def _prev_activity(trace: Trace) -> pl.DataFrame:
    return (
        trace.gpu.select("device", "ts_ns", "end_ns", "name")
        .filter(pl.col("device").is_not_null())
        .sort("end_ns", "ts_ns")
        .unique(["device", "end_ns"], keep="last")
        .select("device", prev_end_ns=pl.col("end_ns"), prev_name=pl.col("name"))
    )


def _step_threads(trace: Trace) -> pl.DataFrame:
    return trace.steps.select("step", step_pid=pl.col("pid"), step_tid=pl.col("tid"))


def _main_thread(trace: Trace) -> tuple[int | None, int | None]:
    """Without steps, the thread that launched the most GPU work."""
    g = (
        trace.gpu.select("launch_pid", "launch_tid")
        .filter(pl.col("launch_tid").is_not_null())
        .group_by("launch_pid", "launch_tid")
        .len()
        .sort("len", descending=True)
    )
    return (g["launch_pid"][0], g["launch_tid"][0]) if g.height else (None, None)


def _classify(gaps: pl.DataFrame, act: CpuActivity, opts: GapOptions) -> pl.DataFrame:
    L = int(opts.launch_latency_us * 1000)
    queued = (pl.col("launch_ts_ns").is_not_null() & (pl.col("launch_ts_ns") <= pl.col("start_ns"))) | pl.col(
        "launched_before_trace"
    ).fill_null(False)
    gaps = gaps.with_columns(
        # The CPU interval that explains a gap: from its start until the call launching the
        # next work returned. A blocking launch (a pageable cudaMemcpyAsync staging its data)
        # is part of the wait, so it counts as time blocked.
        cpu_a=pl.col("start_ns"),
        cpu_b=pl.min_horizontal(pl.coalesce("launch_end_ns", "end_ns"), "end_ns").clip(lower_bound=pl.col("start_ns")),
    )
    gaps = covered(
        gaps.with_columns(_gs1=pl.col("start_ns") + 1), act.blocked, THREAD, "start_ns", "_gs1", "_blocked_at_start"
    ).drop("_gs1")
    gaps = covered(gaps, act.blocked, THREAD, "cpu_a", "cpu_b", "t_sync")
    gaps = covered(gaps, act.data, THREAD, "cpu_a", "cpu_b", "t_data")
    gaps = covered(gaps, act.busy, THREAD, "cpu_a", "cpu_b", "t_busy")
    span = pl.col("cpu_b") - pl.col("cpu_a")
    t_data = (pl.col("t_data") - pl.col("t_sync")).clip(0)
    t_cpu = (pl.col("t_busy") - pl.col("t_data") - pl.col("t_sync")).clip(0)
    t_none = (span - pl.col("t_busy")).clip(0)
    largest = pl.max_horizontal(pl.col("t_sync"), t_data, t_cpu, t_none)
    by_cpu = (
        pl.when(pl.col("pid").is_null())
        .then(pl.lit("untraced"))
        .when((pl.col("t_sync") > 0) & (pl.col("t_sync") >= largest))
        .then(pl.lit("sync"))
        .when((t_data > 0) & (t_data >= largest))
        .then(pl.lit("data_loading"))
        .when((t_cpu > 0) & (t_cpu >= largest))
        .then(pl.lit("cpu_bound"))
        .otherwise(pl.lit("untraced"))
    )
    cause = (
        pl.when(queued & ((pl.col("end_ns") - pl.max_horizontal("launch_end_ns", "start_ns")) <= L))
        .then(pl.lit("launch_latency"))
        .when(queued)
        .then(pl.lit("gpu_wait"))
        # Data loading that fills most of the gap is the cause even right after a sync.
        .when(~queued & (t_data > span / 2))
        .then(pl.lit("data_loading"))
        # The thread was blocked in a sync when the GPU ran dry: the sync drained the queue,
        # and the gap is its bubble (the time to launch new work after it returned).
        .when(pl.col("_blocked_at_start") > 0)
        .then(pl.lit("sync"))
        .when(pl.col("launch_ts_ns").is_not_null() & ((pl.col("launch_ts_ns") - pl.col("start_ns")) <= L))
        .then(pl.lit("launch_latency"))
        .otherwise(by_cpu)
    )
    return gaps.with_columns(cause=cause)


def _largest_overlap(
    gaps: pl.DataFrame, intervals: pl.DataFrame, id_col: str, out: str, same_thread: bool
) -> pl.DataFrame:
    """For each gap (gap_id, cpu_a, cpu_b, pid, tid), the interval overlapping [cpu_a, cpu_b]
    longest: on the gap's thread (same_thread) or on another thread of its process."""
    if gaps.is_empty() or intervals.is_empty():
        return pl.DataFrame(
            schema={"gap_id": pl.UInt32, out: intervals.schema.get(id_col, pl.Int64), f"{out}_overlap_ns": pl.Int64}
        )
    iv = intervals.select(
        pl.col(id_col).alias(out),
        pl.col("pid").alias("_pid"),
        pl.col("tid").alias("_tid"),
        pl.col("ts_ns").alias("_s"),
        pl.col("end_ns").alias("_e"),
    )
    j = gaps.select("gap_id", "pid", "tid", "cpu_a", "cpu_b").join_where(
        iv, pl.col("_s") < pl.col("cpu_b"), pl.col("_e") > pl.col("cpu_a")
    )
    same = (pl.col("_tid") == pl.col("tid")) & (pl.col("_pid") == pl.col("pid"))
    j = j.filter(same if same_thread else (~same.fill_null(False) & (pl.col("_pid") == pl.col("pid")).fill_null(True)))
    j = j.with_columns(_ov=pl.min_horizontal("_e", "cpu_b") - pl.max_horizontal("_s", "cpu_a"))
    return (
        j.sort("_ov", descending=True)
        .unique("gap_id", keep="first")
        .select("gap_id", out, pl.col("_ov").alias(f"{out}_overlap_ns"))
    )


def _most_self_time_op(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """For cpu_bound gaps, the op with the most self time inside [cpu_a, cpu_b] on the thread."""
    g = gaps.filter(pl.col("cause") == "cpu_bound").select("gap_id", "pid", "tid", "cpu_a", "cpu_b")
    if g.is_empty():
        return pl.DataFrame(schema={"gap_id": pl.UInt32, "cpu_op_id": pl.Int64})
    ops = trace.ops.filter((pl.col("kind") == "cpu_op") & ~pl.col("name").str.contains(r"^ProfilerStep#\d+$")).select(
        "op_id",
        "parent_id",
        pl.col("pid").alias("_pid"),
        pl.col("tid").alias("_tid"),
        pl.col("ts_ns").alias("_s"),
        pl.col("end_ns").alias("_e"),
    )
    j = g.join_where(ops, pl.col("_s") < pl.col("cpu_b"), pl.col("_e") > pl.col("cpu_a")).filter(
        (pl.col("_tid") == pl.col("tid")) & (pl.col("_pid") == pl.col("pid"))
    )
    j = j.with_columns(_ov=pl.min_horizontal("_e", "cpu_b") - pl.max_horizontal("_s", "cpu_a"))
    child = j.group_by("gap_id", "parent_id").agg(_child=pl.col("_ov").sum()).rename({"parent_id": "op_id"})
    j = j.join(child, on=["gap_id", "op_id"], how="left").with_columns(
        _self=pl.col("_ov") - pl.col("_child").fill_null(0)
    )
    return j.sort("_self", descending=True).unique("gap_id", keep="first").select("gap_id", cpu_op_id=pl.col("op_id"))


def _waited_on(gaps: pl.DataFrame) -> pl.Expr:
    name = pl.col("next_name").fill_null("")
    api = pl.col("launch_api").fill_null("")
    return (
        pl.when(pl.col("cause") != "gpu_wait")
        .then(pl.lit(None, pl.String))
        .when(pl.col("launched_before_trace").fill_null(False))
        .then(pl.lit("work queued before the trace began (its launch is not in the trace)"))
        .when(api.str.contains("GraphLaunch"))
        .then(pl.lit("a dependency inside a CUDA graph replay (") + api + pl.lit(")"))
        .when(name.str.contains("(?i)nccl|rccl|allreduce|allgather|reducescatter|alltoall|broadcast"))
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


def _stream_waits(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """Latest `Stream Wait Event` marker on the next activity's stream before it started."""
    marks = trace.sync_markers.filter(pl.col("name").str.contains("Wait")).select(
        "device", "stream", "wait_on_stream", pl.col("ts_ns").alias("_mts")
    )
    if marks.is_empty() or gaps.is_empty():
        return gaps.with_columns(stream_wait=pl.lit(None, pl.Int64))
    j = gaps.sort("end_ns").join_asof(
        marks.sort("_mts").rename({"stream": "next_stream"}),
        left_on="end_ns",
        right_on="_mts",
        by=["device", "next_stream"],
        strategy="backward",
        check_sortedness=False,
    )
    return j.with_columns(
        stream_wait=pl.when(pl.col("_mts") >= pl.col("launch_ts_ns").fill_null(0)).then(pl.col("wait_on_stream"))
    ).drop("_mts", "wait_on_stream")


def _python_line_fallback(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """Where no op names a Python line, the innermost user-code frame the thread was in at the
    middle of the CPU interval (traces captured with with_stack)."""
    user = trace.python.filter(pl.col("is_user"))
    if user.is_empty():
        return gaps
    from traceanalyzer.links import innermost_containing, nest

    user = nest(user.drop("depth", "parent_id"), "frame_id")
    need = gaps.filter(pl.col("python_frame").is_null() & pl.col("pid").is_not_null()).select(
        "gap_id", "pid", "tid", ts_ns=((pl.col("cpu_a") + pl.col("cpu_b")) // 2)
    )
    found = innermost_containing(need, user, "frame_id", "_frame", point_end="ts_ns")
    names = found.join(
        user.select(pl.col("frame_id").alias("_frame"), pl.col("name").alias("_line")), on="_frame", how="left"
    )
    return (
        gaps.join(names.select("gap_id", "_line"), on="gap_id", how="left")
        .with_columns(python_frame=pl.coalesce("python_frame", "_line"))
        .drop("_line")
    )


@dataclass(frozen=True)
class ClassifiedGaps:
    """Every idle piece (a gap clipped to one window) with its cause, before naming culprits.
    `syncs` builds on this so that a sync's bubble is by construction the gap blamed on it."""

    pieces: pl.DataFrame  # gap_id, device, step, start_ns, end_ns, cause, pid, tid, sync_call, ...
    per_window: pl.DataFrame  # device, step, start_ns, end_ns, window_ns, busy_ns
    activity: CpuActivity


def classify_gaps(trace: Trace, options: GapOptions | None = None) -> ClassifiedGaps:
    """Idle pieces per device and window, each with the thread that explains it and a cause;
    `sync_call` is the blocking call (runtime_id) a `sync` gap is blamed on. Needs GPU work."""
    opts = options or GapOptions()
    busy = gpu_time.busy_intervals(trace)
    wins = gpu_time.windows(trace)
    per_window = gpu_time.busy_by_window(busy, wins)
    idle = gpu_time.idle_intervals(busy, wins)
    pieces = gpu_time.clip_to_windows(idle, wins).filter(pl.col("end_ns") > pl.col("start_ns"))
    pieces = (
        pieces.join(_next_activity(trace), on=["device", "next_start_ns"], how="left")
        .join(_prev_activity(trace), on=["device", "prev_end_ns"], how="left")
        .sort("device", "start_ns")
        .with_row_index("gap_id")
    )
    # The thread whose timeline explains the gap.
    main_pid, main_tid = _main_thread(trace)
    if trace.steps.height:
        pieces = pieces.join(_step_threads(trace), on="step", how="left")
    else:
        pieces = pieces.with_columns(step_pid=pl.lit(main_pid, pl.Int64), step_tid=pl.lit(main_tid, pl.Int64))
    pieces = pieces.with_columns(pid=pl.coalesce("launch_pid", "step_pid"), tid=pl.coalesce("launch_tid", "step_tid"))
    act = CpuActivity.of(trace, opts.data_loading_pattern)
    pieces = _classify(pieces, act, opts).sort("gap_id")
    sync_call = _largest_overlap(
        pieces.filter(pl.col("cause") == "sync"), act.blocking, "runtime_id", "sync_call", True
    )
    pieces = pieces.join(sync_call, on="gap_id", how="left").sort("gap_id")
    return ClassifiedGaps(pieces, per_window, act)


def analyse_gaps(trace: Trace, options: GapOptions | None = None) -> GapsResult:
    opts = options or GapOptions()
    window_kind = "steps" if trace.steps.height else "gpu_span"
    if not trace.has_gpu_work:
        empty = pl.DataFrame()
        return GapsResult(
            trace.path,
            opts,
            False,
            window_kind,
            empty,
            empty,
            empty,
            empty,
            empty,
            empty,
            note="no GPU work in this trace (kernels, memcpys or memsets): no GPU idle time to analyse; `traceanalyzer summary` shows where the CPU time went",
        )
    classified = classify_gaps(trace, opts)
    per_window, act = classified.per_window, classified.activity
    pieces = _stream_waits(trace, classified.pieces)

    # Name the culprit: the blocking call, the data range, the busiest op, or the launching op.
    data_range = _largest_overlap(
        pieces.filter(pl.col("cause") == "data_loading"), act.data_ranges, "op_id", "data_op", True
    )
    busiest = _most_self_time_op(trace, pieces)
    pieces = (
        pieces.join(data_range, on="gap_id", how="left")
        .join(busiest, on="gap_id", how="left")
        .join(
            trace.runtime.select(
                pl.col("runtime_id").alias("sync_call"),
                pl.col("op_id").alias("sync_op_id"),
                pl.col("name").alias("sync_api"),
            ),
            on="sync_call",
            how="left",
        )
    )
    culprit_op = (
        pl.when(pl.col("cause") == "sync")
        .then(pl.col("sync_op_id"))
        .when(pl.col("cause") == "data_loading")
        .then(pl.col("data_op"))
        .when(pl.col("cause") == "cpu_bound")
        .then(pl.col("cpu_op_id"))
        .when(pl.col("cause").is_in(["gpu_wait", "launch_latency"]))
        .then(pl.col("launch_op_id"))
        .otherwise(None)
    )
    pieces = pieces.with_columns(culprit_op_id=culprit_op)
    ctx = op_context(trace, pieces["culprit_op_id"]).rename({"op_id": "culprit_op_id"})
    pieces = pieces.join(ctx, on="culprit_op_id", how="left")
    pieces = _python_line_fallback(trace, pieces)
    # Any other thread of the process sitting in a blocking call during the gap.
    # The launching thread is left out (its state is the cause); with no known launch, none is.
    span = pieces.select(
        "gap_id",
        "pid",
        pl.col("launch_tid").alias("tid"),
        cpu_a=pl.col("start_ns"),
        cpu_b=pl.col("end_ns"),
    )
    other = _largest_overlap(span, act.blocking, "runtime_id", "blocked_call", False)
    blocked = other.join(
        trace.runtime.select(pl.col("runtime_id").alias("blocked_call"), "tid", pl.col("name").alias("api"), "op_id"),
        on="blocked_call",
        how="left",
    )
    bctx = op_context(trace, blocked["op_id"])
    blocked = blocked.join(bctx, on="op_id", how="left").select(
        "gap_id",
        blocked_thread=pl.struct(
            "tid",
            "api",
            "op",
            "range",
            "python_frame",
            blocked_us=pl.col("blocked_call_overlap_ns") / 1000.0,
        ),
    )
    pieces = pieces.join(blocked, on="gap_id", how="left").sort("gap_id")
    origin = trace.meta.origin_ns
    all_gaps = pieces.with_columns(waited_on=_waited_on(pieces)).select(
        "device",
        "step",
        start_us=(pl.col("start_ns") - origin) / 1000.0,
        duration_us=(pl.col("end_ns") - pl.col("start_ns")) / 1000.0,
        cause=pl.col("cause"),
        op=pl.col("op"),
        range=pl.col("range"),
        python_frame=pl.col("python_frame"),
        op_chain=pl.col("op_chain"),
        sync_api=pl.when(pl.col("cause") == "sync").then(pl.col("sync_api")),
        waited_on=pl.col("waited_on"),
        prev_activity=pl.col("prev_name"),
        next_activity=pl.col("next_name"),
        next_stream=pl.col("next_stream"),
        launch_api=pl.col("launch_api"),
        launch_tid=pl.col("launch_tid"),
        launch_delay_us=(pl.col("next_start_ns") - pl.col("launch_ts_ns")) / 1000.0,
        blocked_thread=pl.col("blocked_thread"),
    )
    listed = all_gaps.filter(pl.col("duration_us") >= opts.min_gap_us)

    steps = per_window.with_columns(idle_ns=pl.col("window_ns") - pl.col("busy_ns"))
    step_table = steps.select(
        "device",
        "step",
        window_us=pl.col("window_ns") / 1000.0,
        busy_us=pl.col("busy_ns") / 1000.0,
        idle_us=pl.col("idle_ns") / 1000.0,
        busy_share=pl.col("busy_ns") / pl.col("window_ns"),
    ).sort("device", "step")
    devices = (
        steps.group_by("device")
        .agg(
            window_us=pl.col("window_ns").sum() / 1000.0,
            busy_us=pl.col("busy_ns").sum() / 1000.0,
            idle_us=pl.col("idle_ns").sum() / 1000.0,
        )
        .with_columns(busy_share=pl.col("busy_us") / pl.col("window_us"))
        .sort("device")
    )
    total_idle = all_gaps["duration_us"].sum()
    by_cause = (
        all_gaps.group_by("cause")
        .agg(idle_us=pl.col("duration_us").sum(), gaps=pl.len())
        .with_columns(share_of_idle=pl.col("idle_us") / total_idle if total_idle else pl.lit(0.0))
        .sort("idle_us", descending=True)
    )
    culprits = (
        all_gaps.group_by("cause", "op", "python_frame")
        .agg(gaps=pl.len(), idle_us=pl.col("duration_us").sum())
        .sort("idle_us", descending=True)
    )
    return GapsResult(
        trace.path,
        opts,
        True,
        window_kind,
        devices,
        step_table,
        by_cause,
        culprits,
        listed.sort("duration_us", descending=True),
        all_gaps,
    )
