"""How close to the hardware: per op and shape, calls, GPU time, achieved TFLOP/s and GB/s,
arithmetic intensity, the bound (compute or memory) and the share of the device's peak at that
bound, the ops with the most GPU time left below their roof first; GPU time no model covers,
with the reason; the peaks used and their source. `--plot FILE.png` draws the roofline.
Needs shapes (record_shapes=True); docs/roofline.md gives the formulas and the peaks table.
"""

from __future__ import annotations

import os

import click
import polars as pl

from traceanalyzer.analyses.roofline import RooflineResult
from traceanalyzer.cli.commands.common import (
    emit,
    findings_payload,
    findings_table,
    findings_text,
    head,
    open_session,
    with_health,
)
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.findings import rules_for
from traceanalyzer.render.output import write_atomic
from traceanalyzer.render.roofline_plot import roofline_headline, roofline_table
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("roofline", "health")


def devices_table(r: RooflineResult) -> pl.DataFrame:
    """The peaks in use per device (the JSON `device` object holds every column)."""
    return r.devices.select("device", "name", "part", "fp32", "tf32", "bf16", "fp8", "memory_gbps", "found")


def roofline_payload(r: RooflineResult, ops: pl.DataFrame) -> dict:
    """The `roofline` JSON body."""
    return {
        "gpu_us": r.gpu_us,
        "modelled_gpu_us": r.modelled_gpu_us,
        "modelled_share": r.modelled_share,
        "note": r.note,
        "device": r.devices,
        "ops": ops,
        "unmodelled": r.unmodelled,
    }


def sections(ses: Session, top: int) -> list[Section]:
    """The roofline sections (shared by `roofline` and `summary`)."""
    r = ses.roofline
    return [
        Section("Peaks used (dense, TFLOP/s and GB/s)", devices_table(r), export=r.devices),
        Section(
            "Ops by GPU time left below the roof (headroom_us = gpu_us x (1 - peak_share))",
            roofline_table(head(r.ops, top)),
            export=r.ops,
            main=True,
        ),
        Section("GPU time without a work model", head(r.unmodelled, top), export=r.unmodelled),
    ]


@click.command("roofline")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@click.option(
    "--plot", "plot", type=click.Path(dir_okay=False), default=None, help="also draw the roofline to this PNG"
)
@output_options
def command(trace: str, plot: str | None, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Per op and shape: achieved TFLOP/s and GB/s, intensity, bound and share of the device's peak."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    r = ses.roofline
    found = ses.findings_of(rules_for("roofline"))
    secs = sections(ses, top)
    secs.append(Section("Findings", findings_table(found), text=findings_text(found), show_table=False))
    payload = {**roofline_payload(r, head(r.ops, top)), "findings": findings_payload(found)}
    report = Report(
        "roofline",
        ses.path,
        options.thresholds(GROUPS),
        tuple(secs),
        payload,
        headline=roofline_headline(r),
        warnings=ses.warnings,
    )
    emit(with_health(report, ses, "op_gpu_time"), fmt, output)
    if plot:
        from traceanalyzer.render.roofline_plot import roofline_png

        png = roofline_png(r, os.path.basename(ses.path))
        if png is None:
            click.echo(f"traceanalyzer: no op with FLOPs and GPU time to draw; {plot} not written", err=True)
            return
        write_atomic(plot, png)
        click.echo(f"wrote {plot}", err=True)
