"""Every point where the CPU waited for the GPU: explicit synchronize calls, implicit ones inside
ops (`.item()`, `.cpu()`, `.tolist()`, `nonzero`, a blocking copy to pageable memory), and
GPU-side waits (cudaStreamWaitEvent) listed apart; per sync the CPU time blocked, the GPU work it
waited for, and the GPU idle bubble that followed, grouped by the op and Python line behind it.
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
from traceanalyzer.wording import plural

GROUPS = ("patterns", "gaps", "syncs", "steps", "health", "materiality")

TABLE_COLUMNS = [
    "kind",
    "api",
    "start_us",
    "blocked_us",
    "bubble_us",
    "waited_for",
    "op",
    "range",
    "python_frame",
    "step",
]
SUMMARY_COLUMNS = [
    "kind",
    "op",
    "range",
    "python_frame",
    "apis",
    "calls",
    "points_per_step",
    "blocked_us_per_step",
    "bubble_us_per_step",
    "bubble_share",
]


def syncs_report(ses: Session, top: int) -> Report:
    """The `syncs` Report: findings of the sync rules, sites, every sync, waits, per step."""
    result = ses.syncs
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if result.note:
        return note_report("syncs", result, th, warnings, "syncs")
    s = result.syncs
    stalls = result.stalls
    waits = result.waits
    every = result.stall_apis
    n_waits = result.wait_calls
    unit = "step" if ses.trace.steps.height else "trace (no ProfilerStep: one step)"
    headline = (
        f"{int(every['calls'].sum()):,} synchronising calls held the CPU {result.blocked_us / 1000:,.1f} ms (blocked_us); "
        f"they left the GPU idle {result.sync_idle_us / 1000:,.1f} ms (sync_idle_us: {duration_us(result.bubble_ns) / 1000:,.1f} ms "
        f"of bubbles after them, the rest while they still blocked) over "
        f"{plural(result.steps, unit) if unit == 'step' else f'{result.steps} {unit}'}; "
        f"{n_waits:,} GPU-side waits (cudaStreamWaitEvent)"
    )
    found = ses.findings_of(rules_for("syncs"))
    sections = (
        Section("Findings", text=findings_text(found)),
        Section(
            "By site (op, range, Python frame)",
            head(result.summary.select(SUMMARY_COLUMNS), top) if result.summary.height else result.summary,
            keep=("apis",),  # the synchronising calls themselves (cudaStreamSynchronize behind an aten::to)
        ),
        Section(
            f"Syncs of at least {result.options.min_blocked_us:g} µs, longest CPU block first ({stalls.height} in all)",
            head(stalls.select(TABLE_COLUMNS), top),
            main=True,
            export=head(stalls, top),  # CSV: every field of a sync
            keep=("api",),
        ),
        Section(
            f"GPU-side waits ({n_waits} in all)",
            head(waits.select("api", "start_us", "op", "range", "python_frame", "step"), top),
        ),
        Section("Per step", result.per_step),
    )
    payload = {
        "summary": {
            "syncs": int(every["calls"].sum()),
            "gpu_waits": n_waits,
            "blocked_us": result.blocked_us,
            "bubble_us": duration_us(result.bubble_ns),
            "idle_while_blocked_us": duration_us(result.sync_idle_ns - result.bubble_ns),
            "sync_idle_us": result.sync_idle_us,
            "listed": s.height,
            "steps": result.steps,
            "sites": head(result.summary, top),
            "per_step": result.per_step,
            "by_api": result.by_api,
        },
        "findings": findings_payload(found),
        "syncs": head(s, top),
    }
    return Report("syncs", result.trace_path, th, sections, payload, headline=headline, warnings=warnings)


@click.command("syncs")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
@record_option("sync", "longest CPU block first")
def command(trace: str, fmt: str | None, top: int, output: str | None, record: int | None, **kwargs) -> None:
    """Every point where the CPU waited for the GPU, the bubble it left, and the op and line behind it."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    if record is not None:
        stalls = ses.syncs.stalls
        emit(record_report(syncs_report(ses, 0), stalls, record, "sync"), fmt, output)
        return
    emit(with_health(syncs_report(ses, top), ses, "gap_causes"), fmt, output)
