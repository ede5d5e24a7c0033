"""Every GPU idle gap, what the CPU was doing, and which op and Python line caused it.

Idle time is the complement, per device, of the union of kernels, memcpys and memsets on all
streams, inside the profiled steps (or the GPU span when the trace has no ProfilerStep).
Causes: see `analyses.gap_causes` (sync, data_loading, cpu_bound, launch_latency, gpu_wait,
untraced, ...).
"""

from __future__ import annotations

import click

from traceanalyzer.analyses import windows
from traceanalyzer.cli.commands.common import emit, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options, picture_format
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("patterns", "gaps", "steps", "health", "ranks")

GAP_TABLE_COLUMNS = [
    "device",
    "step",
    "start_us",
    "duration_us",
    "cause",
    "op",
    "range",
    "python_frame",
    "call_api",
    "launch_delay_us",
    "next_activity",
    "waited_on",
    "blocked_thread",
]


def gaps_report(ses: Session, top: int) -> Report:
    """The `gaps` Report: summary, causes, culprits, the gaps and the per-step table."""
    result = ses.gaps
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if not result.has_gpu_work:
        return Report(
            "gaps",
            result.trace_path,
            th,
            (),
            {"summary": None, "gaps": [], "note": result.note},
            headline=result.note,
            warnings=warnings,
        )
    dev = result.devices
    headline = ses.verdict.sentence(windows.describe(result.window_kind))
    listed = result.gaps.select([c for c in GAP_TABLE_COLUMNS if c in result.gaps.columns])
    sections = (
        Section("GPU time per device", dev),
        Section(
            "Idle time by cause (all gaps)"
            + (
                f"; start-up set aside: the first {result.startup_window_us / 1000:,.1f} ms"
                if result.startup_window_us
                else ""
            ),
            result.idle_by_cause,
        ),
        Section("Top culprits (cause, op, Python frame)", head(result.culprits, top)),
        Section(
            f"Gaps of at least {result.options.min_gap_us:g} µs, longest first ({result.gaps.height} in all)",
            head(listed, top),
            main=True,
        ),
        Section("Per step", head(result.steps, top)),
    )
    payload = {
        "summary": {
            "window": result.window_kind,
            "step_source": ses.step_source,
            "communication": ses.communication,
            "devices": dev,
            "steps": result.steps,
            "idle_by_cause": {r["cause"]: r["idle_us"] for r in result.idle_by_cause.iter_rows(named=True)},
            "idle_by_cause_detail": result.idle_by_cause,
            "steady_idle_by_cause": {
                r["cause"]: r["idle_us"] for r in result.steady_idle_by_cause.iter_rows(named=True)
            },
            "steady_busy_share": result.steady_busy_share,
            "startup": {
                "end_us": result.startup_end_us,
                "window_us": result.startup_window_us,
                "idle_us": result.startup_idle_us,
            },
            "verdict": {"cause": ses.verdict.top_cause, "advice": ses.verdict.advice, "detail": ses.verdict.detail},
            "culprits": head(result.culprits, top),
            "gap_count": result.all_gaps.height,
            "listed_gap_count": result.gaps.height,
        },
        "gaps": head(result.gaps, top),
    }
    report = Report("gaps", result.trace_path, th, sections, payload, headline=headline, warnings=warnings)
    return with_health(report, ses, "busy_share", "gap_causes")


@click.command("gaps")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="also write a timeline (.png, .svg or .pdf) with gaps shaded by cause",
)
def command(trace: str, fmt: str | None, top: int, output: str | None, plot: str | None, **kwargs) -> None:
    """Every GPU idle gap, what the CPU was doing, and which op and Python line caused it."""
    plot_fmt = picture_format(plot) if plot else None  # a wrong extension fails before the work
    options = build_options(kwargs, *GROUPS)
    from traceanalyzer.cli.commands import directory as rank_dir  # a directory of per-rank files: cross-rank report

    if rank_dir.is_rank_dir(trace):
        emit(rank_dir.dir_report("gaps", trace, options, top, GROUPS), fmt, output)
        return
    ses = open_session(trace, options)
    emit(gaps_report(ses, top), fmt, output)
    result = ses.gaps
    if plot and result.has_gpu_work:
        from traceanalyzer.render.gap_plot import write_gap_plot
        from traceanalyzer.render.timeline import TimelineInputs

        write_gap_plot(TimelineInputs.of(ses), plot, plot_fmt)
        click.echo(f"wrote {plot}", err=True)
