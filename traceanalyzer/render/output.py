"""Atomic output: write to a temporary file beside the target, then rename, so an error never
leaves half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: str | bytes | Iterable[bytes]) -> None:
    """Write `data` (text, bytes, or parts of bytes written one after the other as they come,
    never joined) to `path` through a temporary file renamed into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            for part in (data,) if isinstance(data, (str, bytes)) else data:
                fh.write(part.encode() if isinstance(part, str) else part)
        # mkstemp creates the file private (0600); a report is meant to be shared, so give it
        # the permissions an ordinary open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
