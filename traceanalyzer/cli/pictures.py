"""What the pictures need from a Session, prepared here so the render floor receives results
only: the timeline's window (from the step windows and the steady-state steps), its time axis,
the events in the window with their bars merged per pixel column (the one interval merge of
`analyses.intervals`), the runs of blocking calls (`cpu_activity.call_runs`), the gaps, the main
thread and the critical path."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.cpu_activity import call_runs
from traceanalyzer.analyses.intervals import merge
from traceanalyzer.analyses.windows import step_windows
from traceanalyzer.patterns import PROFILER_STEP
from traceanalyzer.render.timeline import (
    RUN_JOIN_PX,
    Picture,
    TimeAxis,
    TimelineInputs,
    Window,
    choose_window,
    in_window,
    render_timeline,
)
from traceanalyzer.session import Session

CPU_LANE = ["pid", "tid", "kind"]
GPU_LANE = ["device", "stream", "kind"]


def timeline_window(
    ses: Session, step: int | None = None, start_ms: float | None = None, end_ms: float | None = None
) -> Window:
    """The window a timeline shows: `--step`, `--start`/`--end`, else the slowest step of the
    steady state (see `render.timeline_layout.choose_window`)."""
    return choose_window(ses.trace, step, start_ms, end_ms, step_windows(ses.trace), steady_steps(ses))


def timeline_inputs(ses: Session, window: Window | None = None, width: int = 1600, path: bool = True) -> TimelineInputs:
    """What a timeline of `window` (default: `timeline_window`) `width` pixels wide draws, from
    the session's results (with the critical path unless `path` is False)."""
    trace = ses.trace
    w = window or timeline_window(ses)
    axis = TimeAxis.of(w, width)
    gpu = in_window(trace.gpu.filter(pl.col("device").is_not_null()), w).select(*GPU_LANE, "ts_ns", "end_ns")
    cpu = cpu_events(ses, w)
    return TimelineInputs(
        trace,
        ses.gaps,
        ses.main_thread,
        w,
        axis,
        cpu,
        gpu,
        by_pixel(cpu, CPU_LANE, axis),
        by_pixel(gpu, GPU_LANE, axis),
        call_runs(in_window(ses.blocking_calls, w), RUN_JOIN_PX * axis.ns_per_px),
        ses.critical_path.segments if path else None,
    )


def timeline_picture(
    ses: Session,
    window: Window | None = None,
    width: int = 1600,
    height: int = 900,
    dpi: int = 100,
    fmt: str = "png",
) -> Picture:
    """The session's timeline of `window` (default: `timeline_window`), drawn."""
    return render_timeline(timeline_inputs(ses, window, width), height=height, dpi=dpi, fmt=fmt)


def by_pixel(df: pl.DataFrame, by: list[str], axis: TimeAxis) -> pl.DataFrame:
    """Intervals (by..., ts_ns, end_ns) -> bars (by..., px0, px1): the pixel columns they touch
    (`TimeAxis.columns`), merged where they share or abut a column, sorted by lane and px0."""
    merged = merge(axis.columns(df, by), by, start="px0", end="px1")
    return merged.rename({"start_ns": "px0", "end_ns": "px1"})


def cpu_events(ses: Session, w: Window) -> pl.DataFrame:
    """pid, tid, kind (cpu_op | data_loading | sync), ts_ns, end_ns inside the window: the
    top-level ops (ProfilerStep ranges left out: their children are the top level), the
    data-loading ranges and the blocking calls (the session's `activity`)."""
    trace = ses.trace
    ops = in_window(trace.ops, w)
    step_ids = trace.steps["op_id"] if trace.steps.height else pl.Series([], dtype=pl.Int64)
    is_step = pl.col("name").str.contains(PROFILER_STEP)
    top = ops.filter(~is_step & (pl.col("parent_id").is_null() | pl.col("parent_id").is_in(step_ids.implode())))
    data = in_window(ses.activity.data_ranges, w)
    sync = in_window(ses.blocking_calls, w)
    cols = ["pid", "tid", "kind", "ts_ns", "end_ns"]
    return pl.concat(
        [
            top.with_columns(kind=pl.lit("cpu_op")).select(cols),
            data.with_columns(kind=pl.lit("data_loading")).select(cols),
            sync.with_columns(kind=pl.lit("sync")).select(cols),
        ]
    )


def steady_steps(ses: Session) -> tuple[int, ...] | None:
    """The steps the averages count: no warm-up step (when `--warmup-steps exclude`) and none
    that begins inside the start-up set aside; None without steps."""
    table = ses.steps.table
    if not ses.trace.steps.height or "step" not in table.columns:
        return None
    keep = table
    if ses.options.steps.warmup_steps == "exclude" and "warmup" in table.columns:
        keep = keep.filter(~pl.col("warmup"))
    end_us = ses.gaps.startup_end_us
    if end_us is not None and "start_us" in keep.columns:
        keep = keep.filter(pl.col("start_us") >= end_us)
    return tuple(keep["step"].drop_nulls().to_list())
