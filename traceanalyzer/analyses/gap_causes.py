"""GPU idle gaps and their CPU-side causes.

For each device, idle time is the complement of the union of its kernels, memcpys and memsets
inside the analysis windows (see analyses.windows and gpu_time). Each gap gets one cause, decided from the thread
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

from traceanalyzer.analyses import gpu_time, windows
from traceanalyzer.analyses.cpu_activity import THREAD, CpuActivity, step_threads
from traceanalyzer.analyses.intervals import covered
from traceanalyzer.options import Options
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


def _classify(gaps: pl.DataFrame, act: CpuActivity, launch_latency_us: float) -> pl.DataFrame:
    L = int(launch_latency_us * 1000)
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


def largest_overlap(
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


@dataclass(frozen=True)
class ClassifiedGaps:
    """Every idle piece (a gap clipped to one window) with its cause, before naming culprits.
    `syncs` builds on this so that a sync's bubble is by construction the gap blamed on it."""

    pieces: pl.DataFrame  # gap_id, device, step, start_ns, end_ns, cause, pid, tid, sync_call, ...
    per_window: pl.DataFrame  # device, step, start_ns, end_ns, window_ns, busy_ns
    activity: CpuActivity


def classify_gaps(trace: Trace, options: Options | None = None, activity: CpuActivity | None = None) -> ClassifiedGaps:
    """Idle pieces per device and window, each with the thread that explains it and a cause;
    `sync_call` is the blocking call (runtime_id) a `sync` gap is blamed on. Needs GPU work.
    `activity` is the trace's CpuActivity when already built (it must use the same pattern)."""
    opts = Options.of(options)
    busy = gpu_time.busy_intervals(trace)
    wins = windows.device_windows(trace)
    per_window = gpu_time.busy_by_window(busy, wins)
    idle = gpu_time.idle_intervals(busy, wins)
    pieces = gpu_time.clip_to_windows(idle, wins).filter(pl.col("end_ns") > pl.col("start_ns"))
    pieces = (
        pieces.join(_next_activity(trace), on=["device", "next_start_ns"], how="left")
        .join(_prev_activity(trace), on=["device", "prev_end_ns"], how="left")
        .sort("device", "start_ns")
        .with_row_index("gap_id")
    )
    # The thread whose timeline explains the gap: the one that launched the work ending it,
    # else the step's own thread.
    threads = step_threads(trace).rename({"pid": "step_pid", "tid": "step_tid"})
    pieces = pieces.join(threads, on="step", how="left", nulls_equal=True)
    pieces = pieces.with_columns(pid=pl.coalesce("launch_pid", "step_pid"), tid=pl.coalesce("launch_tid", "step_tid"))
    act = activity or CpuActivity.of(trace, opts.patterns.data_loading_pattern)
    pieces = _classify(pieces, act, opts.gaps.launch_latency_us).sort("gap_id")
    sync_call = largest_overlap(pieces.filter(pl.col("cause") == "sync"), act.blocking, "runtime_id", "sync_call", True)
    pieces = pieces.join(sync_call, on="gap_id", how="left").sort("gap_id")
    return ClassifiedGaps(pieces, per_window, act)
