"""Every point where the CPU waited for the GPU: explicit synchronize calls, implicit ones inside
ops (`.item()`, `.cpu()`, `.tolist()`, `nonzero`, a blocking copy to pageable memory), and
GPU-side waits (cudaStreamWaitEvent) listed apart; per sync the CPU time blocked, the GPU work it
waited for, and the GPU idle bubble that followed, grouped by the op and Python line behind it.
"""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.cli.commands.common import emit, findings_payload, findings_text, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.findings import rules_for
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("patterns", "gaps", "syncs", "steps", "health")

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
        return Report(
            "syncs",
            result.trace_path,
            th,
            (),
            {"summary": None, "syncs": [], "findings": [], "note": result.note},
            headline=result.note,
            warnings=warnings,
        )
    s = result.syncs
    stalls = s.filter(pl.col("kind") != "gpu_wait")
    waits = s.filter(pl.col("kind") == "gpu_wait")
    every = result.by_api.filter(pl.col("kind") != "gpu_wait")
    n_waits = int(result.by_api.filter(pl.col("kind") == "gpu_wait")["calls"].sum())
    unit = "step" if ses.trace.steps.height else "trace (no ProfilerStep: one step)"
    headline = (
        f"{int(every['calls'].sum()):,} synchronising calls held the CPU {result.blocked_us / 1000:,.1f} ms (blocked_us); "
        f"they left the GPU idle {result.sync_idle_us / 1000:,.1f} ms (sync_idle_us: {every['bubble_us'].sum() / 1000:,.1f} ms "
        f"of bubbles after them, the rest while they still blocked) over {result.steps} {unit}"
        f"{'s' if result.steps != 1 and unit == 'step' else ''}; {n_waits:,} GPU-side waits (cudaStreamWaitEvent)"
    )
    found = ses.findings_of(rules_for("syncs"))
    sections = (
        Section("Findings", text=findings_text(found)),
        Section(
            "By site (op, range, Python frame)",
            head(result.summary.select(SUMMARY_COLUMNS), top) if result.summary.height else result.summary,
        ),
        Section(
            f"Syncs of at least {result.options.min_blocked_us:g} µs, longest CPU block first ({stalls.height} in all)",
            head(stalls.select(TABLE_COLUMNS), top),
            main=True,
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
            "bubble_us": every["bubble_us"].sum(),
            "idle_while_blocked_us": result.sync_idle_us - every["bubble_us"].sum(),
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
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Every point where the CPU waited for the GPU, the bubble it left, and the op and line behind it."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    emit(with_health(syncs_report(ses, top), ses, "gap_causes"), fmt, output)
