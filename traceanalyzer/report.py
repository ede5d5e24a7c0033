"""The one report document model: what every command (and the incident report) hands to a
renderer.

A `Report` is a title, a headline, warnings, sections and a JSON payload. A `Section` is a
title followed by typed blocks: `Text` (prose whose parts are plain text, `Code` names and
`Strong` emphasis), `Table` (a polars frame), `Image` (PNG bytes with a caption) and
`Findings` (rule, severity, message, advice). Renderers walk `Section.content()` and decide
how each block looks (Markdown escapes plain text and puts names in code spans; HTML is made
from that Markdown by markdown-it-py; the text renderer fits tables to the terminal), so a new
section or command needs no change in any renderer.

The JSON renderer writes `payload` (with `tool_version`, `input`, `thresholds`). The display
settings (`table_rows`, `width`, `wide`, `color`) concern the table renderers only: exports are
complete unless `--top` was given."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

TABLE_ROWS = 20  # rows per table on a terminal when --top is not given


@dataclass(frozen=True)
class Code:
    """An identifier inside prose (an op, a kernel, a Python frame): shown verbatim."""

    text: str


@dataclass(frozen=True)
class Strong:
    """Emphasised words inside prose (a severity, a rule id)."""

    text: str


Inline = str | Code | Strong


def inline(text: str) -> tuple[Inline, ...]:
    """Plain prose with `backticked` names as parts: the backticked pieces become `Code`."""
    parts: list[Inline] = []
    for k, piece in enumerate(re.split(r"`([^`]+)`", text)):
        if piece:
            parts.append(Code(piece) if k % 2 else piece)
    return tuple(parts)


def marked(text: str, names: list[str] | tuple[str, ...]) -> tuple[Inline, ...]:
    """Prose whose occurrences of `names` (longest first) become `Code` parts."""
    names = sorted({n for n in names if n}, key=len, reverse=True)
    if not names:
        return (text,) if text else ()
    pattern = "|".join(re.escape(n) for n in names)
    parts: list[Inline] = []
    pos = 0
    for m in re.finditer(pattern, text):
        if m.start() > pos:
            parts.append(text[pos : m.start()])
        parts.append(Code(m.group(0)))
        pos = m.end()
    if pos < len(text):
        parts.append(text[pos:])
    return tuple(parts)


def plain(parts: tuple[Inline, ...]) -> str:
    """The parts as plain text (for a terminal): names bare, emphasis dropped."""
    return "".join(p if isinstance(p, str) else p.text for p in parts)


@dataclass(frozen=True)
class Text:
    """A paragraph (`parts`) and/or a bulleted list (`items`, each a bullet's parts)."""

    parts: tuple[Inline, ...] = ()
    items: tuple[tuple[Inline, ...], ...] = ()

    @classmethod
    def of(cls, text: str) -> Text:
        """A paragraph from prose with `backticked` names."""
        return cls(inline(text))

    @classmethod
    def bullets(cls, items: list[tuple[Inline, ...] | str]) -> Text:
        """A bulleted list (strings are read as prose with `backticked` names)."""
        return cls(items=tuple(inline(i) if isinstance(i, str) else tuple(i) for i in items))


@dataclass(frozen=True)
class Table:
    """A table. `whole`: shown in full whatever `--top` says."""

    frame: pl.DataFrame
    whole: bool = False
    keep: tuple[str, ...] = ()  # columns a narrow terminal must never hide


@dataclass(frozen=True)
class Image:
    """A picture: PNG bytes, the file name it is written under beside a Markdown file, a caption."""

    name: str
    data: bytes
    caption: str


@dataclass(frozen=True)
class FindingRow:
    """One finding as a report shows it; `ranks` when it fired on several ranks of a job."""

    severity: str
    rule: str
    message: str
    recommendation: str
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Findings:
    """The findings that fired (an empty tuple says none did)."""

    rows: tuple[FindingRow, ...]
    empty: str = "no rule fired"


Block = Text | Table | Image | Findings


@dataclass(frozen=True)
class Section:
    """One titled part of a report: an optional paragraph, an optional table, then any blocks.

    `text` and `table` are the common case of a command's section; `blocks` holds what else it
    shows (pictures, findings, more text and tables), in order."""

    title: str
    table: pl.DataFrame | None = None
    text: str | None = None  # a paragraph shown before the table
    main: bool = False  # the table written by `--format csv`
    show_table: bool = True  # False: the table is exported (CSV) but the text says it all on screen
    export: pl.DataFrame | None = None  # what CSV writes instead of `table` (bytes, not MiB)
    whole: bool = False  # True: shown in full whatever --top says (a short summary table)
    blocks: tuple[Block, ...] = ()
    keep: tuple[str, ...] = ()  # columns of `table` a narrow terminal must never hide (the cause's explanation)

    @property
    def csv_table(self) -> pl.DataFrame | None:
        """The table as exported: `export` when given, else `table`."""
        return self.export if self.export is not None else self.table

    @property
    def slug(self) -> str:
        """A file-name-safe short name of the title (`gaps_of_at_least_50_us`)."""
        words = re.findall(r"[a-z0-9]+", self.title.lower().replace("µs", "us"))
        return "_".join(words[:6]) or "table"

    def content(self) -> tuple[Block, ...]:
        """The section's blocks in display order: its text, its table, then `blocks`."""
        out: list[Block] = []
        if self.text:
            out.append(Text.of(self.text))
        if self.table is not None and self.show_table:
            out.append(Table(self.table, self.whole, self.keep))
        return (*out, *self.blocks)


@dataclass(frozen=True)
class Report:
    """A command's result, ready for any renderer."""

    command: str
    input: str
    thresholds: dict[str, Any]
    sections: tuple[Section, ...]
    payload: dict[str, Any]  # command-specific JSON body; a zero-argument callable is computed only for JSON
    headline: str | None = None
    warnings: tuple[str, ...] = field(default=())
    table_rows: int | None = TABLE_ROWS  # rows per table in text/Markdown (None: all)
    width: int | None = None  # text width in columns (None: detect)
    wide: bool = False  # True: no column hidden or shortened
    exports_whole: bool = True  # False: --top was given, so JSON and CSV are cut too
    title: str | None = None  # the document's title (default: "traceanalyzer COMMAND: INPUT")
    color: bool = False  # the text renderer may colour severities and causes (a terminal)

    @property
    def heading(self) -> str:
        """The document's title."""
        return self.title or f"traceanalyzer {self.command}: {self.input}"

    def images(self) -> list[Image]:
        """Every picture of the report, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Image)]

    def main_table(self) -> pl.DataFrame:
        """The table `--format csv` writes to stdout: the main one, else the first."""
        tables = self.tables()
        return tables[0][1] if tables else pl.DataFrame()

    def tables(self) -> list[tuple[str, pl.DataFrame]]:
        """(unique slug, table) for every section with a table, the main table first."""
        with_table = [s for s in self.sections if s.table is not None]
        with_table.sort(key=lambda s: not s.main)
        seen: dict[str, int] = {}
        out = []
        for s in with_table:
            n = seen[s.slug] = seen.get(s.slug, 0) + 1
            out.append((s.slug if n == 1 else f"{s.slug}_{n}", s.csv_table))
        return out
