"""The `traceanalyzer` command: a thin shell over the analyses and renderers.

`main` is the one place where typed errors become a one-line message and an exit code."""

from __future__ import annotations

import importlib
import sys

import click

from traceanalyzer import __version__
from traceanalyzer.commands import COMMAND_MODULES
from traceanalyzer.errors import RegressionDetected, TraceAnalyzerError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
def cli() -> None:
    """Offline post-mortem analysis of PyTorch profiler (Kineto) traces: why the GPU sat idle."""


for _name in COMMAND_MODULES:
    cli.add_command(importlib.import_module(f"traceanalyzer.commands.{_name}").command)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="traceanalyzer", standalone_mode=False)
    except RegressionDetected as exc:  # a requested check failed: exit 1, not an error
        click.echo(f"traceanalyzer: {exc}", err=True)
        return exc.exit_code
    except TraceAnalyzerError as exc:
        click.echo(f"traceanalyzer: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("traceanalyzer: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except MemoryError:
        click.echo("traceanalyzer: error: out of memory", err=True)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
