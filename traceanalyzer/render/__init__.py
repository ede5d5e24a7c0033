"""Renderers: one module per output format, each with a `RENDERER` (see `render.base.Renderer`:
`name`, `extension`, `binary`, `help`, `render(report)`, `write(report, path)`). `RENDERERS`
maps a `--format` name to its renderer; the CLI reads its choices, extensions and help here.

The table below names each format's module and says what the CLI needs before rendering (name,
extension, binary, help); the module (polars, rich, markdown-it, msgspec) is imported only when
a report is rendered in that format, so parsing a command line imports none of them
(tests/render/test_documents.py checks each line against its module's `RENDERER`)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyRenderer:
    """A format as the registry knows it; `render` and `write` load its module's `RENDERER`."""

    name: str
    extension: str
    binary: bool
    help: str
    module: str

    @property
    def renderer(self) -> Any:
        """The module's own `RENDERER` (the module imported on first use)."""
        return importlib.import_module(f"traceanalyzer.render.{self.module}").RENDERER

    def render(self, report: Any) -> str | bytes:
        """The report in this format, as one document."""
        return self.renderer.render(report)

    def write(self, report: Any, path: str) -> list[str]:
        """Write the report to `path` (and any files beside it), atomically; the paths written."""
        return self.renderer.write(report, path)


RENDERERS: dict[str, LazyRenderer] = {
    r.name: r
    for r in (
        LazyRenderer("table", ".txt", False, "text tables fitted to the terminal", "text"),
        LazyRenderer("json", ".json", False, "JSON, every field", "json_format"),
        LazyRenderer("csv", ".csv", False, "CSV, one file per table", "csv_format"),
        LazyRenderer("markdown", ".md", False, "Markdown (pictures beside it)", "markdown"),
        LazyRenderer("html", ".html", False, "one self-contained HTML page", "html_format"),
    )
}
EXTENSIONS: dict[str, str] = {r.extension: r.name for r in RENDERERS.values()}


def render(report, fmt: str) -> str | bytes:
    """Render a Report in the named format."""
    return RENDERERS[fmt].render(report)


def by_extension(path: str) -> LazyRenderer | None:
    """The renderer whose extension `path` ends with (case-insensitive), or None."""
    name = path.rsplit("/", 1)[-1].lower()
    for ext, fmt in EXTENSIONS.items():
        if name.endswith(ext) and len(name) > len(ext):
            return RENDERERS[fmt]
    return None
