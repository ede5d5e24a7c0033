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
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.Struct, pl.List, pl.Array, pl.Object))]
    if nested:
        # to_list() gives plain Python values (map_elements would hand a list cell over as a Series)
        df = df.with_columns(
            pl.Series(c, [_json(v) for v in df.get_column(c).to_list()], dtype=pl.String) for c in nested
        )
    return df.write_csv()


def _json(value: object) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def render(report: Report) -> str:
    """The main table of the report as CSV."""
    return table_csv(report.main_table())
