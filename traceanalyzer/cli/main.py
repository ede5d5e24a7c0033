"""The `traceanalyzer` command: a thin shell over the analyses and renderers.

`main` is the one place where typed errors become a one-line message and an exit code."""

from __future__ import annotations

import importlib
import os
import sys

import click

from traceanalyzer.cli import replay
from traceanalyzer.cli.commands import COMMANDS, REPLAYABLE
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


class LazyGroup(click.Group):
    """A group that imports a command's module only when the command runs or shows its help
    (click's lazy-loading pattern): `traceanalyzer --help` lists every command from the
    summaries in `COMMANDS` and imports none of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, sorted (as click lists them)."""
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, its module imported on first use; None for an unknown name."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module = importlib.import_module(f"traceanalyzer.cli.commands.{cmd_name}")
            self.add_command(module.command, cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but a mistyped name is matched against every command, loaded or not; a
        command line whose output the cache holds (`cli.replay`) becomes its replay, and one
        that could be kept is recorded."""
        if args and args[0] in REPLAYABLE:
            found = _replay_or_record(ctx, args[0], args[1:])
            if found is not None:
                return args[0], found, args[1:]
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            no_such = getattr(click.exceptions, "NoSuchCommand", None)  # click >= 8.4 suggests a close name
            if no_such is None or not isinstance(exc, no_such):
                raise
            raise no_such(exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; a recorded run that ended well is kept for its next replay."""
        try:
            result = super().invoke(ctx)
            if replay.RECORDING is not None:
                replay.RECORDING.store()
            return result
        finally:
            replay.RECORDING = None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The Commands section of `--help`, as click writes it, from the summaries alone."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name) or click.Command(name, help=COMMANDS[name])
            if not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _replay_or_record(ctx: click.Context, name: str, args: list[str]) -> click.Command | None:
    """The replay of this command line when the output cache holds it; else None, with the
    run recorded when it may be kept (the cache on, a report on one trace file)."""
    from traceanalyzer.jobs import cache

    replay.RECORDING = None
    params = ctx.params
    if params.get("no_cache") or cache.disabled_by_env() or not replay.replayable(name, args, REPLAYABLE[name]):
        return None
    try:
        limit = _size(params["max_decompressed"]) if params.get("max_decompressed") else None
        found = replay.command_key(name, args, {"max_decompressed": limit})
        root = params.get("cache_dir") or str(cache.default_root())
        folder = replay.entry(root, found[0], found[1], limit) if found else None
    except (click.BadParameter, OSError):
        return None
    if folder is None:
        return None
    events = replay.read(folder)
    if events is None:
        replay.RECORDING = replay.Recording(folder)
        return None
    return click.Command(
        name,
        callback=lambda: replay.play(events, folder),
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="traceanalyzer")
@click.option(
    "--max-decompressed",
    type=str,
    default=None,
    metavar="SIZE",
    help="stop with an error when a gzip trace inflates past SIZE (e.g. 512M, 64G) [default: 64G]",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="neither read nor write the single-file cache (decoded tables and results of earlier commands on the "
    "same trace; also TRACEANALYZER_NO_CACHE=1)",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="where the cache lives [default: $XDG_CACHE_HOME/traceanalyzer, else ~/.cache/traceanalyzer]",
)
@click.option(
    "--cache-max",
    type=str,
    default=None,
    metavar="SIZE",
    help="the least recently used traces leave the cache beyond SIZE (e.g. 5G) [default: 20G]",
)
@click.pass_context
def cli(
    ctx: click.Context, max_decompressed: str | None, no_cache: bool, cache_dir: str | None, cache_max: str | None
) -> None:
    """Offline post-mortem analysis of PyTorch profiler (Kineto) traces: why the GPU sat idle."""
    obj = ctx.ensure_object(dict)
    obj["max_decompressed"] = _size(max_decompressed) if max_decompressed else None
    obj["no_cache"], obj["cache_dir"] = no_cache, cache_dir
    obj["cache_max"] = _size(cache_max) if cache_max else None


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


# polars' allocator (jemalloc) reads its settings once, when polars loads. One arena instead of
# one per 4 CPUs per thread group: freed blocks are reused by the next table, not kept dirty in
# another arena (peak RSS of `gaps`: -35 MB at 1 GB, -40 MB at 311 MB, same CPU). Pages freed
# and not reused are given back when their dirty time (polars' 500 ms) is up, not marked "free
# later" for another second (muzzy pages stay in RSS until the kernel needs them): `gaps` -12 to
# -20 MB at 311 MB-1 GB, the same system time. Set by the command only, never by the library (a
# notebook's process is the user's), and a value the user set wins (docs/performance.md).
ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
ALLOCATOR_CONF = "narenas:1,muzzy_decay_ms:0"


def run() -> None:
    """The console script's entry point."""
    os.environ.setdefault(ALLOCATOR_ENV, ALLOCATOR_CONF)  # before anything imports polars
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
