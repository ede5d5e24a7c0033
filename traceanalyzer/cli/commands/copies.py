"""Every GPU memcpy and memset: direction, pageable or pinned host memory, bytes, GB/s, how much
was hidden under compute, how long the issuing call held the CPU, and which op and Python line
issued it. Findings: pageable host memory, many small copies, device-to-host copies inside the
step loop, copies a side stream could hide.
"""

from __future__ import annotations

import click

from traceanalyzer.cli.commands.common import (
    emit,
    findings_payload,
    findings_text,
    head,
    note_report,
    open_session,
    record_report,
    with_health,
)
from traceanalyzer.cli.options import build_options, option_flags, output_options, record_option
from traceanalyzer.findings import rules_for
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session
from traceanalyzer.units import duration_us

GROUPS = ("patterns", "copies", "steps", "health", "materiality")

TABLE_COLUMNS = [
    "direction",
    "host_memory",
    "bytes",
    "duration_us",
    "gbps",
    "overlap_fraction",
    "exposed_us",
    "blocked_us",
    "api",
    "op",
    "range",
    "python_frame",
    "step",
]


def copies_report(ses: Session, top: int) -> Report:
    """The `copies` Report: findings of the copy rules, copies by site, every copy, per step."""
    result = ses.copies
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if result.note:
        return note_report("copies", result, th, warnings, "copies")
    # The result's µs display views for the tables; totals summed as integer ns.
    c = result.copies
    ns = result.copies_ns
    blocked, duration, exposed = (
        duration_us(ns[k].fill_null(0).sum()) for k in ("blocked_ns", "duration_ns", "exposed_ns")
    )
    headline = (
        f"{c.height:,} copies and memsets, {int(c['bytes'].fill_null(0).sum()):,} bytes, {duration / 1000:,.1f} ms on the GPU "
        f"({exposed / 1000:,.1f} ms not hidden under compute); their calls held the CPU {blocked / 1000:,.1f} ms"
    )
    summary = result.summary
    per_step = result.per_step
    found = ses.findings_of(rules_for("copies"))
    sections = (
        Section("Findings", text=findings_text(found)),
        Section("By direction, host memory, op and Python frame", head(summary, top)),
        Section(
            f"Copies, longest CPU block first ({c.height} in all)",
            head(c.select(TABLE_COLUMNS), top),
            main=True,
            export=head(c, top),  # CSV: every field of a copy
        ),
        Section("Per step", per_step),
    )
    payload = {
        "summary": {
            "copies": c.height,
            "bytes": int(c["bytes"].fill_null(0).sum()),
            "duration_us": duration,
            "exposed_us": exposed,
            "blocked_us": blocked,
            "groups": head(summary, top),
            "per_step": per_step,
        },
        "findings": findings_payload(found),
        "copies": head(c, top),  # every column (analyses.copies.COPY_COLUMNS)
    }
    return Report("copies", result.trace_path, th, sections, payload, headline=headline, warnings=warnings)


@click.command("copies")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
@record_option("copy", "longest CPU block first")
def command(trace: str, fmt: str | None, top: int, output: str | None, record: int | None, **kwargs) -> None:
    """Every GPU memcpy and memset, the op and Python line that issued it, and what it cost."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    if record is not None:
        emit(record_report(copies_report(ses, 0), ses.copies.copies, record, "copy"), fmt, output)
        return
    emit(with_health(copies_report(ses, top), ses), fmt, output)
