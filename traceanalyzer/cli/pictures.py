"""What the pictures need from a Session, prepared here so the render floor receives results
only: the timeline's inputs (gaps, blocking calls, the main thread, the step windows and the
steady-state steps the default window is chosen from)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.windows import step_windows
from traceanalyzer.render.timeline import TimelineInputs
from traceanalyzer.session import Session


def timeline_inputs(ses: Session, path: bool = True) -> TimelineInputs:
    """The session's results a timeline draws (with the critical path unless `path` is False)."""
    gaps = ses.gaps
    return TimelineInputs(
        ses.trace,
        gaps,
        ses.blocking_calls,
        ses.options.patterns.data_loading_pattern,
        ses.main_thread,
        ses.critical_path.segments if path else None,
        windows=step_windows(ses.trace),
        steady_steps=steady_steps(ses),
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
