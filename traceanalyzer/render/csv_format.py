"""CSV: one table per file (nested values as JSON text). `render` gives the command's main
table; `write(report, "NAME.csv")` writes every table, the main one to NAME.csv and each other
to NAME.<table>.csv beside it."""

from __future__ import annotations

import msgspec
import polars as pl

from traceanalyzer.render.base import Format
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report


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


def paths(output: str, report: Report) -> list[tuple[str, pl.DataFrame]]:
    """Where `write` puts each table: the main table to NAME.csv, every other one to
    NAME.<table>.csv beside it."""
    stem = output[: -len(".csv")] if output.lower().endswith(".csv") else output
    return [(output if k == 0 else f"{stem}.{slug}.csv", df) for k, (slug, df) in enumerate(report.tables())]


def write(report: Report, output: str) -> list[str]:
    """Every table of the report, one CSV file each (see `paths`); the paths written."""
    written = []
    for path, df in paths(output, report) or [(output, pl.DataFrame())]:
        write_atomic(path, table_csv(df))
        written.append(path)
    return written


RENDERER = Format("csv", ".csv", False, "CSV, one file per table", render, write)
