"""What would a change buy: replay the trace's dependency graph with the change and report the
median step as captured, as replayed with nothing changed (the model's own error) and as
predicted. `--without CAUSE` removes the CPU time of a gap cause (data_loading, sync, cpu_bound,
runtime_call, launch_latency, slow_launch, untraced) or a GPU wait (gpu_wait, kernel_spacing,
peer_wait); `--speedup 'PATTERN=FACTOR'` makes kernels, copies and ops matching PATTERN FACTOR
times faster; `--drop OPNAME` removes every instance of an op with the work it launched. All
repeatable and combined. docs/whatif.md says what the replay assumes.
"""

from __future__ import annotations

import click

from traceanalyzer.analyses.whatif import SCENARIO_CAUSES, Scenario, WhatIf
from traceanalyzer.cli.commands.common import emit, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("patterns", "gaps", "steps", "path", "health")


def whatif_headline(w: WhatIf) -> str:
    """Captured, replayed and predicted median steps in one line."""
    if w.median_step_us is None:
        return "no steps to replay"
    saving = w.saving_us or 0.0
    share = saving / w.replayed_median_step_us if w.replayed_median_step_us else 0.0
    return (
        f"median step {w.median_step_us:,.0f} µs as captured, {w.replayed_median_step_us:,.0f} µs replayed "
        f"(model error {w.model_error:.2%}); {w.scenario.describe()}: {w.predicted_median_step_us:,.0f} µs, "
        f"saving {saving:,.0f} µs per step ({share:.1%})"
    )


def whatif_payload(w: WhatIf) -> dict:
    """The `whatif` JSON body."""
    sc = w.scenario
    return {
        "scenario": {
            "without": list(sc.without),
            "speedup": [{"pattern": p, "factor": f} for p, f in sc.speedup],
            "drop": list(sc.drop),
            "description": sc.describe(),
        },
        "median_step_us": w.median_step_us,
        "replayed_median_step_us": w.replayed_median_step_us,
        "predicted_median_step_us": w.predicted_median_step_us,
        "saving_us": w.saving_us,
        "model_error": w.model_error,
        "steps": w.steps,
    }


def whatif_report(ses: Session, scenario: Scenario, th: dict) -> Report:
    """The `whatif` Report of one trace."""
    w = ses.whatif(scenario)
    sections = (Section("Steps: captured, replayed, predicted (µs)", w.steps, main=True),)
    report = Report(
        "whatif", ses.path, th, sections, whatif_payload(w), headline=whatif_headline(w), warnings=ses.warnings
    )
    return with_health(report, ses, "steps", "kernel_time")


@click.command("whatif")
@click.argument("trace", type=click.Path())
@click.option(
    "--without", "without", multiple=True, type=click.Choice(SCENARIO_CAUSES), help="remove this cause (repeatable)"
)
@click.option(
    "--speedup",
    "speedup",
    multiple=True,
    metavar="PATTERN=FACTOR",
    help="kernels/ops matching PATTERN FACTOR times faster (repeatable)",
)
@click.option(
    "--drop",
    "drop",
    multiple=True,
    metavar="OPNAME",
    help="remove every instance of this op and the work it launched (repeatable)",
)
@option_flags(*GROUPS)
@output_options
def command(
    trace: str, without: tuple[str, ...], speedup: tuple[str, ...], drop: tuple[str, ...], fmt: str | None,
    top: int, output: str | None, **kwargs,
) -> None:  # fmt: skip
    """Predicted step time with a cause removed, kernels/ops sped up or ops dropped (replay of the trace)."""
    scenario = Scenario.parse(without, speedup, drop)  # bad input fails before the trace is read
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    th = {**options.thresholds(GROUPS)}
    emit(whatif_report(ses, scenario, th), fmt, output)
