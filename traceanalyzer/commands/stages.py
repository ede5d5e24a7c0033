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

from traceanalyzer.analyses.stages import StagesResult, analyse_stages, read_mapping
from traceanalyzer.cli_options import build, dataclass_options, output_options
from traceanalyzer.commands.common import emit, head, load_trace
from traceanalyzer.errors import UsageError
from traceanalyzer.options import StageOptions, thresholds
from traceanalyzer.report import Report, Section


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
    avg = average_table(result)
    ranked = avg.filter(pl.col("us_per_step") > 0).sort("us_per_step", descending=True).head(3)
    per = "step" if result.window_kind == "steps" else "trace (no ProfilerStep)"
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
@dataclass_options(StageOptions)
@click.option(
    "--view",
    type=click.Choice(["pipeline", "tensorboard"]),
    default="pipeline",
    show_default=True,
    help="pipeline stages, or the TensorBoard plugin's categories",
)
@click.option(
    "--stages",
    "stages_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file: [stages] table of stage = regular expression (on the op chain), in priority order",
)
@output_options
def command(
    trace: str, view: str, stages_file: str | None, fmt: str | None, top: int, output: str | None, **kwargs
) -> None:
    """Per step, each moment given to exactly one stage by priority (data loading, copies,
    forward, backward, optimizer, sync wait, other CPU, GPU idle)."""
    options = build(StageOptions, kwargs)
    if stages_file and view == "tensorboard":
        raise UsageError(None, "--stages cannot be combined with --view tensorboard")
    mapping = read_mapping(stages_file) if stages_file else None
    t = load_trace(trace)
    result = analyse_stages(t, options, view=view, mapping=mapping)
    th = {**thresholds(options), "view": view, "stages_file": stages_file}
    emit(stages_report(result, t.path, th, top, t.warnings), fmt, output)
