"""Per kernel name: calls, total/mean/min/max time, share of GPU kernel time, grid and block,
Tensor Core use (from the name), the ops that launch it; and the short-kernel census (kernels
under `--short-kernel` µs), the launch-bound signal.
"""

from __future__ import annotations

import dataclasses

import click
import polars as pl

from traceanalyzer.analyses.kernels import KernelsResult, ShortKernels
from traceanalyzer.analyses.ops import sort_table
from traceanalyzer.cli.commands.common import emit, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.report import Report, Section
from traceanalyzer.units import duration_us, shown_in_us, us_name

GROUPS = ("kernels", "steps", "health")


def census_table(result: KernelsResult) -> pl.DataFrame:
    """The short-kernel census as a two-row table (all kernels, outside CUDA graphs)."""
    s = result.short
    return pl.DataFrame(
        {
            "kernels": ["all", "outside CUDA graphs"],
            "short": [s.count, s.count_outside_graphs],
            "total": [s.total, s.total_outside_graphs],
            "count_share": [s.count_share, s.count_share_outside_graphs],
        },
        schema={"kernels": pl.String, "short": pl.Int64, "total": pl.Int64, "count_share": pl.Float64},
    )


def census_payload(short: ShortKernels) -> dict:
    """The census's fields in their order, its ns durations shown in µs (`time_ns` -> `time_us`)."""
    fields = dataclasses.asdict(short)
    return {us_name(k) if shown_in_us(k) else k: duration_us(v) if shown_in_us(k) else v for k, v in fields.items()}


def kernels_payload(result: KernelsResult, table: pl.DataFrame) -> dict:
    """The `kernels` JSON body (`table`: the µs view, sorted and cut as shown)."""
    return {
        "total_us": result.total_us,
        "calls": result.calls,
        "distinct": result.table_ns.height,
        "short_kernels": census_payload(result.short),
        "tensor_core_share_of_matmul_conv": result.tensor_core_share,
        "matmul_conv_us": result.matmul_conv_us,
        "matmul_conv_no_tensor_cores_us": result.matmul_conv_no_tc_us,
        "kernels": table,
    }


@click.command("kernels")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@click.option(
    "--sort",
    "sort",
    default="total_us",
    show_default=True,
    help="column to sort by, largest first (calls, total_us, mean_us, max_us, ...)",
)
@output_options
def command(trace: str, sort: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Per kernel name: calls, time, share, grid/block, Tensor Cores, launching ops; short-kernel census."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    result = ses.kernels
    table = head(sort_table(result.table, sort), top)
    s = result.short
    headline = (
        f"{result.calls:,} kernels ({result.table_ns.height:,} distinct), {result.total_us:,.0f} µs; "
        + (
            f"{s.count_share:.0%} shorter than {s.threshold_us:g} µs ({s.time_share:.1%} of kernel time)"
            if s.count_share is not None
            else "no kernels"
        )
        + (
            f"; Tensor Cores on {result.tensor_core_share:.0%} of matmul/conv time"
            if result.tensor_core_share is not None
            else ""
        )
    )
    sections = (
        Section(f"Kernels by {sort}", table, main=True),
        Section(f"Short kernels (< {s.threshold_us:g} µs): the launch-bound census", census_table(result)),
    )
    report = Report(
        "kernels",
        ses.path,
        {**options.thresholds(GROUPS), "sort": sort},
        sections,
        kernels_payload(result, table),
        headline=headline,
        warnings=ses.warnings,
    )
    emit(with_health(report, ses, "kernel_time"), fmt, output)
