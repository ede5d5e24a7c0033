"""Helpers every subcommand uses: open a Session with progress and warnings, emit a report,
show findings."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import replace

import click
import polars as pl

from traceanalyzer.cli.options import progress_printer, resolve_format
from traceanalyzer.findings import Finding
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.render import RENDERERS, csv_format
from traceanalyzer.render.fit import FIXED_WIDTH, terminal_width
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import TABLE_ROWS, Report, Section
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace


def load_trace(path: str, max_decompressed: int | None = None) -> Trace:
    """Load with a progress bar on a terminal; warnings go to stderr, one line each."""
    if max_decompressed is None:  # the group's --max-decompressed (cli.py)
        ctx = click.get_current_context(silent=True)
        obj = ctx.find_root().obj if ctx is not None else None
        max_decompressed = obj.get("max_decompressed") if isinstance(obj, dict) else None
    kwargs = {"max_decompressed": max_decompressed} if max_decompressed else {}
    trace = load(path, progress=progress_printer(), **kwargs)
    for w in trace.warnings:
        click.echo(f"traceanalyzer: warning: {path}: {w}", err=True)
    return trace


def open_session(path: str, options: Options) -> Session:
    """The Session a command reads all its numbers from."""
    return Session(load_trace(path), options)


def _display(report: Report, output: str | None) -> Report:
    """The report with the table settings of this command line: `--top`, `--wide`, width."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    top = meta.get("traceanalyzer.top")
    rows = TABLE_ROWS if top is None else (top or None)
    width = terminal_width() if not output else int(os.environ.get("COLUMNS", "0") or 0) or FIXED_WIDTH
    wide = bool(meta.get("traceanalyzer.wide"))
    return replace(report, table_rows=rows, wide=wide, width=width, exports_whole=top is None)


def csv_paths(output: str, report: Report) -> list[tuple[str, pl.DataFrame]]:
    """Where `-o NAME.csv` writes each table: the main table to NAME.csv, every other table to
    NAME.<table>.csv beside it."""
    stem = output[: -len(".csv")] if output.lower().endswith(".csv") else output
    tables = report.tables()
    return [(output if k == 0 else f"{stem}.{slug}.csv", df) for k, (slug, df) in enumerate(tables)]


def emit(report: Report, fmt: str | None, output: str | None) -> None:
    """Render `report` in the asked format to stdout or, atomically, to `output`. CSV to a
    file writes one file per table."""
    name = resolve_format(fmt, output)
    report = _display(report, output)
    if name == "csv" and output and len(report.tables()) > 1:
        for path, df in csv_paths(output, report):
            write_atomic(path, csv_format.table_csv(df))
            click.echo(f"wrote {path} ({df.height} rows)", err=True)
        return
    data = RENDERERS[name].render(report)
    if output:
        write_atomic(output, data)
        click.echo(f"wrote {output}", err=True)
    else:
        if name == "csv" and len(report.tables()) > 1:
            click.echo(
                f"traceanalyzer: the main table of {len(report.tables())}; -o FILE.csv writes one file per table",
                err=True,
            )
        sys.stdout.write(data if isinstance(data, str) else data.decode())


def plural(n: int, noun: str) -> str:
    """`1 step`, `2 steps`, `1,024 kernels`."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def head(df: pl.DataFrame, top: int) -> pl.DataFrame:
    """The first `top` rows (all of them for 0)."""
    return df if not top else df.head(top)


def health_payload(ses: Session) -> list[dict]:
    """The trace-health checks as JSON objects (`health[]`)."""
    return [
        {
            "check": h.check,
            "severity": h.severity,
            "message": h.message,
            "evidence": h.evidence,
            "unreliable": list(h.unreliable),
        }
        for h in ses.health
    ]


def health_section(ses: Session) -> Section | None:
    """The health checks as the first section of a report, or None when only `info` ones fire
    (those are capture caveats too, among the findings)."""
    if not any(h.severity != "info" for h in ses.health):
        return None
    text = "\n".join(
        f"[{h.severity}] {h.check}: {h.message}" + (f" (unreliable: {', '.join(h.unreliable)})" if h.unreliable else "")
        for h in ses.health
    )
    return Section("Trace health (checked before any number)", text=text)


def guarded(headline: str | None, ses: Session, *metrics: str) -> str | None:
    """The headline, or, when a health error spoils one of `metrics`, a line that says so
    instead of a confident verdict."""
    errors = [h for h in ses.health if h.severity == "error" and set(h.unreliable) & set(metrics)]
    if not errors:
        return headline
    spoiled = sorted({m for h in errors for m in h.unreliable})
    return (
        f"trace health error ({', '.join(h.check for h in errors)}): {errors[0].message}; "
        f"these numbers are unreliable: {', '.join(spoiled)}. " + (headline or "")
    )


def with_health(report: Report, ses: Session, *metrics: str) -> Report:
    """`report` with the trace-health checks first (a section, `health[]` in JSON) and its
    headline guarded for `metrics` (the ones this report's numbers depend on)."""
    section = health_section(ses)
    sections = ((section,) if section else ()) + tuple(report.sections)
    payload = {**report.payload, "health": health_payload(ses)}
    return dataclasses.replace(
        report, sections=sections, payload=payload, headline=guarded(report.headline, ses, *metrics)
    )


FINDING_SCHEMA = {"rule": pl.String, "severity": pl.String, "message": pl.String, "recommendation": pl.String}


def findings_table(findings: list[Finding]) -> pl.DataFrame:
    """rule, severity, message, recommendation: one row per finding."""
    rows = [(f.rule, f.severity, f.message, f.recommendation) for f in findings]
    return pl.DataFrame(rows, schema=FINDING_SCHEMA, orient="row")


def findings_text(findings: list[Finding]) -> str:
    """The findings as the text block the table renderer prints."""
    if not findings:
        return "none fired (`traceanalyzer rules` lists the rules and thresholds)"
    return "\n".join(f"[{f.severity}] {f.rule}: {f.message}\n    -> {f.recommendation}" for f in findings)


def findings_payload(findings: list[Finding]) -> list[dict]:
    """The findings as JSON objects (`findings[].rule` and so on)."""
    return [
        {
            "rule": f.rule,
            "severity": f.severity,
            "message": f.message,
            "evidence": f.evidence,
            "thresholds": f.thresholds,
            "recommendation": f.recommendation,
            "events": list(f.events),
        }
        for f in findings
    ]
