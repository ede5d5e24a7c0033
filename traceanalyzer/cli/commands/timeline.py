"""Draw a timeline picture (PNG, SVG or PDF, from the -o extension) of one window of a trace: CPU threads and GPU streams, GPU idle gaps
shaded by cause and the largest labelled with the op and Python line behind them.

The window is the slowest step unless --step or --start/--end (ms from the trace start) say
otherwise. Events narrower than a pixel are merged, so big traces draw in seconds.
"""

from __future__ import annotations

import click

from traceanalyzer.cli.commands.common import open_session
from traceanalyzer.cli.options import build_options, cache_option, option_flags, picture_format

GROUPS = ("patterns", "gaps", "steps")


def picture_options(fn):
    """Add `--width`, `--height` and `--dpi` to a command that draws."""
    fn = click.option(
        "--dpi", type=click.IntRange(min=20, max=600), default=100, show_default=True, help="dots per inch"
    )(fn)
    fn = click.option(
        "--height",
        type=click.IntRange(min=200, max=20000),
        default=900,
        show_default=True,
        help="picture height (pixels)",
    )(fn)
    fn = click.option(
        "--width",
        type=click.IntRange(min=300, max=20000),
        default=1600,
        show_default=True,
        help="picture width (pixels)",
    )(fn)
    return fn


@click.command("timeline")
@click.argument("trace", type=click.Path())
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="the picture to write: .png, .svg or .pdf"
)
@click.option(
    "--step", type=int, default=None, help="draw this ProfilerStep [default: the slowest step after the start-up]"
)
@click.option("--start", "start_ms", type=float, default=None, help="window start (ms from the trace start)")
@click.option("--end", "end_ms", type=float, default=None, help="window end (ms from the trace start)")
@cache_option
@picture_options
@option_flags(*GROUPS)
def command(
    trace: str,
    output: str,
    step: int | None,
    start_ms: float | None,
    end_ms: float | None,
    width: int,
    height: int,
    dpi: int,
    **kwargs,
) -> None:
    """Draw a timeline (PNG, SVG or PDF) of one step: CPU threads, GPU streams, idle gaps shaded by cause."""
    from traceanalyzer.cli.pictures import timeline_picture, timeline_window
    from traceanalyzer.errors import UsageError
    from traceanalyzer.render.output import write_atomic

    if step is not None and (start_ms is not None or end_ms is not None):
        raise UsageError(None, "--step cannot be combined with --start/--end")
    fmt = picture_format(output)  # before loading: a wrong extension fails at once
    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    window = timeline_window(ses, step, start_ms, end_ms)
    pic = timeline_picture(ses, window, width=width, height=height, dpi=dpi, fmt=fmt)
    write_atomic(output, pic.data)
    click.echo(f"wrote {output} ({window.label})", err=True)
