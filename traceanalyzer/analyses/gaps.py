"""Every GPU idle gap, its cause (see `gap_causes`) and who caused it: the op, the
record_function range and the Python line behind the gap, what the GPU waited on, and any other
thread of the process that sat in a blocking call meanwhile.

Idle time per device is the complement of the union of its kernels, memcpys and memsets inside
the analysis windows (`analyses.windows`); the idle by cause sums to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.gap_causes import CAUSES, HINTS, ClassifiedGaps, classify_gaps, largest_overlap
from traceanalyzer.options import GapOptions, Options
from traceanalyzer.patterns import COLLECTIVE, GRAPH_LAUNCH, PROFILER_STEP
from traceanalyzer.trace import Trace

__all__ = ["CAUSES", "HINTS", "GapsResult", "analyse_gaps", "classify_gaps"]

NO_GPU_NOTE = (
    "no GPU work in this trace (kernels, memcpys or memsets): no GPU idle time to analyse; "
    "`traceanalyzer summary` shows where the CPU time went"
)


@dataclass(frozen=True)
class GapsResult:
    """Every GPU idle gap of a trace with its cause and culprit, and the totals per device and step."""

    trace_path: str
    options: GapOptions
    has_gpu_work: bool
    window_kind: str  # see analyses.windows.window_kind
    devices: pl.DataFrame  # device, window_us, busy_us, idle_us, busy_share
    steps: pl.DataFrame  # device, step, window_us, busy_us, idle_us, busy_share
    idle_by_cause: pl.DataFrame  # cause, idle_us, gaps, share_of_idle
    culprits: pl.DataFrame  # cause, op, python_frame, gaps, idle_us
    gaps: pl.DataFrame  # every gap >= min_gap_us, see GAP_COLUMNS
    all_gaps: pl.DataFrame  # every gap, whatever its length (same columns)
    note: str | None = None

    @property
    def window_us(self) -> float:
        """The windows' duration summed over the devices with GPU work (0 without any)."""
        return float(self.devices["window_us"].sum()) if self.has_gpu_work and self.devices.height else 0.0

    @property
    def busy_share(self) -> float | None:
        """GPU busy time over window time, all devices together; None without GPU work."""
        window = self.window_us
        return float(self.devices["busy_us"].sum()) / window if window else None

    def idle_us(self, cause: str | None = None) -> float:
        """GPU idle time in all gaps, or in the gaps of one cause."""
        if not self.has_gpu_work or self.all_gaps.is_empty():
            return 0.0
        gaps = self.all_gaps if cause is None else self.all_gaps.filter(pl.col("cause") == cause)
        return float(gaps["duration_us"].sum())


def _most_self_time_op(trace: Trace, gaps: pl.DataFrame) -> pl.DataFrame:
    """For cpu_bound gaps, the op with the most self time inside [cpu_a, cpu_b] on the thread."""
    g = gaps.filter(pl.col("cause") == "cpu_bound").select("gap_id", "pid", "tid", "cpu_a", "cpu_b")
    if g.is_empty():
        return pl.DataFrame(schema={"gap_id": pl.UInt32, "cpu_op_id": pl.Int64})
    ops = trace.ops.filter((pl.col("kind") == "cpu_op") & ~pl.col("name").str.contains(PROFILER_STEP)).select(
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


def analyse_gaps(
    trace: Trace, options: Options | GapOptions | None = None, *, classified: ClassifiedGaps | None = None
) -> GapsResult:
    """Every idle gap per device and window, with its cause and culprit; `classified` is the
    trace's `classify_gaps` result when already computed with the same options."""
    bundle = Options.of(options)
    opts = bundle.gaps
    window_kind = windows.window_kind(trace)
    if not trace.has_gpu_work:
        empty = pl.DataFrame()
        return GapsResult(
            trace.path, opts, False, window_kind, empty, empty, empty, empty, empty, empty, note=NO_GPU_NOTE
        )
    classified = classified or classify_gaps(trace, bundle)
    per_window, act = classified.per_window, classified.activity
    pieces = _stream_waits(trace, classified.pieces)

    # Name the culprit: the blocking call, the data range, the busiest op, or the launching op.
    data_range = largest_overlap(
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
    other = largest_overlap(span, act.blocking, "runtime_id", "blocked_call", False)
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
    listed = listed.sort("duration_us", descending=True)
    return GapsResult(trace.path, opts, True, window_kind, devices, step_table, by_cause, culprits, listed, all_gaps)
