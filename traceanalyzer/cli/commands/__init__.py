"""One module per subcommand: parse options, open a Session, hand a Report to a renderer.
Each module exposes a click command named `command`; `COMMANDS` lists them in `--help` order
(registered by import, so a missing module fails at import, not at run time)."""

from traceanalyzer.cli.commands import (
    annotate,
    copies,
    diff,
    gaps,
    kernels,
    memory,
    ops,
    path,
    report,
    roofline,
    rules,
    stages,
    summary,
    syncs,
    timeline,
    whatif,
)

COMMANDS = [
    gaps.command,
    memory.command,
    diff.command,
    copies.command,
    syncs.command,
    timeline.command,
    report.command,
    annotate.command,
    stages.command,
    ops.command,
    kernels.command,
    roofline.command,
    rules.command,
    summary.command,
    path.command,
    whatif.command,
]
