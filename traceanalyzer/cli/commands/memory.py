"""Device memory from profile_memory traces: the peak, who holds it, top allocating ops, growth
per step, allocator cache, and allocations never freed.

Peak = the largest `Total Allocated` the allocator reported on a device. An allocation is alive
at the peak when it came at or before the peak and was freed after it (or never, in the trace);
it belongs to the innermost op around it on the allocating thread.
"""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.cli.commands.common import emit, findings_payload, findings_text, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.findings import rules_for
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

GROUPS = ("memory", "steps", "health")
MIB = 1024 * 1024

DEVICE_COLUMNS = [
    "device",
    "peak_allocated_mb",
    "peak_at_us",
    "peak_step",
    "reserved_at_peak_mb",
    "cache_at_peak_mb",
    "capacity_mb",
    "share_of_capacity",
    "live_in_trace_mb",
    "before_trace_mb",
    "allocs",
    "never_freed_mb",
]
LIVE_COLUMNS = ["device", "mib", "at_us", "freed_at_us", "op", "inner_op", "input_dims", "range", "python_frame"]


def as_bytes(df: pl.DataFrame) -> pl.DataFrame:
    """The analysis' MiB columns (`peak_allocated_mb`, `mb`) as integer byte counts
    (`peak_allocated_bytes`, `bytes`), for JSON and CSV; a column already in bytes wins."""
    out = df
    for c in df.columns:
        if c == "mb" or c.endswith("_mb"):
            name = "bytes" if c == "mb" else c.removesuffix("_mb") + "_bytes"
            out = out.drop(c)
            if name not in df.columns:
                out = out.with_columns((df[c] * MIB).round(0).cast(pl.Int64).alias(name))
    return out


def as_mib(df: pl.DataFrame) -> pl.DataFrame:
    """The analysis' `_mb` columns named for what they hold, MiB, for the text tables."""
    return df.rename(
        {
            c: ("mib" if c == "mb" else c.removesuffix("_mb") + "_mib")
            for c in df.columns
            if c == "mb" or c.endswith("_mb")
        }
    )


def _in_mib(title: str, df: pl.DataFrame, top: int, columns: list[str] | None = None, main: bool = False) -> Section:
    """`top` rows of a table, shown in MiB (only `columns`, when given) and exported in bytes."""
    rows = head(df, top)
    shown = as_mib(rows)
    return Section(title, shown.select(columns) if columns else shown, main=main, export=as_bytes(rows))


def memory_report(ses: Session, top: int) -> Report:
    """The `memory` Report: findings of the memory rules, peaks, who holds them, growth."""
    result = ses.memory
    th = ses.options.thresholds(GROUPS)
    warnings = ses.warnings
    if not result.has_memory:
        return Report(
            "memory",
            result.trace_path,
            th,
            (Section("Memory", text=result.note),),
            {"summary": None, "note": result.note},
            headline=result.note,
            warnings=warnings,
        )
    dev = result.devices
    main = dev.row(0, named=True)
    headline = (
        f"peak {main['peak_allocated_mb']:,.1f} MiB allocated on {main['device']}"
        + (f" at {main['peak_at_us'] / 1000:,.1f} ms" if main["peak_at_us"] is not None else "")
        + (f" (step {main['peak_step']})" if main["peak_step"] is not None else "")
        + (f", {main['reserved_at_peak_mb']:,.1f} MiB reserved" if main["reserved_at_peak_mb"] is not None else "")
        + (
            f", {main['share_of_capacity']:.1%} of the device's {main['capacity_mb']:,.0f} MiB"
            if main["share_of_capacity"] is not None
            else ""
        )
    )
    found = ses.findings_of(rules_for("memory"))
    sections = [
        Section("Findings", text=findings_text(found)),
        Section(
            "Per device (MiB; cache = reserved − allocated at the peak)",
            as_mib(dev.select([c for c in DEVICE_COLUMNS if c in dev.columns])),
            export=as_bytes(dev),
            text=result.note,
        ),
        _in_mib("Allocations alive at the peak, by op", result.live_by_op, top),
        _in_mib("Allocations alive at the peak, largest first", result.live_at_peak, top, LIVE_COLUMNS, main=True),
        _in_mib("Top allocating ops (total = in the op or its children; self = directly in it)", result.top_ops, top),
        _in_mib("Allocated memory at step boundaries (growth per step)", result.steps, top),
        _in_mib(
            f"Allocations never freed in the trace ({result.never_freed.height} in all)",
            result.never_freed,
            top,
            LIVE_COLUMNS,
        ),
    ]
    payload = {
        "summary": {
            "has_totals": result.has_totals,
            "devices": as_bytes(dev),
            "findings": findings_payload(found),
            "note": result.note,
        },
        "live_at_peak_by_op": as_bytes(head(result.live_by_op, top)),
        "live_at_peak": as_bytes(head(result.live_at_peak, top)),
        "top_ops": as_bytes(head(result.top_ops, top)),
        "steps": as_bytes(result.steps),
        "never_freed": as_bytes(head(result.never_freed, top)),
        "timeline": as_bytes(result.timeline),
    }
    return Report("memory", result.trace_path, th, tuple(sections), payload, headline=headline, warnings=warnings)


@click.command("memory")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Device memory from profile_memory traces: the peak, who holds it, top allocating ops,
    growth per step, allocator cache, and allocations never freed."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    emit(with_health(memory_report(ses, top), ses), fmt, output)
