"""JSON: `tool_version`, `command`, `input`, `thresholds`, `warnings`, then the command's body."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.render.base import Format
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
# trace's every-gap table is never whole as dicts (~60 MB at the peak); the text is the same,
# since `render` formats the whole document afterwards.
ROWS_AT_ONCE = 20_000


def _rows(df: pl.DataFrame) -> list[dict[str, Any]] | msgspec.Raw:
    """A table's rows as a list of objects (a small table) or its JSON text, slice by slice."""
    if df.height <= ROWS_AT_ONCE:
        return [_clean(r) for r in df.iter_rows(named=True)]
    parts = (
        msgspec.json.encode([_clean(r) for r in df.slice(off, ROWS_AT_ONCE).iter_rows(named=True)])[1:-1]
        for off in range(0, df.height, ROWS_AT_ONCE)
    )
    return msgspec.Raw(b"[" + b",".join(parts) + b"]")


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


def render(report: Report) -> str:
    """A Report as JSON text."""
    return msgspec.json.format(msgspec.json.encode(document(report)), indent=2).decode() + "\n"


RENDERER = Format("json", ".json", False, "JSON, every field", render)
