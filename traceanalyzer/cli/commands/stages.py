"""Where each step's time went: every moment of a step given to exactly one stage by priority.

Pipeline view (default): data_loading > h2d > forward > backward > optimizer > d2h > sync_wait >
other_cpu > gpu_idle (GPU work counts for the phase of the op that launched it; CPU time of a
phase counts only while the GPU runs nothing). `--stages FILE` maps your own stages (TOML
`[stages]` table, stage = regular expression on the op chain, in priority order).
`--view tensorboard`: the TensorBoard plugin's Kernel > Memcpy > Memset > Runtime > DataLoader >
CPU Exec, Other.
"""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.analyses.stages import StagesResult
from traceanalyzer.cli.commands.common import emit, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.report import Report, Section

GROUPS = ("patterns", "stages", "steps", "health")


def average_table(result: StagesResult) -> pl.DataFrame:
    """stage, us_per_step, share (of the average step)."""
    step = result.average_step_us or 0.0
    return pl.DataFrame(
        {
            "stage": list(result.average),
            "us_per_step": list(result.average.values()),
            "share": [v / step if step else None for v in result.average.values()],
        },
        schema={"stage": pl.String, "us_per_step": pl.Float64, "share": pl.Float64},
    )


def stages_payload(result: StagesResult) -> dict:
    """The stage breakdown as JSON: per step, the average, the order."""
    stage_cols = [s for s in result.stages if s in result.table.columns]
    steps = [
        {"step": r["step"], "duration_us": r["duration_us"], "stages": {s: r[s] for s in stage_cols}}
        for r in result.table.iter_rows(named=True)
    ]
    return {
        "view": result.view,
        "window": result.window_kind,
        "stage_order": list(result.stages),
        "steps": steps,
        "average": result.average,
        "average_step_us": result.average_step_us,
    }


def stages_report(result: StagesResult, path: str, th: dict, top: int, warnings: tuple[str, ...] = ()) -> Report:
    """The `stages` Report."""
    avg = average_table(result)
    ranked = avg.filter(pl.col("us_per_step") > 0).sort("us_per_step", descending=True).head(3)
    per = "step" if result.window_kind == "steps" else "trace (no ProfilerStep: it counts as one step)"
    headline = f"{result.table.height} window(s), {result.average_step_us:,.0f} µs per {per}; " + ", ".join(
        f"{r['stage']} {r['share']:.1%}" for r in ranked.iter_rows(named=True)
    )
    sections = (
        Section(f"Average per {per} ({result.view} view, stages in priority order)", avg),
        Section("Per step (µs)", head(result.table, top), main=True),
    )
    return Report("stages", path, th, sections, stages_payload(result), headline=headline, warnings=warnings)


@click.command("stages")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Per step, each moment given to exactly one stage by priority (data loading, copies,
    forward, backward, optimizer, sync wait, other CPU, GPU idle)."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    report = stages_report(ses.stages, ses.path, ses.options.thresholds(GROUPS), top, ses.warnings)
    emit(with_health(report, ses, "steps"), fmt, output)
