"""The cache of one trace file: its decoded tables and the Session's results, so that the next
command on the same trace skips decoding and every analysis already done.

Layout under the cache root (`default_root()`: `$XDG_CACHE_HOME/traceanalyzer`, else
`~/.cache/traceanalyzer`; `--cache-dir` elsewhere):

    <trace key>/trace/                   the loaded Trace
    <trace key>/results-<options key>/<analysis>/   one Session result each

Every entry is a folder written under a temporary name and renamed into place (`atomic_folder`,
also used by the directory mode's per-rank cache), holding `value.pickle` with every polars
DataFrame in it written beside as Parquet (`dump` / `load`): reading is a Parquet read, not
an unpickling of the tables. The input file is only read.

The trace key is a fingerprint of the file's content (`fingerprint`: size, mtime and a hash of
its first and last MiB; hashing all of a 1-5 GB trace would cost seconds) with the tool version,
the code (`code_fingerprint`: a checkout edited under one version never reads results of its
former code) and the load options; the results key adds every option that changes a number
(`executors.options_key`). A trace edited in place changes its size, mtime or ends.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.version import __version__

ENV_DISABLE = "TRACEANALYZER_NO_CACHE"  # "1": no cache (as --no-cache)
DEFAULT_MAX_BYTES = 20 << 30  # --cache-max: the least recently used traces go beyond it
ENDS_BYTES = 1 << 20
MISSING = object()
_FORMAT = 1  # bump when the layout or the pickled classes change incompatibly


def default_root() -> Path:
    """`$XDG_CACHE_HOME/traceanalyzer`, else `~/.cache/traceanalyzer`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "traceanalyzer"


def disabled_by_env() -> bool:
    """Whether `TRACEANALYZER_NO_CACHE` turns the cache off."""
    return os.environ.get(ENV_DISABLE, "").strip() not in ("", "0")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A key of this installation's code: path, size and mtime of every module of the package.
    The version alone is not enough where the code changes under one version (a checkout being
    worked on): a result computed by other code is never read back."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def fingerprint(path: str | os.PathLike[str]) -> str:
    """A key of the file's content: size, mtime (ns) and SHA-256 of its first and last MiB."""
    st = os.stat(path)
    h = hashlib.sha256(f"{st.st_size}\0{st.st_mtime_ns}\0".encode())
    with open(path, "rb") as fh:
        h.update(fh.read(ENDS_BYTES))
        if st.st_size > ENDS_BYTES:
            fh.seek(max(ENDS_BYTES, st.st_size - ENDS_BYTES))
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
    """Pickles a value with its DataFrames replaced by references to Parquet files, and the
    `shared` objects (the Session's trace) by name."""

    def __init__(self, fh, folder: Path, shared: dict[str, Any]) -> None:
        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.folder, self.frames = folder, 0
        self.shared = {id(v): k for k, v in shared.items()}

    def persistent_id(self, obj: Any) -> Any:
        """A DataFrame goes to its own Parquet file, a shared object by name."""
        if isinstance(obj, pl.DataFrame):
            name = f"df{self.frames}.parquet"
            self.frames += 1
            obj.write_parquet(self.folder / name, compression="lz4", statistics=False)
            return ("df", name)
        key = self.shared.get(id(obj))
        return None if key is None else ("shared", key)


class _Unpickler(pickle.Unpickler):
    def __init__(self, fh, folder: Path, shared: dict[str, Any]) -> None:
        super().__init__(fh)
        self.folder, self.shared = folder, shared

    def persistent_load(self, pid: Any) -> Any:
        """The DataFrame or shared object `persistent_id` named."""
        kind, key = pid
        if kind == "df":
            return pl.read_parquet(self.folder / key)
        return self.shared[key]


def dump(value: Any, folder: Path, shared: dict[str, Any] | None = None) -> None:
    """Write `value` into `folder` (value.pickle and its DataFrames as Parquet)."""
    buf = io.BytesIO()
    _Pickler(buf, folder, shared or {}).dump(value)
    (folder / "value.pickle").write_bytes(buf.getvalue())


def load(folder: Path, shared: dict[str, Any] | None = None) -> Any:
    """The value `dump` wrote into `folder`; MISSING when there is none or it cannot be read
    (an entry from another version of a class: it is simply computed again)."""
    try:
        with open(folder / "value.pickle", "rb") as fh:
            return _Unpickler(fh, folder, shared or {}).load()
    except FileNotFoundError:
        return MISSING
    except Exception:  # noqa: BLE001 - a stale or damaged entry is a miss, never an error
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
        key = f"{_FORMAT}\0{__version__}\0{code_fingerprint()}\0{fingerprint(path)}\0{load_key}"
        key = hashlib.sha256(key.encode()).hexdigest()[:32]
        self.folder = Path(root) / key
        okey = hashlib.sha256(options_key.encode()).hexdigest()[:16]
        self.results = self.folder / f"results-{okey}"
        self.shared: dict[str, Any] = {}
        self.loaded: set[str] = set()

    def get_trace(self) -> Any:
        """The cached Trace, or MISSING; a hit marks the entry as just used (for `prune`)."""
        value = load(self.folder / "trace")
        if value is not MISSING:
            with contextlib.suppress(OSError):
                os.utime(self.folder)
        return value

    def put_trace(self, trace: Any) -> None:
        """Cache the loaded Trace (once; never over an existing entry)."""
        with contextlib.suppress(Exception), atomic_folder(self.folder / "trace") as tmp:
            if tmp is not None:
                dump(trace, tmp)

    def share(self, **objects: Any) -> None:
        """Objects results refer to that are stored elsewhere (the Session's traces)."""
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
