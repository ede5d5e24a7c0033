"""`traceanalyzer gaps --plot FILE.png|.svg|.pdf`: the timeline of the slowest step (or of the whole
trace when it has no ProfilerStep), gaps shaded by cause."""

from __future__ import annotations

from traceanalyzer.render.output import write_atomic
from traceanalyzer.render.timeline import TimelineInputs, render_timeline


def write_gap_plot(inputs: TimelineInputs, path: str, fmt: str = "png") -> None:
    """Draw the default timeline window and write it as png, svg or pdf."""
    write_atomic(path, render_timeline(inputs, fmt=fmt).data)
