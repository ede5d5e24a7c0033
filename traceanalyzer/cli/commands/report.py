"""Write an incident report into a folder: report.md (summary, timeline, stages, idle by cause,
top gaps, copies, syncs, memory, findings) with its PNG pictures beside it, ready to paste
into a ticket; --html also writes report.html, one self-contained file with the images inline.
A DIRECTORY of per-rank files gives report.md with the per-rank table, the job's findings, the
collective table and skew_map.png, the arrival skew of ranks x collectives.

Nothing from the trace's metadata is copied except device names and the rank: environment
variables and credential-looking values never reach the report.
"""

from __future__ import annotations

import os

import click

from traceanalyzer.cli.commands.common import open_session
from traceanalyzer.cli.commands.summary import GROUPS
from traceanalyzer.cli.commands.timeline import picture_options
from traceanalyzer.cli.options import build_options, cache_option, fail_on_option, option_flags
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.render import RENDERERS
from traceanalyzer.report import Report


def write_documents(rep: Report, directory: str, html_too: bool) -> list[str]:
    """report.md and its pictures in `directory` (and report.html, pictures inline, when asked),
    each by its renderer; says on stderr what was written and returns the paths."""
    written = RENDERERS["markdown"].write(rep, os.path.join(directory, "report.md"))
    if html_too:
        written += RENDERERS["html"].write(rep, os.path.join(directory, "report.html"))
    for p in written:
        click.echo(f"wrote {p}", err=True)
    return written


@click.command("report")
@click.argument("trace", type=click.Path())
@click.option(
    "-o",
    "--output",
    "directory",
    type=click.Path(file_okay=False),
    required=True,
    help="folder to write report.md and its pictures into",
)
@click.option("--html", "html_too", is_flag=True, help="also write report.html with the pictures inline")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="rows per table")
@cache_option
@picture_options
@option_flags(*GROUPS)
@fail_on_option(", after writing the report")
def command(
    trace: str,
    directory: str,
    html_too: bool,
    top: int,
    width: int,
    height: int,
    dpi: int,
    fail_on: tuple[str, ...],
    **kwargs,
) -> None:
    """Write report.md (+ pictures, + --html) for an incident ticket."""
    from traceanalyzer.cli.incident import build_report
    from traceanalyzer.cli.opening import is_directory

    options = build_options(kwargs, *GROUPS)
    if is_directory(trace):  # a directory of per-rank files: the cross-rank report
        from traceanalyzer.cli.commands import directory as rank_dir

        rank_dir.write_dir_report(trace, directory, options, top, GROUPS, fail_on, html_too)  # any rank, or the job
        return
    ses = open_session(trace, options)
    write_documents(build_report(ses, top=top, width=width, height=height, dpi=dpi), directory, html_too)
    failed = sorted({f.rule for f in ses.findings} & set(fail_on))
    if failed:
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {', '.join(failed)}")
