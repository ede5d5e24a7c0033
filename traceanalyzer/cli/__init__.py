"""The command-line floor: click lives here and nowhere else.

`main.cli` is the click group, `main.main` the one place that maps typed errors to a one-line
message and an exit code, `options` generates flags from the option groups, and `commands/` holds
one short module per subcommand."""

from traceanalyzer.cli.main import cli, main, run

__all__ = ["cli", "main", "run"]
