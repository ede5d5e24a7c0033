"""The cache of one trace file: its decoded tables and the Session's results, so that the next
command on the same trace skips decoding and every analysis already done.

Layout under the cache root (`default_root()`: `$XDG_CACHE_HOME/traceanalyzer`, else
`~/.cache/traceanalyzer`; `--cache-dir` elsewhere):

    <trace key>/trace/                   the loaded Trace: Arrow files of column groups (small tables packed)
    <trace key>/results-<options key>/<analysis>/   one Session result each (the what-if model too, as tables)
    <trace key>/outputs/<command key>/   what a command printed and wrote (`cli.replay`)

Every entry is a folder written under a temporary name and renamed into place (`atomic_folder`,
also used by the directory mode's per-rank cache), holding `value.pickle` with every polars
DataFrame in it over `FRAME_INLINE_BYTES` written beside as an Arrow IPC file, lz4-compressed (`dump` /
`load`): reading is an Arrow read, not an unpickling of the tables; a smaller frame is packed into
`value.pickle` (`pack`: a file costs ~0.5 ms to write and read, most of a small trace's entry).
Arrow IPC rather than Parquet: it writes the columns' buffers as they are, at 311 MB in half the
time and without Parquet's encoding buffers (+10 MB of peak RSS instead of +95 MB for the results
of `gaps`), for as much disk (the tables 22 MB, the results 29 MB). The input file is only read.

The Trace comes back lazily (`CachedTrace`, in `trace_files`): each table is read from its files when an
analysis first asks for it, so a command whose results are all cached reads none of them
(a rerun of `gaps` on a 311 MB trace peaks at the results' size, not the tables').

The trace key is a fingerprint of the file's content (`fingerprint`: size, mtime and a hash of its first and last
MiB; hashing all of a 1-5 GB trace would cost seconds) with the tool version, the code (`code_fingerprint`: a
checkout edited under one version never reads results of its former code) and the load options; the results key adds
every option that changes a number (`options_key`). A trace edited in place changes its size, mtime or ends.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import pickle
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceanalyzer.jobs import trace_files
from traceanalyzer.jobs.trace_files import (  # noqa: F401 - lazy: asked of the cache
    EXT,
    MISSING,
    dump_trace,
    lazy,
    load_trace,
    pack,
    unpack,
    write_frame,
)
from traceanalyzer.version import __version__

if TYPE_CHECKING:
    from traceanalyzer.options import Options

ENV_DISABLE = "TRACEANALYZER_NO_CACHE"  # "1": no cache (as --no-cache)
DEFAULT_MAX_BYTES = 20 << 30  # --cache-max: the least recently used traces go beyond it
ENDS_BYTES = 1 << 20
_FORMAT = 4  # bump when the layout or the pickled classes change incompatibly


def options_key(options: Options) -> str:
    """The options as the cache key sees them: every value that changes a number (here, not in
    `executors`, so that opening one file does not import the directory mode's process pools)."""
    from traceanalyzer.options import EXECUTION_FIELDS

    th = {k: v for k, v in options.thresholds().items() if k not in EXECUTION_FIELDS}
    return json.dumps(th, sort_keys=True, default=str)


def default_root() -> Path:
    """`$XDG_CACHE_HOME/traceanalyzer`, else `~/.cache/traceanalyzer`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceanalyzer"


def disabled_by_env() -> bool:
    """Whether `TRACEANALYZER_NO_CACHE` turns the cache off."""
    return os.environ.get(ENV_DISABLE, "").strip() not in ("", "0")


DEPENDENCIES = ("polars", "_polars_runtime_32", "numpy", "msgspec", "click", "rich", "markdown_it")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A key of this installation's code: path, size and mtime of every module of the package,
    and where each library an output depends on is installed, with its mtime (an upgrade of
    polars may print a float otherwise). The version alone is not enough where the code changes
    under one version (a checkout being worked on): a result computed by other code is never
    read back. No library is imported for this."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for name in DEPENDENCIES:
        try:
            spec = importlib.util.find_spec(name)
            origin = spec.origin if spec is not None and spec.origin else ""
            h.update(f"{name}\0{origin}\0{os.stat(origin).st_mtime_ns if origin else 0}\0".encode())
        except (ImportError, ValueError, OSError):
            h.update(f"{name}\0-\0".encode())
    return h.hexdigest()[:16]


def load_key(max_decompressed: int | None) -> str:
    """The load options as part of a cache key (here, not beside the load: the output cache makes
    this key without importing the options or the loader, ~20 ms of a 0.1 s replay)."""
    return repr(sorted({"max_decompressed": max_decompressed}.items())) if max_decompressed else "[]"


def trace_key(path: str | os.PathLike[str], load_key: str) -> str:
    """The folder name of a trace's entries: format, version, code, the file's content and the
    load options."""
    key = f"{_FORMAT}\0{__version__}\0{code_fingerprint()}\0{fingerprint(path)}\0{load_key}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def fingerprint(path: str | os.PathLike[str]) -> str:
    """A key of the file's content: size, mtime (ns) and SHA-256 of its first and last MiB
    (worked out once per process for a file as it stands: the output cache, the trace entry and
    the results all ask)."""
    st = os.stat(path)
    # ctime too in the memo's key: any write to the file, even one that restores its mtime, moves it
    return _fingerprint(os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


@functools.lru_cache(maxsize=64)
def _fingerprint(path: str, size: int, mtime_ns: int, inode: int, ctime_ns: int) -> str:
    h = hashlib.sha256(f"{size}\0{mtime_ns}\0".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(ENDS_BYTES))
        if size > ENDS_BYTES:
            fh.seek(max(ENDS_BYTES, size - ENDS_BYTES))
            h.update(fh.read(ENDS_BYTES))
    return h.hexdigest()[:32]


@contextlib.contextmanager
def atomic_folder(final: str | os.PathLike[str]) -> Iterator[Path | None]:
    """Yield a temporary folder beside `final` (None when `final` exists) and rename it into
    place when the block ends: a concurrent or interrupted run never leaves half an entry, and
    when two runs write the same key the first one's stays."""
    final = Path(final)
    if final.exists():
        yield None
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    try:
        yield tmp
        os.replace(tmp, final)
    except OSError:  # another writer won the race (or the disk is full): theirs, or nothing
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class _Pickler(pickle.Pickler):
    """Pickles a value with its DataFrames replaced by references to Arrow files, and the
    `shared` objects (the Session's trace) by name."""

    def __init__(self, fh, folder: Path, shared: Mapping[str, Any]) -> None:
        import polars as pl  # not at import: the output cache (`cli.replay`) needs no polars

        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.frame_type = pl.DataFrame
        self.folder, self.frames = folder, {}  # frames: id -> file (pickle asks before its memo)
        self.pending: list[tuple[Any, Path]] = []  # the frames and their files, written after (`dump`)
        self.shared = {id(v): k for k, v in shared.items()}

    def persistent_id(self, obj: Any) -> Any:
        """A DataFrame goes to its own Arrow file, or packed here when it is small (`pack`,
        `FRAME_INLINE_BYTES`), in one chunk a column either way and once however often it is held; a
        shared object by name."""
        if isinstance(obj, self.frame_type):
            name = self.frames.get(id(obj))
            if name is not None:  # the value holds obj while it is pickled: its id is not reused
                return ("df", name)
            name = self.frames[id(obj)] = f"df{len(self.frames)}{EXT}"
            if obj.estimated_size() <= trace_files.FRAME_INLINE_BYTES:
                return ("inline", name, pack(obj.rechunk() if obj.n_chunks() > 1 else obj))
            self.pending.append((obj, self.folder / name))
            return ("df", name)
        key = self.shared.get(id(obj))
        return None if key is None else ("shared", key)


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh, folder: Path, shared: Mapping[str, Any]) -> None:
        super().__init__(fh)
        self.folder, self.shared, self.frames = folder, shared, _read_frames(folder)

    def persistent_load(self, pid: Any) -> Any:
        """The DataFrame or shared object `persistent_id` named."""
        kind, key, *blob = pid
        if kind == "inline":  # the frame's first mention (pickle reads in the order it wrote)
            self.frames[key] = unpack(blob[0])
        return self.frames[key] if kind in ("df", "inline") else self.shared[key]


def _read_frames(folder: Path) -> dict[str, Any]:
    """Every DataFrame of an entry by file name, in one query: polars reads and inflates the
    files in parallel (the results of `gaps` at 311 MB, 28 files, in 2/3 of the time of a read
    each; the in-memory engine keeps a column in one chunk, as written)."""
    names = sorted(p.name for p in folder.glob(f"df*{EXT}"))
    if not names:  # the output cache's entries, and values without a frame: no polars
        return {}
    import polars as pl

    frames = pl.collect_all([pl.scan_ipc(folder / n) for n in names], engine="in-memory")
    return dict(zip(names, frames, strict=True))


def dump(value: Any, folder: Path, shared: Mapping[str, Any] | None = None) -> None:
    """Write `value` into `folder` (value.pickle and its DataFrames as Arrow files)."""
    buf = io.BytesIO()
    pickler = _Pickler(buf, folder, shared or {})
    pickler.dump(value)
    _write_frames(pickler.pending)
    (folder / "value.pickle").write_bytes(buf.getvalue())


def _write_frames(frames: list[tuple[Any, Path]]) -> None:
    """Each frame to its file, two at a time where there are several: polars encodes and
    compresses a frame on one thread, without the GIL (the results of `gaps` at 1 GB, 28 frames,
    138 MB: 230 ms written one after another)."""
    if len(frames) < 2 or (os.cpu_count() or 1) < 2:
        for df, path in frames:
            write_frame(df, path)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2, thread_name_prefix="traceanalyzer-cache-frames") as pool:
        for done in [pool.submit(write_frame, df, path) for df, path in frames]:
            done.result()  # a frame that cannot be written fails the entry (`put` drops it)


def load(folder: Path, shared: Mapping[str, Any] | None = None) -> Any:
    """The value `dump` wrote into `folder`; MISSING when there is none or it cannot be read
    (an entry from another version of a class: it is simply computed again)."""
    try:
        with open(folder / "value.pickle", "rb") as fh:
            return _Unpickler(fh, folder, shared or {}).load()
    except Exception:  # noqa: BLE001 - none, or a stale or damaged entry: a miss, never an error
        return MISSING


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def prune(root: str | os.PathLike[str], max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used trace entries (by the time they were last read or
    written) until the cache holds at most `max_bytes`; `keep` (the entry in use) stays.
    Returns the entries removed."""
    root = Path(root)
    if not root.is_dir():
        return []
    entries = [(d.stat().st_mtime, d, _size(d)) for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    total = sum(n for _, _, n in entries)
    removed = []
    for _, d, n in sorted(entries, key=lambda e: e[0]):
        if total <= max_bytes:
            break
        if keep is not None and d == keep:
            continue
        shutil.rmtree(d, ignore_errors=True)
        total -= n
        removed.append(d)
    return removed


class TraceCache:
    """The cache entries of one trace file under one set of options: `trace` (the loaded
    Trace) and the Session store protocol (`get`, `put`, `computing`, `share`) for its results.
    `on_compute(name)` is told before the Session computes a result the cache lacks."""

    MISSING = MISSING

    def __init__(
        self,
        root: str | os.PathLike[str],
        path: str,
        load_key: str,
        options_key: str,
        on_compute: Callable[[str], None] | None = None,
    ) -> None:
        self.on_compute = on_compute
        self.folder = Path(root) / trace_key(path, load_key)
        okey = hashlib.sha256(options_key.encode()).hexdigest()[:16]
        self.results = self.folder / f"results-{okey}"
        self.shared: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self.loaded: set[str] = set()
        self.writer: Any = None  # the thread writing the Trace (`put_trace`)

    def get_trace(self, fallback: Callable[[], Any] | None = None) -> Any:
        """The cached Trace (its tables read when first used; `fallback()` decodes the file when
        one cannot be), or MISSING; a hit marks the entry as just used (for `prune`)."""
        value = load_trace(self.folder / "trace", fallback)
        if value is not MISSING:
            with contextlib.suppress(OSError):
                os.utime(self.folder)
        return value

    def put_trace(self, trace: Any, background: bool = True) -> None:
        """Cache the loaded Trace (once; never over an existing entry), by default on a thread while
        the analyses run: polars writes without the GIL, on two cores at next to no cost. `wait()` joins it."""

        # its fields, not the Trace: the writer lets each column go once written (`dump_trace`)
        fields = trace_files.trace_fields(trace)
        del trace

        def write() -> None:
            with contextlib.suppress(Exception), atomic_folder(self.folder / "trace") as tmp:
                if tmp is not None:
                    dump_trace(fields, tmp)

        self.wait()
        if not background:
            return write()
        self.writer = threading.Thread(target=write, name="traceanalyzer-cache-write")
        self.writer.start()

    def wait(self) -> None:
        """Until the Trace `put_trace` is writing is written."""
        if self.writer is not None:
            self.writer.join()
            self.writer = None

    def share(self, **objects: Any) -> None:
        """Objects results refer to that are stored elsewhere (the Session's traces), held weakly:
        a Trace the Session releases is freed then (`gaps` at 200 MB: ~25 MB through its output)."""
        self.shared.update(objects)

    def computing(self, name: str) -> None:
        """The Session is about to compute `name` (not in the cache)."""
        if self.on_compute is not None:
            self.on_compute(name)

    def get(self, name: str) -> Any:
        """A cached Session result, or MISSING."""
        value = load(self.results / name, self.shared)
        if value is not MISSING:
            self.loaded.add(name)
        return value

    def put(self, name: str, value: Any) -> None:
        """Cache a Session result, unless it came from the cache."""
        if name in self.loaded:
            return
        with contextlib.suppress(Exception), atomic_folder(self.results / name) as tmp:
            if tmp is not None:  # a value that cannot be pickled is computed again next time
                dump(value, tmp, self.shared)
