"""Opening a trace for a command: the single-file cache (`traceanalyzer.jobs.cache`) and the
progress display on stderr.

The cache is on by default in the user's cache directory; `--no-cache` (or
`TRACEANALYZER_NO_CACHE=1`) turns it off, `--cache-dir DIR` (the group's, or the command's
directory-mode flag) moves it. A command reads the Trace from the cache when it is there,
else decodes the file and stores it; the Session asks the cache for each result before
computing it, and every result computed is stored when the command ends.

Progress (a `rich.progress` bar, only when stderr is a terminal): bytes while decoding, then
the analysis being computed; it is cleared before the command prints its output.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from traceanalyzer.options import Options


class _Progress:
    """A transient rich progress display on stderr (nothing when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def start(self) -> None:
        """Show the bar (once), on a terminal only."""
        if self.bar is not None or not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
            redirect_stdout=False,
        )
        self.bar.start()
        self.task = self.bar.add_task("loading", total=None)

    def loading(self, done: int, total: int) -> None:
        """Bytes decoded so far of the total."""
        if self.bar is not None:
            self.bar.update(self.task, description="loading", completed=done, total=total or None)

    def analysing(self, name: str) -> None:
        """The analysis being computed now."""
        if self.bar is not None:
            self.bar.update(self.task, description=f"analysing: {name}", total=None, completed=0)

    def stop(self) -> None:
        """Clear the bar."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


PROGRESS = _Progress()


def stop_progress() -> None:
    """Clear the progress display (before a command writes its output)."""
    PROGRESS.stop()


def is_directory(path: str) -> bool:
    """Whether `path` names a directory (of per-rank files: a local path or an fsspec URL, as
    `jobs.executors.is_rank_dir` reads it) rather than one trace. The directory mode's modules
    (process pools, the cross-rank analyses: ~0.01 CPU-s) are imported only when it does."""
    from traceanalyzer.load.urls import is_url

    if is_url(path):
        from traceanalyzer.jobs.executors import is_rank_dir

        return is_rank_dir(path)
    return os.path.isdir(path)


def cache_root(options: Options) -> str | None:
    """Where this command line caches single files, or None when the cache is off."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    obj = obj if isinstance(obj, dict) else {}
    if obj.get("no_cache") or (ctx is not None and ctx.meta.get("traceanalyzer.no_cache")):
        return None
    from traceanalyzer.jobs import cache  # the cache's module (hashing, pickling) only when it may be on

    if cache.disabled_by_env():
        return None
    return obj.get("cache_dir") or options.ranks.rank_cache or str(cache.default_root())


def prune(store: Any) -> None:
    """Keep the cache under `--cache-max` once the command is done (the trace in use stays)."""
    if store is None:
        return
    from traceanalyzer.jobs import cache

    store.wait()  # the Trace written beside the analyses
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    limit = (obj.get("cache_max") if isinstance(obj, dict) else None) or cache.DEFAULT_MAX_BYTES
    cache.prune(store.folder.parent, limit, keep=store.folder)


def open_trace(path: str, options: Options, max_decompressed: int | None = None) -> tuple[Any, Any]:
    """(trace, store): the Trace, from the cache when it holds this file (its tables read when
    an analysis first needs them), and the cache the Session keeps its results in (None when
    off or when `path` is not a regular file)."""
    PROGRESS.start()
    kwargs = {"max_decompressed": max_decompressed} if max_decompressed else {}
    root = cache_root(options)
    store = None
    if root is not None and os.path.isfile(path):
        from traceanalyzer.jobs import cache

        try:
            store = cache.TraceCache(
                root, path, cache.load_key(max_decompressed), cache.options_key(options), on_compute=PROGRESS.analysing
            )
        except OSError:
            store = None

    def decode() -> Any:
        from traceanalyzer.load import load  # the decoder (numpy, the native extension) only on a miss

        return load(path, progress=PROGRESS.loading, **kwargs)

    trace = store.get_trace(fallback=decode) if store is not None else None
    if store is None or trace is store.MISSING:
        trace = decode()
        if store is not None:
            store.put_trace(trace)
    if store is None:
        PROGRESS.analysing("…")
    return trace, store
