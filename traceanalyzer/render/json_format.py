"""JSON: `tool_version`, `command`, `input`, `thresholds`, `warnings`, then the command's body."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.report import Report
from traceanalyzer.version import __version__

EXTENSION = ".json"
BINARY = False


def _clean(value: Any) -> Any:
    if isinstance(value, pl.DataFrame):
        return [_clean(r) for r in value.to_dicts()]
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
