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
from traceanalyzer.analyses.cpu_activity import rows_at
from traceanalyzer.analyses.gap_causes import ClassifiedGaps, classify_gaps
from traceanalyzer.analyses.gap_culprits import name_culprits
from traceanalyzer.analyses.intervals import series_of
from traceanalyzer.causes import CAUSES, HINTS, WITH_CULPRIT
from traceanalyzer.options import GapOptions, Options
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us, point_us

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
    """cause, idle_ns, gaps, share_of_idle: largest first (integer sums)."""
    total = int(gaps["duration_ns"].sum()) if gaps.height else 0
    return (
        gaps.group_by(pl.col("cause").cast(pl.String))  # a small table: the names, as every reader joins them
        .agg(idle_ns=pl.col("duration_ns").sum(), gaps=pl.len())
        .with_columns(share_of_idle=pl.col("idle_ns") / total if total else pl.lit(0.0))
        .sort(["idle_ns", "cause"], descending=[True, False])
    )


def _nulls_held_once(df: pl.DataFrame) -> pl.DataFrame:
    """The table with every column null in all its rows held as one null (a polars scalar column:
    0 bytes a row where a String takes 16; python_frame and module without a Python stack). It
    reads the same everywhere, as `trace.one_valued`'s columns do."""
    # each column's null count as a Series call (a frame's `null_count` is a query), on a copy
    # of the columns (`series_of`: a column held as one value stays so in `df`)
    counts = [c.null_count() for c in series_of(df, df.columns)] if df.height else []
    empty = [c for c, n in zip(df.columns, counts) if n == df.height]
    return df.with_columns(pl.lit(None, dtype=df.schema[c]).alias(c) for c in empty) if empty else df


@dataclass(frozen=True, repr=False)
class GapsResult(Compact):
    """Every GPU idle gap of a trace with its cause and culprit, and the totals per device and
    step. The start-up (see `analyses.startup`) is set apart: `steady_*` speak of the rest.

    The tables hold int64 ns on the trace clock (`*_ns`, sums as integers); `devices`, `steps`,
    `idle_by_cause`, `culprits`, `gaps`, `all_gaps` and `steady_idle_by_cause` are their µs
    display views (`units.display_us`: `start_us` from the trace start), as the outputs print."""

    trace_path: str
    options: GapOptions
    has_gpu_work: bool
    window_kind: str  # see analyses.windows.window_kind
    devices_ns: pl.DataFrame  # device, window_ns, busy_ns, idle_ns, busy_share
    steps_ns: pl.DataFrame  # device, step, window_ns, busy_ns, idle_ns, busy_share
    idle_by_cause_ns: pl.DataFrame  # cause, idle_ns, gaps, share_of_idle (every gap)
    culprits_ns: pl.DataFrame  # phase, cause, op, python_frame, gaps, idle_ns
    # every gap >= min_gap_us: device, step, start_ns, duration_ns, cause, phase (pl.Enum: CAUSE_DTYPE,
    # PHASE_DTYPE), op, range, python_frame, op_chain, module, sync_api, call_api, call_ns, waited_on,
    # prev_activity, next_activity (names), next_stream, launch_api, launch_tid, launch_delay_ns, blocked_thread
    gaps_ns: pl.DataFrame
    # every gap, whatever its length: the same columns, but prev_gpu_id / next_gpu_id (the activities'
    # rows of Trace.gpu) where gaps_ns has their names
    all_gaps_ns: pl.DataFrame
    note: str | None = None
    steady_idle_by_cause_ns: pl.DataFrame = field(default_factory=pl.DataFrame)  # start-up left out
    startup_end_ns: int | None = None  # where the start-up ends (trace clock)
    startup_window_ns: int = 0  # window time inside the start-up (summed over devices)
    startup_busy_ns: int = 0
    origin_ns: int = 0  # the trace start

    # the µs display views of the ns tables (units.Shown)
    devices = Shown("devices_ns")
    steps = Shown("steps_ns")
    idle_by_cause = Shown("idle_by_cause_ns")
    steady_idle_by_cause = Shown("steady_idle_by_cause_ns")
    culprits = Shown("culprits_ns")
    gaps = Shown("gaps_ns")
    all_gaps = Shown("all_gaps_ns")

    @property
    def startup_end_us(self) -> float | None:
        """Where the start-up ends, µs from the trace start."""
        return point_us(self.startup_end_ns, self.origin_ns)

    @property
    def startup_window_us(self) -> float:
        """Window time inside the start-up (summed over devices), µs."""
        return duration_us(self.startup_window_ns)

    @property
    def startup_busy_us(self) -> float:
        """GPU busy time inside the start-up, µs."""
        return duration_us(self.startup_busy_ns)

    def _devices_sum(self, col: str) -> int:
        return int(self.devices_ns[col].sum()) if self.has_gpu_work and self.devices_ns.height else 0

    @property
    def window_us(self) -> float:
        """The windows' duration summed over the devices with GPU work (0 without any)."""
        return duration_us(self._devices_sum("window_ns"))

    @property
    def busy_share(self) -> float | None:
        """GPU busy time over window time, all devices together; None without GPU work."""
        window = self._devices_sum("window_ns")
        return self._devices_sum("busy_ns") / window if window else None

    def idle_ns(self, cause: str | None = None, phase: str | None = None) -> int:
        """GPU idle time in all gaps, or in those of one cause and/or phase (integer ns)."""
        if not self.has_gpu_work or self.all_gaps_ns.is_empty():
            return 0
        # Series compared and filtered, no query (a frame's `filter` was one, ~50 µs; the rules of
        # a small rank ask a few times; `fill_null` was one too); a null phase or cause is no match
        duration = self.all_gaps_ns[["duration_ns"]].get_column("duration_ns")
        asked = [
            self.all_gaps_ns[[c]].get_column(c) == v  # null where null: `filter` keeps no null
            for c, v in (("phase", phase), ("cause", cause))
            if v is not None
        ]
        for keep in asked[1:]:
            asked[0] = asked[0] & keep
        return int((duration.filter(asked[0]) if asked else duration).sum())

    def idle_us(self, cause: str | None = None) -> float:
        """GPU idle time in all gaps, or in the gaps of one cause."""
        return duration_us(self.idle_ns(cause))

    @property
    def startup_idle_us(self) -> float:
        """GPU idle time in the start-up set aside (0 without one)."""
        return duration_us(self.idle_ns(phase="startup"))

    @property
    def steady_window_us(self) -> float:
        """Window time after the start-up."""
        return duration_us(self._devices_sum("window_ns") - self.startup_window_ns)

    @property
    def steady_busy_share(self) -> float | None:
        """GPU busy share after the start-up (the figure verdicts speak of)."""
        window = self._devices_sum("window_ns") - self.startup_window_ns
        busy = self._devices_sum("busy_ns") - self.startup_busy_ns if self.has_gpu_work else 0
        return busy / window if window > 0 else None

    def steady_idle_us(self, cause: str | None = None) -> float:
        """GPU idle time after the start-up, in all gaps or in the gaps of one cause."""
        return duration_us(self.idle_ns(cause, phase="steady"))


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
            origin_ns=trace.meta.origin_ns,
        )
    classified = classified or classify_gaps(trace, bundle)
    per_window = classified.per_window
    pieces = name_culprits(trace, classified)
    all_gaps = pieces.select(
        "device",
        "step",
        start_ns=pl.col("start_ns"),
        duration_ns=pl.col("end_ns") - pl.col("start_ns"),
        cause=pl.col("cause"),
        phase=pl.col("phase"),
        op=pl.col("op"),
        range=pl.col("range"),
        python_frame=pl.col("python_frame"),
        op_chain=pl.col("op_chain"),
        module=pl.col("module"),
        sync_api=pl.when(pl.col("cause") == "sync").then(pl.col("sync_api")),
        call_api=pl.col("call_api"),
        call_ns=pl.col("call_ns"),
        waited_on=pl.col("waited_on"),
        prev_gpu_id=pl.col("prev_gpu_id"),
        next_gpu_id=pl.col("next_gpu_id"),
        next_stream=pl.col("next_stream"),
        launch_api=pl.col("launch_api"),
        launch_tid=pl.col("launch_tid"),
        launch_delay_ns=pl.col("next_start_ns") - pl.col("launch_ts_ns"),
        blocked_thread=pl.col("blocked_thread"),
    )
    del pieces  # the columns read only to name the culprits go before the tables below are built
    all_gaps = _nulls_held_once(all_gaps)
    listed = all_gaps.filter(pl.col("duration_ns") >= opts.min_gap_us * 1000)
    # The gaps listed name the activities around them; every gap keeps their rows of the GPU table.
    names = [
        rows_at(trace.gpu, "gpu_id", listed[f"{side}_gpu_id"], **{f"{side}_activity": "name"}).to_series()
        for side in ("prev", "next")
    ]
    listed = listed.with_columns(prev_gpu_id=names[0], next_gpu_id=names[1]).rename(
        {"prev_gpu_id": "prev_activity", "next_gpu_id": "next_activity"}
    )

    steps = per_window.with_columns(idle_ns=pl.col("window_ns") - pl.col("busy_ns"))
    step_table = steps.select(
        "device",
        "step",
        "window_ns",
        "busy_ns",
        "idle_ns",
        busy_share=pl.col("busy_ns") / pl.col("window_ns"),
    ).sort("device", "step")
    devices = (
        steps.group_by("device")
        .agg(pl.col("window_ns").sum(), pl.col("busy_ns").sum(), pl.col("idle_ns").sum())
        .with_columns(busy_share=pl.col("busy_ns") / pl.col("window_ns"))
        .sort("device")
    )
    culprits = (
        all_gaps.filter(pl.col("cause").is_in(WITH_CULPRIT))  # kernel_spacing, the device's own spacing: none
        .group_by(pl.col("phase").cast(pl.String), pl.col("cause").cast(pl.String), "op", "python_frame")
        .agg(gaps=pl.len(), idle_ns=pl.col("duration_ns").sum())
        .sort(
            ["idle_ns", "cause", "op", "python_frame", "phase"],
            descending=[True, False, False, False, False],
            nulls_last=True,
        )
    )
    listed = listed.sort(["duration_ns", "device", "start_ns"], descending=[True, False, False])
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
        steady_idle_by_cause_ns=_by_cause(all_gaps.filter(pl.col("phase") == "steady")),
        startup_end_ns=end,
        startup_window_ns=classified.startup_window_ns,
        startup_busy_ns=classified.startup_busy_ns,
        origin_ns=trace.meta.origin_ns,
    )
