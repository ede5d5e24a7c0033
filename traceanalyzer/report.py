"""What a command hands to a renderer: titled tables plus a JSON payload.

Every renderer takes a `Report`; the JSON renderer writes `payload` (with `tool_version`,
`input`, `thresholds`), the others the sections. The display settings (`table_rows`, `width`,
`wide`) concern the table renderers only: exports are complete unless `--top` was given."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

TABLE_ROWS = 20  # rows per table on a terminal when --top is not given


@dataclass(frozen=True)
class Section:
    """One titled part of a report: an optional paragraph, then an optional table."""

    title: str
    table: pl.DataFrame | None = None
    text: str | None = None  # a paragraph shown before the table
    main: bool = False  # the table written by `--format csv`
    show_table: bool = True  # False: the table is exported (CSV) but the text says it all on screen
    export: pl.DataFrame | None = None  # what CSV writes instead of `table` (bytes, not MiB)
    whole: bool = False  # True: shown in full whatever --top says (a short summary table)

    @property
    def csv_table(self) -> pl.DataFrame | None:
        """The table as exported: `export` when given, else `table`."""
        return self.export if self.export is not None else self.table

    @property
    def slug(self) -> str:
        """A file-name-safe short name of the title (`gaps_of_at_least_50_us`)."""
        words = re.findall(r"[a-z0-9]+", self.title.lower().replace("µs", "us"))
        return "_".join(words[:6]) or "table"


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
