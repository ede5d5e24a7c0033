"""Helpers every subcommand uses: open a Session with progress and warnings, emit a report,
show findings."""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click
import polars as pl

from traceanalyzer.cli import opening, startup
from traceanalyzer.cli.options import resolve_format
from traceanalyzer.errors import UsageError
from traceanalyzer.options import Options
from traceanalyzer.render import RENDERERS
from traceanalyzer.render.fit import FIXED_WIDTH, terminal_width
from traceanalyzer.render.values import cell, saving_text
from traceanalyzer.report import TABLE_ROWS, Report, Section
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace

if TYPE_CHECKING:
    from traceanalyzer.findings import Finding


def _open(path: str, options: Options) -> tuple[Trace, Any]:
    """The trace (cached or decoded, with progress on a terminal) and its cache; the load's
    warnings go to stderr, one line each."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    max_decompressed = obj.get("max_decompressed") if isinstance(obj, dict) else None  # the group's flag
    trace, store = opening.open_trace(path, options, max_decompressed)
    if store is not None and ctx is not None:
        ctx.call_on_close(store.wait)  # the Trace's entry is written on a thread: done before the command ends
    for w in trace.warnings:
        _err(f"traceanalyzer: warning: {path}: {w}")
    return trace, store


def load_trace(path: str, options: Options | None = None) -> Trace:
    """The Trace of `path` (from the single-file cache when it holds it)."""
    return _open(path, Options.of(options))[0]


def open_session(path: str, options: Options) -> Session:
    """The Session a command reads all its numbers from; with the cache on, it reads results of
    earlier runs from it and stores what it computes when the command ends."""
    trace, store = _open(path, options)
    ses = Session(trace, options, store=store)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(lambda: opening.prune(store))  # runs last: callbacks close in reverse order
        ctx.call_on_close(ses.save)
        ctx.call_on_close(opening.stop_progress)
    return ses


def _display(report: Report, output: str | None) -> Report:
    """The report with the table settings of this command line: `--top`, `--wide`, width."""
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    top = meta.get("traceanalyzer.top")
    rows = TABLE_ROWS if top is None else (top or None)
    width = terminal_width() if not output else int(os.environ.get("COLUMNS", "0") or 0) or FIXED_WIDTH
    wide = bool(meta.get("traceanalyzer.wide"))
    # Colour only on a terminal, never into a file or a pipe, and never against NO_COLOR.
    color = not output and sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    return replace(report, table_rows=rows, wide=wide, width=width, exports_whole=top is None, color=color)


def emit(report: Report, fmt: str | None, output: str | None) -> None:
    """Render `report` in the asked format to stdout or, atomically, to `output` (a format
    that writes several files, as CSV one per table, writes them all beside it)."""
    renderer = RENDERERS[resolve_format(fmt, output)]
    report = _display(report, output)
    opening.stop_progress()
    if output:
        for path in renderer.write(report, output):
            _recorded("note_file", path)
            _err(f"wrote {path}")
        return
    if renderer.name == "csv" and len(report.tables()) > 1:
        _err(f"traceanalyzer: the main table of {len(report.tables())}; -o FILE.csv writes one file per table")
    data = renderer.render(report)
    if renderer.binary or isinstance(data, bytes):
        data = data if isinstance(data, bytes) else data.encode()
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    else:
        sys.stdout.write(data)
    _recorded("note_out", data)


def _err(line: str) -> None:
    """A line on stderr (kept with the output when the run is recorded: `cli.replay`)."""
    click.echo(line, err=True)
    _recorded("note_err", line)


def _recorded(note: str, what: str | bytes) -> None:
    """`cli.replay`'s `note`, when the command line loaded the output cache to record this run
    (`cli.main`): with `--no-cache` it is never imported (hashing, pickling, the cache's module)."""
    replay = sys.modules.get("traceanalyzer.cli.replay")
    if replay is not None:
        getattr(replay, note)(what)


def record_report(report: Report, table: pl.DataFrame, n: int, noun: str) -> Report:
    """One row of `table` (1-based `n`) as a Report: a two-column table of field and value, every
    field, and the row itself as the JSON body. An `n` past the end is a usage error."""
    if n > table.height:
        raise UsageError(report.input, f"--{noun} {n}: there are {table.height} {noun}s in the list")
    row = table.slice(n - 1, 1)
    values = row.row(0, named=True)
    fields = pl.DataFrame(
        {"field": list(values), "value": [cell(v, k) for k, v in values.items()]},
        schema={"field": pl.String, "value": pl.String},
    )
    title = f"{noun.capitalize()} {n} of {table.height}"
    return dataclasses.replace(
        report,
        sections=(Section(title, fields, main=True, whole=True, export=row),),
        payload={noun: row.to_dicts()[0], "of": table.height},
        headline=None,
    )


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
    text = "\n".join(h.line() for h in ses.health)
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


FINDING_SCHEMA = {
    "rule": pl.String,
    "severity": pl.String,
    "message": pl.String,
    "recommendation": pl.String,
    "saving_us": pl.Float64,
    "saving_confidence": pl.String,
}


def findings_table(findings: list[Finding]) -> pl.DataFrame:
    """rule, severity, message, recommendation, saving_us, saving_confidence: one row per finding."""
    rows = [(f.rule, f.severity, f.message, f.recommendation, f.saving_us, f.saving_confidence) for f in findings]
    return pl.DataFrame(rows, schema=FINDING_SCHEMA, orient="row")


def findings_text(findings: list[Finding]) -> str:
    """The findings as the text block the table renderer prints."""
    if not findings:
        return "none fired (`traceanalyzer rules` lists the rules and thresholds)"
    return "\n".join(
        f"[{f.severity}] {f.rule}: {f.message}\n    -> {f.recommendation}\n    => {saving_text(f)}" for f in findings
    )


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
            "at_stake_us": f.at_stake_us,
            "at_stake_share": f.at_stake_share,
            "saving_us": f.saving_us,
            "saving_share": f.saving_share,
            "saving_confidence": f.saving_confidence,
            "saving_note": f.saving_note,
        }
        for f in findings
    ]


def note_report(command: str, result: Any, th: dict, warnings: Any, rows: str) -> Report:
    """The Report of a command whose analysis has nothing but a note to say (no GPU work, no
    copies): the note as headline, empty tables in the JSON under `rows`."""
    return Report(
        command,
        result.trace_path,
        th,
        (),
        {"summary": None, rows: [], "findings": [], "note": result.note},
        headline=result.note,
        warnings=warnings,
    )


# Every working command imports this module, and with it polars, the Session and the renderers'
# registry: the start-up's imports are done (`cli.startup`).
startup.done()
