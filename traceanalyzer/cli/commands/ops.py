"""Per op: calls, self and total CPU time, self and total GPU time (GPU work attributed to the
op that launched it, CUDA-graph replays included), like `prof.key_averages()` from the trace
alone. Group by name, by name and input shapes, or by module; sort by any column.
"""

from __future__ import annotations

import click

from traceanalyzer.analyses.ops import sort_table
from traceanalyzer.cli.commands.common import emit, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.report import Report, Section

GROUPS = ("ops", "steps", "health")


@click.command("ops")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@click.option(
    "--sort",
    "sort",
    default="total_gpu_us",
    show_default=True,
    help="column to sort by, largest first (calls, self_cpu_us, total_cpu_us, self_gpu_us, total_gpu_us, ...)",
)
@output_options
def command(trace: str, sort: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Per op name: calls, self/total CPU time and self/total GPU time (key_averages from the trace)."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    table = sort_table(ses.ops.table, sort)
    shown = head(table, top)
    group_by = options.ops.group_by
    headline = f"{table.height:,} op groups (by {group_by}), sorted by {sort}"
    report = Report(
        "ops",
        ses.path,
        {**options.thresholds(GROUPS), "sort": sort},
        (Section(f"Ops by {sort}", shown, main=True),),
        {"group_by": group_by, "sort": sort, "groups": table.height, "ops": shown},
        headline=headline,
        warnings=ses.warnings,
    )
    emit(with_health(report, ses, "op_gpu_time"), fmt, output)
