"""What a command hands to a renderer: titled tables plus a JSON payload.

Every renderer takes a `Report`; the JSON renderer writes `payload` (with `tool_version`,
`input`, `thresholds`), the others the sections."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass(frozen=True)
class Section:
    """One titled part of a Report: a paragraph, a table, or both."""

    title: str
    table: pl.DataFrame | None = None
    text: str | None = None  # a paragraph shown before the table
    main: bool = False  # the table written by `--format csv`


@dataclass(frozen=True)
class Report:
    """What a command hands to a renderer."""

    command: str
    input: str
    thresholds: dict[str, Any]
    sections: tuple[Section, ...]
    payload: dict[str, Any]  # command-specific JSON body
    headline: str | None = None
    warnings: tuple[str, ...] = field(default=())

    def main_table(self) -> pl.DataFrame:
        """The table `--format csv` writes: the section marked main, else the first table."""
        for s in self.sections:
            if s.main and s.table is not None:
                return s.table
        for s in self.sections:
            if s.table is not None:
                return s.table
        return pl.DataFrame()
