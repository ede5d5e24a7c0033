"""Compare two traces (before and after one change): step time with a noise-aware verdict, GPU
busy, idle by cause, stage times, copies and syncs per step, ops and kernels matched by name.

Everything is per step. A change in median step time smaller than the step-to-step spread
(median absolute deviation × 1.4826, the larger of the two traces') or than --min-change percent
is reported as within noise. --fail-if-slower PCT exits 1 when the median step time grew by more
than PCT percent, for CI.
"""

from __future__ import annotations

import click

from traceanalyzer.cli.commands.common import emit, head, open_session
from traceanalyzer.cli.commands.summary import GROUPS as SUMMARY_GROUPS
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.jobs.diff import DiffResult, analyse_diff
from traceanalyzer.report import Report, Section

GROUPS = tuple(g for g in SUMMARY_GROUPS if g != "ranks") + ("diff",)


def headline(r: DiffResult) -> str:
    """The verdict in one line."""
    if r.verdict == "not comparable":
        return "not comparable: a trace without timed events has no step time"
    ms_b, ms_a = r.median_before_us / 1000, r.median_after_us / 1000
    return (
        f"{r.verdict}: median step {ms_b:,.1f} ms -> {ms_a:,.1f} ms ({r.change_pct:+.1f}%); "
        f"noise (step-to-step spread) ±{r.noise_us / 1000:,.1f} ms, min change {r.options.min_change_pct:g}%"
    )


def diff_report(
    r: DiffResult, top: int, before_path: str, after_path: str, th: dict, warnings: tuple[str, ...] = ()
) -> Report:
    """The `diff` Report: the verdict, per-step metrics, findings, kernels and ops matched."""
    findings = [f"appeared: {f}" for f in r.findings_appeared] + [f"resolved: {f}" for f in r.findings_resolved]
    ops_cols = [
        "name",
        "self_us_per_step_before",
        "self_us_per_step_after",
        "delta_us",
        "count_per_step_before",
        "count_per_step_after",
    ]
    k_cols = [
        "name",
        "us_per_step_before",
        "us_per_step_after",
        "delta_us",
        "count_per_step_before",
        "count_per_step_after",
    ]
    sections = (
        Section(
            "Summary (per step unless named otherwise)",
            r.summary,
            main=True,
            whole=True,
            text=f"before: {before_path} ({r.before.step_count or 'no'} steps)\nafter:  {after_path} ({r.after.step_count or 'no'} steps)"
            + f"\nstage times from: {r.stages_source}",
        ),
        Section("Findings", text="\n".join(f"- {f}" for f in findings) or "(no finding appeared or was resolved)"),
        Section("Kernels matched by name, largest change first (µs per step)", head(r.kernels.select(k_cols), top)),
        Section(
            "Ops matched by name, largest change in self CPU time first (µs per step)",
            head(r.ops.select(ops_cols), top),
        ),
        Section("Kernels that appeared", head(r.kernels_appeared, top)),
        Section("Kernels that vanished", head(r.kernels_vanished, top)),
    )
    payload = {
        "before": before_path,
        "after": after_path,
        "verdict": r.verdict,
        "summary": {
            "median_step_before_us": r.median_before_us,
            "median_step_after_us": r.median_after_us,
            "change_pct": r.change_pct,
            "noise_us": r.noise_us,
            "step_times_before_us": list(r.before.step_times_us),
            "step_times_after_us": list(r.after.step_times_us),
            "stages_source": r.stages_source,
            "metrics": r.summary,
        },
        "findings_appeared": list(r.findings_appeared),
        "findings_resolved": list(r.findings_resolved),
        "kernels": head(r.kernels, top),
        "ops": head(r.ops, top),
        "kernels_appeared": head(r.kernels_appeared, top),
        "kernels_vanished": head(r.kernels_vanished, top),
    }
    return Report(
        "diff", f"{before_path} -> {after_path}", th, sections, payload, headline=headline(r), warnings=warnings
    )


@click.command("diff")
@click.argument("before", type=click.Path())
@click.argument("after", type=click.Path())
@option_flags(*GROUPS)
@click.option(
    "--fail-if-slower",
    "fail_if_slower_pct",
    type=click.FloatRange(min=0),
    default=None,
    help="exit 1 when the median step time grew by more than this many percent (for CI)",
)
@output_options
def command(
    before: str, after: str, fmt: str | None, top: int, output: str | None, fail_if_slower_pct: float | None, **kwargs
) -> None:
    """Compare two traces (before and after one change): step time with a noise-aware verdict,
    GPU busy, idle by cause, stage times, copies and syncs per step, ops and kernels by name."""
    options = build_options(kwargs, *GROUPS)
    sb = open_session(before, options)
    sa = open_session(after, options)
    result = analyse_diff(sb, sa, options)
    th = {**options.thresholds(GROUPS), "fail_if_slower_pct": fail_if_slower_pct}
    emit(diff_report(result, top, before, after, th, sb.warnings + sa.warnings), fmt, output)
    if fail_if_slower_pct is not None and result.change_pct is not None and result.change_pct > fail_if_slower_pct:
        raise RegressionDetected(
            None,
            f"median step time grew by {result.change_pct:.1f}% (more than --fail-if-slower {fail_if_slower_pct:g}%)",
        )
