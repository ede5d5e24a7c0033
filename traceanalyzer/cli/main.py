"""The `traceanalyzer` command: a thin shell over the analyses and renderers.

`main` is the one place where typed errors become a one-line message and an exit code."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

import click

from traceanalyzer.cli import startup
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
            replay = _replay_module()
            if replay is not None and replay.RECORDING is not None:
                replay.RECORDING.store()
            return result
        finally:
            replay = _replay_module()
            if replay is not None:
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


def _replay_module():
    """`cli.replay` when a command loaded it (a run that may be recorded), else None."""
    return sys.modules.get("traceanalyzer.cli.replay")


def _replay_or_record(ctx: click.Context, name: str, args: list[str]) -> click.Command | None:
    """The replay of this command line when the output cache holds it; else None, with the
    run recorded when it may be kept (the cache on, a report on one trace file). The output cache's
    modules (the cache, hashing) load here, not for `--help` or `--version`, nor for a command line
    that is never replayed (`--no-cache`)."""
    from traceanalyzer.cli import replay

    replay.RECORDING = None
    params = ctx.params
    if params.get("no_cache") or replay.never(args) or not replay.replayable(name, args, REPLAYABLE[name]):
        return None
    from traceanalyzer.jobs import cache

    if cache.disabled_by_env():
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


# A directory of ranks is analysed one rank per process (`jobs.executors`), this one included: the
# ranks are the parallelism, and polars sizes its thread pool when it loads, so this process runs
# polars on one thread as its workers do, and so it does alone with small ranks (a second thread
# spins between a small rank's ~1,500 queries: 8 DLRM ranks, 2026-12-01, docs/performance.md).
# `jobs.plan` decides, from the files' sizes and --jobs / --worker-min-mb; a value the user set wins.
RANK_DIR_COMMANDS = ("gaps", "summary", "report")
PATH_VALUED = ("-o", "--output", "--cache-dir")  # options whose value is a folder, not the trace


def _value(args: list[str], flag: str) -> str | None:
    """The value given to `flag` (`--jobs 2` or `--jobs=2`), the last one, or None."""
    found = None
    for a, b in zip(args, [*args[1:], ""], strict=True):
        if a == flag:
            found = b
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1 :]
    return found


def rank_dir_plan(argv: list[str]) -> tuple[list[str], int, int] | None:
    """For a command line that runs a command of RANK_DIR_COMMANDS on a local directory: its
    files, --jobs and --worker-min-mb in bytes (what `jobs.plan` decides from); else None."""
    words = [t for t in argv if not t.startswith("-")]
    command = next((t for t in words if t in COMMANDS), None)
    if command not in RANK_DIR_COMMANDS:
        return None
    after = argv[argv.index(command) + 1 :]
    folder = next(
        (
            t
            for p, t in zip(["", *after], after, strict=False)
            if not t.startswith("-") and p not in PATH_VALUED and os.path.isdir(t)
        ),
        None,
    )
    if folder is None:
        return None
    from traceanalyzer.jobs import plan

    files = plan.local_files(folder)
    if not files:
        return None
    try:
        jobs = int(_value(after, "--jobs") or 0)
        min_mb = float(_value(after, "--worker-min-mb") or plan.DEFAULT_WORKER_MIN_MB)
    except ValueError:
        return None  # click says what is wrong with it
    return files, jobs, plan.min_bytes(min_mb)


def rank_dir_polars_threads(argv: list[str]) -> str | None:
    """`"1"` when a command line runs a command of RANK_DIR_COMMANDS on a local directory whose
    ranks this process should analyse on one polars thread (`jobs.plan.one_polars_thread`); else None."""
    args = rank_dir_plan(argv)
    if args is None:  # one trace file: the directory mode's plan is not imported
        return None
    from traceanalyzer.jobs import plan

    return "1" if plan.one_polars_thread(*args) else None


def rank_dir_alone(argv: list[str]) -> bool:
    """Whether this process analyses a directory's ranks alone (no worker: `jobs.plan.processes`)
    on one polars thread. Then it runs on one CPU: polars hands each query to its pool's one
    thread and that thread spins (`sched_yield`) after it, which on another CPU costs as much
    as the queries (8 DLRM ranks: 1.8-1.85 CPU-s, 141 k yields; on one CPU 1.0-1.1 CPU-s and
    half the wall time, 2026-12-01, docs/performance.md)."""
    from traceanalyzer.jobs import plan

    args = rank_dir_plan(argv)
    return args is not None and plan.processes(*args) == 1 and plan.one_polars_thread(*args)


def run() -> None:
    """The console script's entry point."""
    os.environ.setdefault(ALLOCATOR_ENV, ALLOCATOR_CONF)  # before anything imports polars
    if rank_dir_polars_threads(sys.argv[1:]):
        os.environ.setdefault("POLARS_MAX_THREADS", "1")
        if os.environ["POLARS_MAX_THREADS"] == "1" and rank_dir_alone(sys.argv[1:]):
            from traceanalyzer.load import cpus

            if usable := cpus.usable():
                cpus.pin(usable[:1])
    startup.begin()  # no collection during the imports (`cli.startup`)
    end(main())


def end(status: int) -> None:
    """End the process with `status`, skipping the interpreter's teardown when nothing needs it.

    Tearing down frees every module and table one by one (~0.04 CPU-s after `gaps` on a 10 MB trace,
    a tenth of the run; more at 1 GB), work the OS does at once. Safe when only daemon threads are
    left (the cache writer is joined before the command ends), with the output flushed and the
    atexit handlers run (coverage, multiprocessing, `weakref.finalize`, temporary folders); not under
    a profiler or tracer (cProfile writes its stats after the entry point returns), nor `python -i`,
    nor with `TRACEANALYZER_FULL_EXIT=1`: then the normal exit, which waits for the threads."""
    import atexit
    import threading

    _flush()
    quiet = sys.getprofile() is None and sys.gettrace() is None and not sys.flags.inspect
    alone = all(t.daemon or t is threading.main_thread() for t in threading.enumerate())
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)  # CPython's; elsewhere the normal exit
    if not (quiet and alone and run_exitfuncs is not None and os.environ.get(FULL_EXIT_ENV) != "1"):
        sys.exit(status)
    run_exitfuncs()
    _flush()
    os._exit(status)


FULL_EXIT_ENV = "TRACEANALYZER_FULL_EXIT"


def _flush() -> None:
    """Flush stdout and stderr. A reader gone from stdout (`| head`) is no error, as in `main`: the
    rest goes to /dev/null, so no later flush fails again (`Exception ignored`, exit 120)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except BrokenPipeError:
            if stream is sys.stdout:
                with contextlib.suppress(OSError, ValueError):
                    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError):  # closed, or not a real file
            pass


if __name__ == "__main__":  # pragma: no cover
    run()
