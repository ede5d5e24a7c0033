"""Nanoseconds to microseconds for display: the one place that turns a result's times into what
the outputs print.

Results keep int64 nanoseconds on the trace clock (`*_ns`), and sums of them stay integers (a
float sum depends on how polars splits the rows, so the same trace gave different last digits).
Outputs speak microseconds (`*_us`): a time point counts from the trace start (`origin_ns`), a
duration is itself. A column is a time point when its name says so (POINTS); every other `*_ns`
column is a duration.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

# Column names of time points (instants on the trace clock), as opposed to durations.
POINTS = ("start_ns", "end_ns", "ts_ns", "t_ns")


def is_point(column: str) -> bool:
    """Whether a `*_ns` column holds time points (`start_ns`, `startup_end_ns`) or durations."""
    return column in POINTS or column.endswith(("_start_ns", "_end_ns", "_ts_ns"))


def point_us(ns: int | None, origin_ns: int) -> float | None:
    """A trace timestamp as microseconds from the trace start."""
    return None if ns is None else (ns - origin_ns) / 1000.0


def duration_us(ns: int | None) -> float:
    """A duration (or a sum of them, an integer) in microseconds; 0 for none."""
    return (ns or 0) / 1000.0


def us_expr(column: str, origin_ns: int) -> pl.Expr:
    """The display expression of one `*_ns` column, named `*_us`."""
    out = column[: -len("_ns")] + "_us"
    if is_point(column):
        return ((pl.col(column) - origin_ns) / 1000.0).alias(out)
    return (pl.col(column) / 1000.0).alias(out)


def display_us(df: pl.DataFrame, origin_ns: int, keep: Iterable[str] = ()) -> pl.DataFrame:
    """`df` with every `*_ns` column (but those in `keep`) replaced, in place, by its `*_us`
    display column: points from the trace start, durations as they are."""
    kept = set(keep)
    return df.select(us_expr(c, origin_ns) if c.endswith("_ns") and c not in kept else pl.col(c) for c in df.columns)
