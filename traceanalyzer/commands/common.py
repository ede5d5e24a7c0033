"""Helpers every subcommand uses: load with progress, emit a report, print warnings."""

from __future__ import annotations

import sys

import click

from traceanalyzer.cli_options import progress_printer, resolve_format
from traceanalyzer.load import load
from traceanalyzer.render import RENDERERS
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report
from traceanalyzer.trace import Trace


def load_trace(path: str, max_decompressed: int | None = None) -> Trace:
    if max_decompressed is None:  # the group's --max-decompressed (cli.py)
        ctx = click.get_current_context(silent=True)
        obj = ctx.find_root().obj if ctx is not None else None
        max_decompressed = obj.get("max_decompressed") if isinstance(obj, dict) else None
    kwargs = {"max_decompressed": max_decompressed} if max_decompressed else {}
    trace = load(path, progress=progress_printer(), **kwargs)
    for w in trace.warnings:
        click.echo(f"traceanalyzer: warning: {path}: {w}", err=True)
    return trace


def emit(report: Report, fmt: str | None, output: str | None) -> None:
    name = resolve_format(fmt, output)
    data = RENDERERS[name].render(report)
    if output:
        write_atomic(output, data)
        click.echo(f"wrote {output}", err=True)
    else:
        sys.stdout.write(data if isinstance(data, str) else data.decode())


def head(df, top: int):
    return df if not top else df.head(top)
