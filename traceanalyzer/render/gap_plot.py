"""`traceanalyzer gaps --plot FILE.png`: the timeline of the slowest step (or of the whole
trace when it has no ProfilerStep), gaps shaded by cause."""

from __future__ import annotations

from traceanalyzer.analyses.gaps import GapsResult
from traceanalyzer.render.output import write_atomic
from traceanalyzer.render.timeline import render_timeline
from traceanalyzer.trace import Trace


def write_gap_plot(trace: Trace, gaps_result: GapsResult, path: str) -> None:
    write_atomic(path, render_timeline(trace, gaps_result).png)
