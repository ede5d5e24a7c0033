"""Every GPU idle gap, what the CPU was doing, and which op and Python line caused it.

Idle time is the complement, per device, of the union of kernels, memcpys and memsets on all
streams, inside the profiled steps (or the GPU span when the trace has no ProfilerStep).
Causes: see `analyses.gap_causes` (sync, data_loading, cpu_bound, launch_latency, gpu_wait,
untraced, ...).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from traceanalyzer.cli.options import (
    build_options,
    fail_on_option,
    option_flags,
    output_options,
    picture_format,
    record_option,
)
from traceanalyzer.errors import RegressionDetected

# What builds the report (polars, the Session, the renderers' document model) is imported when
# the command runs, not when click reads its options: `gaps --help` imports none of it.
if TYPE_CHECKING:
    from traceanalyzer.report import Report
    from traceanalyzer.session import Session

GROUPS = ("patterns", "gaps", "steps", "health", "ranks", "materiality")

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

# The column that explains a cause: shown, never hidden by a narrow terminal, when that cause
# leads the idle time (what the GPU waited on; the synchronising call).
EXPLAINED_BY = {"gpu_wait": "waited_on", "sync": "sync_api"}


# What neither the gaps' classification, their culprits, the verdict nor the report reads: the
# ops' shapes and types, the kernels' launch geometry and bytes, the external ids (the links
# they made are op_id / runtime_id): 311 MB: ~22 MB, let go before them.
UNREAD = {
    "ops": ("input_dims", "input_type", "concrete_inputs", "external_id"),
    "runtime": ("external_id",),
    "gpu": ("grid", "block", "bytes", "graph_id", "external_id"),
}


def _narrow(ses: Session, unread: dict[str, tuple[str, ...]] = UNREAD, cached: bool = False) -> None:
    """The Session's traces without the `unread` columns (table -> columns; their other columns
    and memos shared). Not for a Trace read from the cache (`cache.lazy`) unless `cached`: it is
    read in full first (`dataclasses.replace`), which a command whose results are all cached never
    needs. With a cache the store is handed the narrowed Trace (`share`); the one it writes
    (`put_trace`, on its thread) keeps every column. `summary` drops its own (`summary.UNREAD`)."""
    if ses.store is not None and not cached:
        from traceanalyzer.jobs import cache

        if cache.lazy(ses.trace):
            return
    narrowed: dict[int, object] = {}
    for attr in ("trace", "loaded"):
        old = getattr(ses, attr)
        if id(old) not in narrowed:
            tables = {t: getattr(old, t).drop(cols, strict=False) for t, cols in unread.items()}
            new = dataclasses.replace(old, **tables)
            new.__dict__["_derived"] = dict(old.__dict__.get("_derived", {}))  # computed from the same rows
            narrowed[id(old)] = new
        setattr(ses, attr, narrowed[id(old)])
    if ses.store is not None:
        ses.store.share(trace=ses.trace, loaded=ses.loaded)  # what a stored result names


def gaps_report(ses: Session, top: int) -> Report:
    """The `gaps` Report: summary, causes, culprits, the gaps and the per-step table."""
    from traceanalyzer.analyses import windows
    from traceanalyzer.cli.commands.common import head, with_health
    from traceanalyzer.report import Report, Section

    result = ses.gaps
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if not result.has_gpu_work:
        report = Report(
            "gaps",
            result.trace_path,
            th,
            (),
            {"summary": None, "gaps": [], "note": result.note},
            headline=result.note,
            warnings=warnings,
        )
        return with_health(report, ses, "busy_share", "gap_causes")
    dev = result.devices
    headline = ses.verdict.sentence(windows.describe(result.window_kind))
    explain = EXPLAINED_BY.get(ses.verdict.top_cause or "")
    shown = [*GAP_TABLE_COLUMNS, *([explain] if explain and explain not in GAP_TABLE_COLUMNS else [])]
    listed = result.gaps.select([c for c in shown if c in result.gaps.columns])
    keep = (explain,) if explain else ()
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
        Section("Top culprits (cause, op, Python frame)", head(result.culprits, top), keep=keep),
        Section(
            f"Gaps of at least {result.options.min_gap_us:g} µs, longest first ({result.gaps.height} in all)",
            head(listed, top),
            main=True,
            export=head(result.gaps, top),  # CSV: every field of a gap
            keep=keep,
        ),
        Section("Per step", head(result.steps, top)),
    )
    payload = {
        "summary": {
            "window": result.window_kind,
            "step_source": ses.step_source,
            "communication": lambda: ses.communication.per_step,  # JSON only: not computed for a table
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
            "gap_count": result.all_gaps_ns.height,  # the ns table: no µs view of every gap is made
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
@record_option("gap", "longest first")
@fail_on_option()
def command(
    trace: str,
    fmt: str | None,
    top: int,
    output: str | None,
    plot: str | None,
    record: int | None,
    fail_on: tuple[str, ...],
    **kwargs,
) -> None:
    """Every GPU idle gap, what the CPU was doing, and which op and Python line caused it."""
    from traceanalyzer.cli.commands.common import emit, open_session, record_report
    from traceanalyzer.cli.opening import is_directory

    plot_fmt = picture_format(plot) if plot else None  # a wrong extension fails before the work
    options = build_options(kwargs, *GROUPS)
    if is_directory(str(trace)):  # a directory of per-rank files: the cross-rank report
        from traceanalyzer.cli.commands import directory as rank_dir

        rep = rank_dir.dir_report("gaps", trace, options, top, GROUPS, fail_on=fail_on)
        emit(rep, fmt, output)
        rank_dir.check_fail_on(rep, fail_on)  # any rank, or the job
        return
    ses = open_session(trace, options)
    # The report always reads the health checks and (for the verdict) the communication table:
    # built first, while the Trace alone is held, their transients (1 GB: +84 MB, +60 MB) never
    # sit on top of the gaps' memory; their results are a few rows.
    _ = ses.health, ses.communication
    lean = not plot and not fail_on  # nothing below reads the CPU layers or the classified pieces
    if lean and ses.trace.has_gpu_work and not ses.kept("gaps"):
        # The classification first: the CPU layer unions serve it alone (the culprits are named
        # from the blocking calls and data ranges it keeps), so they go before the gaps are
        # named, and their memory serves that (1 GB: ~70 MB).
        _narrow(ses)
        _ = ses.classified
        ses.release("activity")
    result = ses.gaps
    if lean:
        # What the report reads is built (the gaps, health, verdict, communication need neither):
        # the classified pieces go too, their memory serves the report (1 GB: ~55 MB).
        ses.release("activity", "classified")
    if record is not None:
        report = record_report(gaps_report(ses, 0), result.gaps, record, "gap")
    else:
        report = gaps_report(ses, top)
    if lean:
        # The report is built (its tables are the results'): the Trace goes before it is written,
        # its memory serves the output (311 MB: ~75 MB).
        ses.release("trace")
    emit(report, fmt, output)
    if record is not None:
        return
    if plot and result.has_gpu_work:
        from traceanalyzer.cli.pictures import timeline_inputs
        from traceanalyzer.render.gap_plot import write_gap_plot

        write_gap_plot(timeline_inputs(ses), plot, plot_fmt)
        click.echo(f"wrote {plot}", err=True)
    # The rules run only when asked: gaps prints no finding, and the rules' what-if estimates
    # build the whole dependency graph.
    failed = sorted({f.rule for f in ses.findings} & set(fail_on)) if fail_on else []
    if failed:
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {', '.join(failed)}")
