"""JSON: `tool_version`, `command`, `input`, `thresholds`, `warnings`, then the command's body."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.render.base import Format
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report
from traceanalyzer.version import __version__


def _clean(value: Any) -> Any:
    if callable(value) and not isinstance(value, type):
        # a part of the body only JSON prints, computed when the JSON is written (`Report.payload`)
        return _clean(value())
    if isinstance(value, pl.DataFrame):
        return _rows(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# Rows made Python objects at once: a table's rows are encoded a slice at a time, so a 1 GB
# trace's every-gap table is never whole as dicts (20,000 at once: ~60 MB at the peak, 4,000:
# ~12 MB, the same CPU); the text is the same, since `render` formats the whole document afterwards.
ROWS_AT_ONCE = 4_000


def _rows(df: pl.DataFrame) -> list[dict[str, Any]] | msgspec.Raw:
    """A table's rows as a list of objects (a small table) or its JSON text, slice by slice,
    each slice's text appended to one buffer and let go (no list of them, no joined copy)."""
    if df.height <= ROWS_AT_ONCE:
        return [_clean(r) for r in df.iter_rows(named=True)]
    text = bytearray(b"[")
    for off in range(0, df.height, ROWS_AT_ONCE):
        if off:
            text += b","
        text += msgspec.json.encode([_clean(r) for r in df.slice(off, ROWS_AT_ONCE).iter_rows(named=True)])[1:-1]
    text += b"]"
    return msgspec.Raw(text)


def document(report: Report) -> dict[str, Any]:
    """The JSON document of a Report (tool_version, input, thresholds, payload)."""
    return {
        "tool_version": __version__,
        "command": report.command,
        "input": report.input,
        "thresholds": report.thresholds,
        "warnings": list(report.warnings),
        **_clean(report.payload),
    }


def _text(report: Report) -> bytes:
    """The JSON document, indented, as UTF-8 (without the final newline): the compact text is
    let go once formatted."""
    compact = msgspec.json.encode(document(report))
    return msgspec.json.format(compact, indent=2)


def render(report: Report) -> str:
    """A Report as JSON text."""
    return _text(report).decode() + "\n"


def write(report: Report, path: str) -> list[str]:
    """The JSON written to `path` as the bytes it is made of: no text copy of it, nor an encoded
    one (1 GB gaps: three copies of a ~10 MB document)."""
    write_atomic(path, (_text(report), b"\n"))
    return [path]


RENDERER = Format("json", ".json", False, "JSON, every field", render, write)
