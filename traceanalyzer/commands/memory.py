"""Device memory from profile_memory traces: the peak, who holds it, top allocating ops, growth
per step, allocator cache, and allocations never freed.

Peak = the largest `Total Allocated` the allocator reported on a device. An allocation is alive
at the peak when it came at or before the peak and was freed after it (or never, in the trace);
it belongs to the innermost op around it on the allocating thread.
"""

from __future__ import annotations

import click

from traceanalyzer.analyses.findings import rules_for
from traceanalyzer.cli_options import build_options, option_flags, output_options
from traceanalyzer.commands.common import emit, findings_payload, findings_text, head, open_session, with_health
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("memory", "steps", "health")

DEVICE_COLUMNS = [
    "device",
    "peak_allocated_mb",
    "peak_at_us",
    "peak_step",
    "reserved_at_peak_mb",
    "cache_at_peak_mb",
    "capacity_mb",
    "share_of_capacity",
    "live_in_trace_mb",
    "before_trace_mb",
    "allocs",
    "never_freed_mb",
]
LIVE_COLUMNS = ["device", "mb", "at_us", "freed_at_us", "op", "inner_op", "input_dims", "range", "python_frame"]


def memory_report(ses: Session, top: int) -> Report:
    """The `memory` Report: findings of the memory rules, peaks, who holds them, growth."""
    result = ses.memory
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if not result.has_memory:
        return Report(
            "memory",
            result.trace_path,
            th,
            (Section("Memory", text=result.note),),
            {"summary": None, "note": result.note},
            headline=result.note,
            warnings=warnings,
        )
    dev = result.devices
    main = dev.row(0, named=True)
    headline = (
        f"peak {main['peak_allocated_mb']:,.1f} MB allocated on {main['device']}"
        + (f" at {main['peak_at_us'] / 1000:,.1f} ms" if main["peak_at_us"] is not None else "")
        + (f" (step {main['peak_step']})" if main["peak_step"] is not None else "")
        + (f", {main['reserved_at_peak_mb']:,.1f} MB reserved" if main["reserved_at_peak_mb"] is not None else "")
        + (
            f", {main['share_of_capacity']:.1%} of the device's {main['capacity_mb']:,.0f} MB"
            if main["share_of_capacity"] is not None
            else ""
        )
    )
    found = ses.findings_of(rules_for("memory"))
    sections = [
        Section("Findings", text=findings_text(found)),
        Section(
            "Per device (MB; cache = reserved − allocated at the peak)",
            dev.select([c for c in DEVICE_COLUMNS if c in dev.columns]),
            text=result.note,
        ),
        Section("Allocations alive at the peak, by op", head(result.live_by_op, top)),
        Section(
            "Allocations alive at the peak, largest first",
            head(result.live_at_peak.select(LIVE_COLUMNS), top),
            main=True,
        ),
        Section(
            "Top allocating ops (total = in the op or its children; self = directly in it)", head(result.top_ops, top)
        ),
        Section("Allocated memory at step boundaries (growth per step)", head(result.steps, top)),
        Section(
            f"Allocations never freed in the trace ({result.never_freed.height} in all)",
            head(result.never_freed.select(LIVE_COLUMNS), top),
        ),
    ]
    payload = {
        "summary": {
            "has_totals": result.has_totals,
            "devices": dev,
            "findings": findings_payload(found),
            "note": result.note,
        },
        "live_at_peak_by_op": head(result.live_by_op, top),
        "live_at_peak": head(result.live_at_peak, top),
        "top_ops": head(result.top_ops, top),
        "steps": result.steps,
        "never_freed": head(result.never_freed, top),
        "timeline": result.timeline,
    }
    return Report("memory", result.trace_path, th, tuple(sections), payload, headline=headline, warnings=warnings)


@click.command("memory")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Device memory from profile_memory traces: the peak, who holds it, top allocating ops,
    growth per step, allocator cache, and allocations never freed."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    emit(with_health(memory_report(ses, top), ses), fmt, output)
