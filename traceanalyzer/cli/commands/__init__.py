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
    report,
    rules,
    stages,
    summary,
    syncs,
    timeline,
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
    rules.command,
    summary.command,
]
