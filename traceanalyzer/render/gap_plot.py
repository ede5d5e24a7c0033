"""`traceanalyzer gaps --plot FILE.png`: the timeline of the slowest step (or of the whole
trace when it has no ProfilerStep), gaps shaded by cause."""

from __future__ import annotations

from traceanalyzer.render.output import write_atomic
from traceanalyzer.render.timeline import TimelineInputs, render_timeline


def write_gap_plot(inputs: TimelineInputs, path: str) -> None:
    """Draw the default timeline window and write it as a PNG."""
    write_atomic(path, render_timeline(inputs).png)
