"""The critical path of each step: the chain of CPU work, launches, GPU work and waits that set
the step's end, as segments whose durations sum to the step time, with the share of step time by
kind (cpu_op, data_loading, launch, kernel, sync, peer_wait, ...) and by op or kernel on it. What
is not on the path can be made faster without the step getting shorter; `whatif` says by how much
a change would.
"""

from __future__ import annotations

from typing import Any

import click
import polars as pl

from traceanalyzer.analyses.critical_path import CriticalPath
from traceanalyzer.cli.commands.common import emit, head, open_session, with_health
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session
from traceanalyzer.units import duration_us, us_expr
from traceanalyzer.wording import plural

GROUPS = ("patterns", "gaps", "steps", "path", "health")


def shares(df: pl.DataFrame) -> pl.DataFrame:
    """A by_kind / by_name table in µs."""
    return df.with_columns(us_expr("duration_ns", 0)).drop("duration_ns")


def _segments(cp: CriticalPath, origin_ns: int, step: Any) -> pl.DataFrame:
    """The segments of one step in order: kind, name, lane, start_us, duration_us."""
    mine = cp.segments.filter(pl.col("step").eq_missing(step))
    names = pl.col("kind", "name", "lane").cast(pl.String)
    return mine.select(names, us_expr("start_ns", origin_ns), us_expr("duration_ns", origin_ns))


def step_paths(cp: CriticalPath, origin_ns: int) -> list[dict]:
    """`steps[]`: step, step_us and its segments (kind, name, lane, start_us, duration_us), each
    step's segments a table: the JSON encodes its rows a slice at a time (as Python dicts, every
    step's segments were +110 MB at 311 MB, made for every format)."""
    return [
        {"step": step, "index": k, "step_us": duration_us(ns), "segments": _segments(cp, origin_ns, step)}
        for k, (step, ns) in enumerate(cp.steps.select("step", "step_ns").iter_rows())
    ]


def runs(segments: pl.DataFrame) -> pl.DataFrame:
    """Consecutive segments of one kind on one lane as one row: kind, lane, start_us,
    duration_us, segments, and the name holding most of the run's time."""
    if segments.is_empty():
        return pl.DataFrame(schema={"kind": pl.String, "lane": pl.String, "start_us": pl.Float64,
                                    "duration_us": pl.Float64, "segments": pl.UInt32, "mostly": pl.String})  # fmt: skip
    new = (pl.col("kind") != pl.col("kind").shift(1)) | (pl.col("lane") != pl.col("lane").shift(1))
    r = segments.with_columns(_run=new.fill_null(True).cum_sum())
    top = (
        r.group_by("_run", "name")
        .agg(pl.col("duration_us").sum())
        .sort("_run", "duration_us", "name", descending=[False, True, False])
        .unique("_run", keep="first")
        .select("_run", mostly="name")
    )
    return (
        r.group_by("_run", maintain_order=True)
        .agg(
            pl.col("kind").first(),
            pl.col("lane").first(),
            pl.col("start_us").first(),
            pl.col("duration_us").sum(),
            segments=pl.len(),
        )
        .join(top, on="_run", how="left")
        .drop("_run")
    )


def slowest_step(cp: CriticalPath) -> int | None:
    """The row index (in `cp.steps`) of the longest step, or None without steps."""
    if cp.steps.is_empty():
        return None
    return int(cp.steps["step_ns"].arg_max())


def headline(cp: CriticalPath) -> str:
    """The path in one line: the three kinds that hold most of it."""
    if cp.steps.is_empty():
        return "no timed events: no critical path"
    top = ", ".join(f"{k} {s:.1%}" for k, s in cp.by_kind.head(3).select("kind", "share").iter_rows())
    n = cp.steps.height
    return f"critical path over {plural(n, 'step')}: {top} of the step time"


def path_report(ses: Session, th: dict) -> Report:
    """The `path` Report of one trace."""
    cp = ses.critical_path
    origin = ses.trace.meta.origin_ns
    k = slowest_step(cp)
    sections = [
        Section("Critical path by kind (share of step time)", shares(cp.by_kind), whole=True),
        Section("Critical path by op / kernel", shares(cp.by_name), main=True),
    ]
    slowest = cp.steps.row(k, named=True) if k is not None else None
    if slowest is not None:
        table = _segments(cp, origin, slowest["step"])
        title = (
            f"Slowest step ({slowest['step']}, {duration_us(slowest['step_ns']):,.0f} µs): its path in order, "
            "one row per run of a kind"
        )
        sections.append(Section(title, runs(table), export=table))
    payload = {
        "steps": lambda: step_paths(cp, origin),  # only JSON prints every step's path
        "by_kind": shares(cp.by_kind),
        "by_name": shares(cp.by_name),
        "slowest_step": slowest["step"] if slowest is not None else None,
    }
    report = Report("path", ses.path, th, tuple(sections), payload, headline=headline(cp), warnings=ses.warnings)
    return with_health(report, ses, "steps", "kernel_time")


@click.command("path")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@output_options
def command(trace: str, fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """Critical path of each step: segments summing to the step time, shares by kind and by op/kernel."""
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    rep = path_report(ses, options.thresholds(GROUPS))
    if top:
        rep.payload["by_name"] = head(rep.payload["by_name"], top)
    emit(rep, fmt, output)
