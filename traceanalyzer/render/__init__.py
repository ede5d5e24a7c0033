"""Renderers: one module per output format, each with a `RENDERER` (see `render.base.Renderer`:
`name`, `extension`, `binary`, `help`, `render(report)`, `write(report, path)`). `RENDERERS`
maps a `--format` name to its renderer; the CLI reads its choices, extensions and help here."""

from __future__ import annotations

from traceanalyzer.render import csv_format, html_format, json_format, markdown, text
from traceanalyzer.render.base import Renderer

RENDERERS: dict[str, Renderer] = {
    r.name: r
    for r in (text.RENDERER, json_format.RENDERER, csv_format.RENDERER, markdown.RENDERER, html_format.RENDERER)
}
EXTENSIONS: dict[str, str] = {r.extension: r.name for r in RENDERERS.values()}


def render(report, fmt: str) -> str | bytes:
    """Render a Report in the named format."""
    return RENDERERS[fmt].render(report)


def by_extension(path: str) -> Renderer | None:
    """The renderer whose extension `path` ends with (case-insensitive), or None."""
    name = path.rsplit("/", 1)[-1].lower()
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext) and len(name) > len(ext):
            return RENDERERS[fmt]
    return None
