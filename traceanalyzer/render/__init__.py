"""Renderers. Each module has `EXTENSION`, `BINARY` and `render(report) -> str | bytes`;
`RENDERERS` maps a `--format` name to its module."""

from __future__ import annotations

from types import ModuleType

from traceanalyzer.render import csv_format, json_format, markdown, text

RENDERERS: dict[str, ModuleType] = {
    "table": text,
    "json": json_format,
    "csv": csv_format,
    "markdown": markdown,
}


def render(report, fmt: str) -> str | bytes:
    """Render a Report in the named format."""
    return RENDERERS[fmt].render(report)
