"""Helpers every subcommand uses: open a Session with progress and warnings, emit a report,
show findings."""

from __future__ import annotations

import dataclasses
import sys

import click
import polars as pl

from traceanalyzer.analyses.findings import Finding
from traceanalyzer.cli_options import progress_printer, resolve_format
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.render import RENDERERS
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report, Section
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


def emit(report: Report, fmt: str | None, output: str | None) -> None:
    """Render `report` in the asked format to stdout or, atomically, to `output`."""
    name = resolve_format(fmt, output)
    data = RENDERERS[name].render(report)
    if output:
        write_atomic(output, data)
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(data if isinstance(data, str) else data.decode())


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
    """The health checks as the first section of a report, or None when none fires."""
    if not ses.health:
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
