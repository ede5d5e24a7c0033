"""Every point where the CPU waited for the GPU: explicit synchronize calls, implicit ones inside
ops (`.item()`, `.cpu()`, `.tolist()`, `nonzero`, a blocking copy to pageable memory), and
GPU-side waits (cudaStreamWaitEvent) listed apart; per sync the CPU time blocked, the GPU work it
waited for, and the GPU idle bubble that followed, grouped by the op and Python line behind it.
"""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.analyses.syncs import SyncsResult, analyse_syncs
from traceanalyzer.cli_options import build, dataclass_options, output_options
from traceanalyzer.commands.common import emit, head, load_trace
from traceanalyzer.options import SyncOptions, thresholds
from traceanalyzer.report import Report, Section

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


def syncs_report(result: SyncsResult, top: int, warnings: tuple[str, ...] = ()) -> Report:
    th = thresholds(result.options)
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
    unit = "step" if result.per_step.height else "trace"
    headline = (
        f"{int(every['calls'].sum()):,} synchronising calls held the CPU {every['blocked_us'].sum() / 1000:,.1f} ms and were followed by "
        f"{every['bubble_us'].sum() / 1000:,.1f} ms of GPU idle time ({result.steps} {unit}{'s' if result.steps != 1 else ''}); "
        f"{n_waits:,} GPU-side waits (cudaStreamWaitEvent)"
    )
    findings = "\n".join(f"- {f['message']}" for f in result.findings) or "(none)"
    sections = (
        Section("Findings", text=findings),
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
            "blocked_us": every["blocked_us"].sum(),
            "bubble_us": every["bubble_us"].sum(),
            "listed": s.height,
            "steps": result.steps,
            "sites": head(result.summary, top),
            "per_step": result.per_step,
            "by_api": result.by_api,
        },
        "findings": list(result.findings),
        "syncs": head(s, top),
    }
    return Report("syncs", result.trace_path, th, sections, payload, headline=headline, warnings=warnings)


@click.command("syncs")
@click.argument("trace", type=click.Path())
@dataclass_options(SyncOptions)
@output_options
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Every point where the CPU waited for the GPU, the bubble it left, and the op and line behind it."""
    options = build(SyncOptions, kwargs)
    t = load_trace(trace)
    emit(syncs_report(analyse_syncs(t, options), top, t.warnings), fmt, output)
