"""Paths that are fsspec URLs (`file://`, `memory://`, `s3://`, `gs://`, ...), handled with
fsspec's own objects: `url_to_fs` splits a URL into its filesystem and path, and the
filesystem's `unstrip_protocol` builds a URL back (so `file:///data/x` keeps its leading `/`).
A URL whose filesystem package is missing (s3fs for `s3://`) is one line naming the package."""

from __future__ import annotations

from typing import Any

from traceanalyzer.errors import UsageError


def is_url(path: object) -> bool:
    """Whether `path` is an fsspec URL (`proto://…`) rather than a local path."""
    return isinstance(path, str) and "://" in path


def url_to_fs(url: str) -> tuple[Any, str]:
    """(filesystem, path) of an fsspec URL; a missing fsspec, a missing filesystem package or an
    unknown protocol is a `UsageError` (exit 2) naming what to install."""
    try:
        import fsspec
        from fsspec.registry import known_implementations
    except ImportError:
        raise UsageError(url, "URLs need fsspec: pip install fsspec (or 'torch-traceanalyzer[dask]')") from None
    proto = url.split("://", 1)[0].lower()
    try:
        return fsspec.core.url_to_fs(url)
    except ImportError:
        package = known_implementations.get(proto, {}).get("class", proto).split(".")[0]
        raise UsageError(url, f"{proto}:// URLs need the {package} package: pip install {package}") from None
    except ValueError as exc:
        raise UsageError(url, f"{proto}:// is not a filesystem fsspec knows ({exc})") from None


def local_path(url: str) -> str | None:
    """The local path a `file://` URL names, else None."""
    fs, path = url_to_fs(url)
    return path if "file" in getattr(fs, "protocol", ()) or type(fs).__name__ == "LocalFileSystem" else None


def open_url(url: str) -> tuple[Any, int]:
    """A binary file object for a (non-local) fsspec URL and its size in bytes (0 if unknown);
    a missing file is a `TraceReadError`."""
    from traceanalyzer.errors import TraceReadError

    fs, path = url_to_fs(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise TraceReadError(url, "no such file") from None
    if info.get("type") == "directory":
        raise TraceReadError(url, "is a directory: give one trace file")
    return fs.open(path, "rb"), int(info.get("size") or 0)
