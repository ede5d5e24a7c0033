"""Write the original trace plus a "traceanalyzer" process whose tracks mark every GPU idle
gap (named by cause), sync stall and exposed copy, for Perfetto or chrome://tracing.

Every original event is kept byte for byte; secrets in the trace's metadata (environment
variables, tokens) are redacted. The output is gzip-compressed when its name ends in .gz.
"""

from __future__ import annotations

import click

from traceanalyzer.cli.commands.common import open_session
from traceanalyzer.cli.options import build_options, option_flags

GROUPS = ("patterns", "gaps", "steps")


@click.command("annotate")
@click.argument("trace", type=click.Path())
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="the annotated trace (.json or .json.gz)"
)
@option_flags(*GROUPS)
def command(trace: str, output: str, **kwargs) -> None:
    """Write the trace plus tracks marking gaps, sync stalls and exposed copies (for Perfetto)."""
    from traceanalyzer.render.annotate import annotated_document, build_annotations, compress, read_document
    from traceanalyzer.render.output import write_atomic

    options = build_options(kwargs, *GROUPS)
    ses = open_session(trace, options)
    ann = build_annotations(ses.trace, ses.gaps, ses.copies.copies, syncs=ses.syncs)
    top, events = read_document(trace)
    data = annotated_document(top, events, ann.events)
    write_atomic(output, compress(data) if output.endswith(".gz") else data)
    what = ", ".join(f"{n:,} {k}" for k, n in ann.counts.items()) or "nothing to mark"
    click.echo(f"wrote {output}: {len(events):,} original events + {what}", err=True)
