"""What the pictures need from a Session, prepared here so the render floor receives results
only: the timeline's inputs (gaps, blocking calls, the main thread, the step windows and where
the start-up set aside ends)."""

from __future__ import annotations

from traceanalyzer.analyses.windows import step_windows
from traceanalyzer.render.timeline import TimelineInputs
from traceanalyzer.session import Session


def timeline_inputs(ses: Session) -> TimelineInputs:
    """The session's results a timeline draws."""
    gaps = ses.gaps
    steady_from = None
    if gaps.startup_end_us is not None:  # µs from the trace start; the windows are on the trace clock
        steady_from = ses.trace.meta.origin_ns + int(round(gaps.startup_end_us * 1000))
    return TimelineInputs(
        ses.trace,
        gaps,
        ses.blocking_calls,
        ses.options.patterns.data_loading_pattern,
        ses.main_thread,
        windows=step_windows(ses.trace),
        steady_from_ns=steady_from,
    )
