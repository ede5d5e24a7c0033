"""Every GPU idle gap, its cause (see `gap_causes`) and who caused it: the op, the
record_function range and the Python line behind the gap, what the GPU waited on, and any other
thread of the process that sat in a blocking call meanwhile.

Idle time per device is the complement of the union of its kernels, memcpys and memsets inside
the analysis windows (`analyses.windows`); the idle by cause sums to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.gap_causes import CAUSES, HINTS, ClassifiedGaps, classify_gaps
from traceanalyzer.analyses.gap_culprits import name_culprits
from traceanalyzer.analyses.intervals import us_sum
from traceanalyzer.options import GapOptions, Options
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace

__all__ = ["CAUSES", "HINTS", "GapsResult", "analyse_gaps", "classify_gaps"]

NO_GPU_NOTE = (
    "no GPU work in this trace (kernels, memcpys or memsets): no GPU idle time to analyse; "
    "`traceanalyzer summary` shows where the CPU time went"
)
CUT_OFF_NOTE = (
    "no GPU event was read: the file is cut short (see the trace health), so its GPU work, if any, is in the "
    "part that is missing; no GPU idle time can be told"
)


def _by_cause(gaps: pl.DataFrame) -> pl.DataFrame:
    """cause, idle_us, gaps, share_of_idle: largest first."""
    total = gaps.select(us_sum("duration_us")).item() if gaps.height else 0.0
    return (
        gaps.group_by("cause")
        .agg(idle_us=us_sum("duration_us"), gaps=pl.len())
        .with_columns(share_of_idle=pl.col("idle_us") / total if total else pl.lit(0.0))
        .sort(["idle_us", "cause"], descending=[True, False])
    )


@dataclass(frozen=True, repr=False)
class GapsResult(Compact):
    """Every GPU idle gap of a trace with its cause and culprit, and the totals per device and
    step. The start-up (see `analyses.startup`) is set apart: `steady_*` speak of the rest."""

    trace_path: str
    options: GapOptions
    has_gpu_work: bool
    window_kind: str  # see analyses.windows.window_kind
    devices: pl.DataFrame  # device, window_us, busy_us, idle_us, busy_share
    steps: pl.DataFrame  # device, step, window_us, busy_us, idle_us, busy_share
    idle_by_cause: pl.DataFrame  # cause, idle_us, gaps, share_of_idle (every gap)
    culprits: pl.DataFrame  # phase, cause, op, python_frame, gaps, idle_us
    gaps: pl.DataFrame  # every gap >= min_gap_us, see GAP_COLUMNS
    all_gaps: pl.DataFrame  # every gap, whatever its length (same columns)
    note: str | None = None
    steady_idle_by_cause: pl.DataFrame = field(default_factory=pl.DataFrame)  # as idle_by_cause, start-up left out
    startup_end_us: float | None = None  # where the start-up ends, µs from the trace start
    startup_window_us: float = 0.0  # window time inside the start-up (summed over devices)
    startup_busy_us: float = 0.0

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

    @property
    def startup_idle_us(self) -> float:
        """GPU idle time in the start-up set aside (0 without one)."""
        if not self.has_gpu_work or self.all_gaps.is_empty():
            return 0.0
        return float(self.all_gaps.filter(pl.col("phase") == "startup")["duration_us"].sum())

    @property
    def steady_window_us(self) -> float:
        """Window time after the start-up."""
        return self.window_us - self.startup_window_us

    @property
    def steady_busy_share(self) -> float | None:
        """GPU busy share after the start-up (the figure verdicts speak of)."""
        window = self.steady_window_us
        busy = float(self.devices["busy_us"].sum()) - self.startup_busy_us if self.has_gpu_work else 0.0
        return busy / window if window > 0 else None

    def steady_idle_us(self, cause: str | None = None) -> float:
        """GPU idle time after the start-up, in all gaps or in the gaps of one cause."""
        if not self.has_gpu_work or self.all_gaps.is_empty():
            return 0.0
        gaps = self.all_gaps.filter(pl.col("phase") == "steady")
        gaps = gaps if cause is None else gaps.filter(pl.col("cause") == cause)
        return float(gaps["duration_us"].sum())


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
            note=CUT_OFF_NOTE if trace.gpu_cut_off else NO_GPU_NOTE,
        )
    classified = classified or classify_gaps(trace, bundle)
    per_window = classified.per_window
    pieces = name_culprits(trace, classified)
    origin = trace.meta.origin_ns
    all_gaps = pieces.select(
        "device",
        "step",
        start_us=(pl.col("start_ns") - origin) / 1000.0,
        duration_us=(pl.col("end_ns") - pl.col("start_ns")) / 1000.0,
        cause=pl.col("cause"),
        phase=pl.col("phase"),
        op=pl.col("op"),
        range=pl.col("range"),
        python_frame=pl.col("python_frame"),
        op_chain=pl.col("op_chain"),
        module=pl.col("module"),
        sync_api=pl.when(pl.col("cause") == "sync").then(pl.col("sync_api")),
        call_api=pl.col("call_api"),
        call_us=pl.col("call_us"),
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
    culprits = (
        all_gaps.filter(pl.col("cause") != "kernel_spacing")  # the device's own spacing: no culprit
        .group_by("phase", "cause", "op", "python_frame")
        .agg(gaps=pl.len(), idle_us=us_sum("duration_us"))
        .sort(
            ["idle_us", "cause", "op", "python_frame", "phase"],
            descending=[True, False, False, False, False],
            nulls_last=True,
        )
    )
    listed = listed.sort(["duration_us", "device", "start_us"], descending=[True, False, False])
    end = classified.startup_end_ns
    return GapsResult(
        trace.path,
        opts,
        True,
        window_kind,
        devices,
        step_table,
        _by_cause(all_gaps),
        culprits,
        listed,
        all_gaps,
        steady_idle_by_cause=_by_cause(all_gaps.filter(pl.col("phase") == "steady")),
        startup_end_us=(end - origin) / 1000.0 if end is not None else None,
        startup_window_us=classified.startup_window_ns / 1000.0,
        startup_busy_us=classified.startup_busy_ns / 1000.0,
    )
