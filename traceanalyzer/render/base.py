"""The renderer protocol: a format is a name, a file extension, whether its output is bytes, a
one-phrase help, `render(report)`, and `write(report, path)` for formats that write more than
one file (CSV: one file per table; Markdown: the pictures beside it). The CLI derives its
`--format` choices, the extensions `-o` understands and its help texts from the registry in
`render/__init__.py`; adding a format is one module with a `RENDERER` plus one registry line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report


class Renderer(Protocol):
    """What the CLI and the library need of an output format."""

    name: str
    extension: str
    binary: bool
    help: str

    def render(self, report: Report) -> str | bytes:
        """The report in this format, as one document."""

    def write(self, report: Report, path: str) -> list[str]:
        """Write the report to `path` (and any files beside it), atomically; the paths written."""


@dataclass(frozen=True)
class Format:
    """A renderer made of functions: `render`, and `files` when one document is not enough."""

    name: str
    extension: str
    binary: bool
    help: str
    render_fn: Callable[[Report], str | bytes]
    files: Callable[[Report, str], list[str]] | None = None

    def render(self, report: Report) -> str | bytes:
        """The report in this format, as one document."""
        return self.render_fn(report)

    def write(self, report: Report, path: str) -> list[str]:
        """`files(report, path)` when the format has several files, else `render` written to `path`."""
        if self.files is not None:
            return self.files(report, path)
        write_atomic(path, self.render(report))
        return [path]
