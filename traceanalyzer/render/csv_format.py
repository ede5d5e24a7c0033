"""CSV of the command's main table (nested values as JSON text)."""

from __future__ import annotations

import msgspec
import polars as pl

from traceanalyzer.report import Report

EXTENSION = ".csv"
BINARY = False


def render(report: Report) -> str:
    df = report.main_table()
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.Struct, pl.List))]
    if nested:
        df = df.with_columns(
            pl.col(c).map_elements(lambda v: msgspec.json.encode(v).decode(), return_dtype=pl.String) for c in nested
        )
    return df.write_csv()
