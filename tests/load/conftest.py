"""Fixtures of the loader tests: each real trace is loaded (and parsed by the stdlib) at most
once per session, so the suite stays fast on a small machine."""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from traceanalyzer.load.loader import load


@functools.cache
def _load(path: str):
    return load(path)


def read_json(path: Path | str, **json_kwargs: Any) -> Any:
    """The whole document, read the plain way: stdlib gzip (by magic number) + json."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, **json_kwargs)


@pytest.fixture(scope="session")
def load_trace() -> Callable[[Path | str], Any]:
    """`load_trace(path) -> Trace`, cached for the session (treat the result as read-only)."""
    return lambda path: _load(str(path))


@pytest.fixture(scope="session")
def raw_json() -> Callable[..., Any]:
    """`raw_json(path, **json.loads kwargs)`: the independent stdlib reading of a trace."""
    return read_json
