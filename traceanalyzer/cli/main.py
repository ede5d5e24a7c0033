"""The `traceanalyzer` command: a thin shell over the analyses and renderers.

`main` is the one place where typed errors become a one-line message and an exit code."""

from __future__ import annotations

import sys

import click

from traceanalyzer.cli.commands import COMMANDS
from traceanalyzer.errors import RegressionDetected, TraceAnalyzerError
from traceanalyzer.version import __version__


def _size(text: str) -> int:
    """A byte count: 123, 512M, 64G (binary units)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = str(text).strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t[-1:] in units else (t, "")
    try:
        value = int(float(num) * units[unit])
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (e.g. 512M, 64G)") from None
    if value <= 0:
        raise click.BadParameter("must be positive")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceanalyzer")
@click.option(
    "--max-decompressed",
    type=str,
    default=None,
    metavar="SIZE",
    help="stop with an error when a gzip trace inflates past SIZE (e.g. 512M, 64G) [default: 64G]",
)
@click.pass_context
def cli(ctx: click.Context, max_decompressed: str | None) -> None:
    """Offline post-mortem analysis of PyTorch profiler (Kineto) traces: why the GPU sat idle."""
    ctx.ensure_object(dict)["max_decompressed"] = _size(max_decompressed) if max_decompressed else None


for _command in COMMANDS:
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (typed errors become one line on stderr)."""
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
    """The console script's entry point."""
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
