"""CSV: one table per file (nested values as JSON text). `render` writes the command's main
table; `-o NAME.csv` writes every table, one file each (`commands.common.emit`)."""

from __future__ import annotations

import msgspec
import polars as pl

from traceanalyzer.report import Report

EXTENSION = ".csv"
BINARY = False


def table_csv(df: pl.DataFrame) -> str:
    """One table as CSV text; structs and lists become JSON text in their cell."""
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.Struct, pl.List, pl.Object))]
    if nested:
        df = df.with_columns(
            pl.col(c).map_elements(lambda v: msgspec.json.encode(v).decode(), return_dtype=pl.String) for c in nested
        )
    return df.write_csv()


def render(report: Report) -> str:
    """The main table of the report as CSV."""
    return table_csv(report.main_table())
