"""The output cache: a command run again exactly as before, on the same trace, prints (and
writes) what it printed the first time without importing an analysis, polars or the decoder.

It is the last layer of the single-file cache (`traceanalyzer.jobs.cache`), under the same
trace key, in `<trace key>/outputs/<command key>/`. The command key is the command line after
the command's name, token by token (`--format json` and `--format=json` are two keys, never one
wrong answer), with a fingerprint of every token that names a regular file (the trace, a
`--stages` mapping), the group's load option (`--max-decompressed`) and what decides how the
output looks (COLUMNS, NO_COLOR, TERM, whether stdout is a terminal and its width). The trace is
the first token naming a regular file; the trace key holds the tool version and the code's
fingerprint, so other code is a miss.

Only the commands in `cli.commands.REPLAYABLE` are replayed, and only without their flags
that do more than print a report (`--plot`, `--fail-on`): what such a command prints goes
through `commands.common.emit` and its warnings through `note_err`, which record it while the
command runs (`Recording`). A run that fails, or a command line with `-`, a directory,
`--help`, `--no-cache` or `TRACEANALYZER_NO_CACHE=1`, is never stored; an entry that cannot be
read is a miss. What a replay writes is what the first run wrote, byte for byte: stdout, the
stderr lines (the load's warnings, `wrote PATH`) and each file `-o` wrote (atomically again).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

# The single-file cache's module (`traceanalyzer.jobs.cache`) and hashing load where a key is made
# or an entry read or written: a command line that is never replayed (`--no-cache` after the
# command) imports this module alone.
OUTPUT_FLAGS = ("-o", "--output")  # their value is written, not read: never fingerprinted
NEVER = ("-", "-h", "--help", "--no-cache", "--cache-dir")  # and `--cache-dir=...`
MAX_BYTES = 64 << 20  # a larger output is not kept
_FORMAT = 1


def _display_key() -> tuple[Any, ...]:
    """What decides how a report looks besides the command line (see `commands.common._display`)."""
    tty = sys.stdout.isatty()
    size = shutil.get_terminal_size((0, 0)).columns if tty else 0
    env = tuple(os.environ.get(k) for k in ("COLUMNS", "NO_COLOR", "TERM", "TRACEANALYZER_NATIVE"))
    return (tty, size, env)


def command_key(name: str, args: list[str], group: dict[str, Any]) -> tuple[str, str] | None:
    """(trace, key) of a command line, or None when it is not to be replayed: no regular file
    among its tokens, or a token that makes it something else than a report on one trace."""
    # Every token first: `gaps t.json --no-cache` fingerprints no file (2 MiB hashed, ~3 ms).
    if never(args):
        return None
    from traceanalyzer.jobs import cache

    files, trace, previous = [], None, ""
    for tok in args:
        if previous not in OUTPUT_FLAGS and not tok.startswith("-"):
            if os.path.isdir(tok):
                return None  # a directory of ranks: its files can change under one name
            if os.path.isfile(tok):
                files.append(cache.fingerprint(tok))
                trace = trace or tok
        previous = tok
    if trace is None:
        return None
    parts = (_FORMAT, name, tuple(args), tuple(files), group.get("max_decompressed"), _display_key())
    import hashlib

    return trace, hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def never(args: list[str]) -> bool:
    """Whether a token makes the command line something else than a report on one trace (NEVER)."""
    return any(tok in NEVER or tok.startswith(("--no-cache=", "--cache-dir=")) for tok in args)


def replayable(name: str, args: list[str], flags: tuple[str, ...]) -> bool:
    """Whether the command line uses none of the command's `flags` that do more than print."""
    return not any(tok == f or tok.startswith(f + "=") for tok in args for f in flags)


class Recording:
    """What one command prints while it runs: ("out", text or bytes), ("err", line) and
    ("file", path, bytes), in order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.events: list[tuple[Any, ...]] = []
        self.size = 0

    def add(self, *event: Any) -> None:
        """Record one thing printed or written."""
        self.size += sum(len(e) for e in event if isinstance(e, str | bytes))
        self.events.append(event)

    def store(self) -> None:
        """Keep the recording (atomically; never over an entry already there)."""
        if self.size > MAX_BYTES:
            return
        from traceanalyzer.jobs import cache

        with contextlib.suppress(Exception), cache.atomic_folder(self.folder) as tmp:
            if tmp is not None:
                (tmp / "events.pickle").write_bytes(pickle.dumps(self.events, protocol=pickle.HIGHEST_PROTOCOL))


RECORDING: Recording | None = None


def note_out(data: str | bytes) -> None:
    """What the command wrote to stdout."""
    if RECORDING is not None:
        RECORDING.add("out", data)


def note_err(line: str) -> None:
    """A line the command wrote to stderr."""
    if RECORDING is not None:
        RECORDING.add("err", line)


def note_file(path: str) -> None:
    """A file the command wrote (its content is read back now)."""
    if RECORDING is not None:
        try:
            RECORDING.add("file", path, Path(path).read_bytes())
        except OSError:
            RECORDING.size = MAX_BYTES + 1  # cannot be replayed: not kept


def entry(root: str, trace: str, key: str, max_decompressed: int | None) -> Path | None:
    """The folder of a command line's output under `root`, or None when the trace is unreadable."""
    from traceanalyzer.jobs import cache

    try:
        return Path(root) / cache.trace_key(trace, cache.load_key(max_decompressed)) / "outputs" / key
    except OSError:
        return None


def read(folder: Path) -> list[tuple[Any, ...]] | None:
    """The recording in `folder`, or None when there is none or it cannot be read."""
    try:
        events = pickle.loads((folder / "events.pickle").read_bytes())
    except Exception:  # noqa: BLE001 - a missing or damaged entry is a miss
        return None
    ok = isinstance(events, list) and all(isinstance(e, tuple) and e and e[0] in ("out", "err", "file") for e in events)
    return events if ok else None


def play(events: list[tuple[Any, ...]], folder: Path) -> None:
    """Print and write what a recording holds, in order."""
    import click

    from traceanalyzer.render.output import write_atomic

    for kind, *rest in events:
        if kind == "out":
            (data,) = rest
            if isinstance(data, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(data)
            else:
                sys.stdout.write(data)
        elif kind == "err":
            click.echo(rest[0], err=True)
        elif kind == "file":
            write_atomic(rest[0], rest[1])
    with contextlib.suppress(OSError):
        os.utime(folder.parents[1])  # the trace entry was just used (for `cache.prune`)
