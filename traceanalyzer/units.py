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
POINTS = ("start_ns", "end_ns", "ts_ns", "t_ns", "at_ns")


def is_point(column: str) -> bool:
    """Whether a `*_ns` column holds time points (`start_ns`, `startup_end_ns`, `peak_at_ns`) or
    durations."""
    return column in POINTS or column.endswith(("_start_ns", "_end_ns", "_ts_ns", "_at_ns"))


def _divide_exactly(values: pl.Series) -> pl.Series:
    """`values` / 1000, each the nearest double to the exact quotient. Polars divides a column by
    a scalar (a literal, even `pl.repeat` in an expression) as a product with its reciprocal, off
    in the last digit for about one value in seven (84616006 ns gave 84616.00600000001 µs); two
    eager Series of one length are divided value by value, exactly. (numpy divides exactly too,
    but importing it costs ~0.1 CPU-s of a command's start-up.)"""
    floats = values.cast(pl.Float64)
    return (floats / pl.repeat(1000.0, floats.len(), dtype=pl.Float64, eager=True)).alias(values.name)


def thousandth(value):
    """A number, a Series or an expression divided by 1000 exactly (`_divide_exactly`)."""
    if isinstance(value, pl.Expr):
        return value.map_batches(_divide_exactly, return_dtype=pl.Float64, is_elementwise=True)
    if isinstance(value, pl.Series):
        return _divide_exactly(value)
    return value / 1000.0


def point_us(ns, origin_ns: int):
    """A trace timestamp (a number, a Series or an expression) as microseconds from the trace start."""
    return None if ns is None else thousandth(ns - origin_ns)


def point_ms(ns, origin_ns: int):
    """Trace timestamps (a number or a Series) as milliseconds from the trace start: the time
    axis of the pictures."""
    return (ns - origin_ns) / 1e6


def duration_us(ns: int | None) -> float:
    """A duration (or a sum of them, an integer) in microseconds; 0 for none."""
    return (ns or 0) / 1000.0


def mean_us(total_ns: int, count: int) -> float:
    """The mean of `count` durations summing to `total_ns` (an integer), in µs: one division,
    so the last digit is the nearest to the exact mean; 0 for none."""
    return total_ns / (count * 1000.0) if count else 0.0


def shown_in_us(column: str) -> bool:
    """Whether a column holds ns to be shown in µs: `*_ns`, or `*_ns_*` (`blocked_ns_per_step`)."""
    return column.endswith("_ns") or "_ns_" in column


def us_name(column: str) -> str:
    """The display name of a ns column: `duration_ns` -> `duration_us`, `blocked_ns_per_step` ->
    `blocked_us_per_step`."""
    if column.endswith("_ns"):
        return column[: -len("_ns")] + "_us"
    return column.replace("_ns_", "_us_", 1)


def _us(value: pl.Expr, column: str, origin_ns: int) -> pl.Expr:
    """The µs of one ns value (a column or a struct field) named `column`."""
    return thousandth(value - origin_ns if is_point(column) else value)


def us_expr(column: str, origin_ns: int) -> pl.Expr:
    """The display expression of one ns column (`shown_in_us`), named as `us_name` says."""
    return _us(pl.col(column), column, origin_ns).alias(us_name(column))


def _struct_us(column: str, dtype: pl.Struct, origin_ns: int) -> pl.Expr:
    """A struct column with its ns fields shown in µs, in place (`blocked_thread.call_ns` ->
    `call_us`); a null struct stays null."""
    names = [f.name for f in dtype.fields]
    shown = [n for n in names if shown_in_us(n)]
    if not shown:
        return pl.col(column)
    converted = pl.col(column).struct.with_fields([_us(pl.field(n), n, origin_ns).alias(n) for n in shown])
    return converted.struct.rename_fields([us_name(n) if n in shown else n for n in names])


def display_us(df: pl.DataFrame, origin_ns: int, keep: Iterable[str] = ()) -> pl.DataFrame:
    """`df` with every ns column (`shown_in_us`, but those in `keep`) replaced, in place, by its
    µs display column: points from the trace start, durations as they are; the ns fields of a
    struct column likewise (`blocked_thread`)."""
    kept = set(keep)
    # The plain columns are divided by a column of 1000.0 placed beside them: column by column is
    # exact as `_divide_exactly` is, inside this one query, where a `map_batches` per column was a
    # Python call and a query each (a small rank's findings read ~10 such views: ~4 % of its CPU).
    divisor = _DIVISOR
    while divisor in df.columns:
        divisor += "_"

    def shown(c: str, dtype: pl.DataType) -> pl.Expr:
        if c in kept:
            return pl.col(c)
        if shown_in_us(c):
            value = pl.col(c) - origin_ns if is_point(c) else pl.col(c)
            return (value.cast(pl.Float64) / pl.col(divisor)).alias(us_name(c))
        return _struct_us(c, dtype, origin_ns) if isinstance(dtype, pl.Struct) else pl.col(c)

    if all(c in kept or not shown_in_us(c) or t in (pl.Int64, pl.Float64) for c, t in df.schema.items()) and not any(
        isinstance(t, pl.Struct) and c not in kept for c, t in df.schema.items()
    ):
        # no struct to convert: Series calls (the same exact divisions), no query (~25 µs each)
        thousand = pl.Series([1000.0]).new_from_index(0, df.height)
        cols = []
        for c in df.columns:
            col = df.get_column(c)
            if c in kept or not shown_in_us(c):
                cols.append(col)
                continue
            value = col - origin_ns if is_point(c) else col
            cols.append((value.cast(pl.Float64) / thousand).alias(us_name(c)))
        return pl.DataFrame(cols) if cols else df
    exprs = [shown(c, t) for c, t in df.schema.items()]
    if not any(c not in kept and shown_in_us(c) for c in df.columns):
        return df.select(exprs)
    return df.hstack([pl.repeat(1000.0, df.height, dtype=pl.Float64, eager=True).alias(divisor)]).select(exprs)


_DIVISOR = "__thousand"  # the helper column of `display_us` (renamed should a frame hold one)


class Shown:
    """A result's µs display view of one of its ns tables, computed once on first read:
    `copies = Shown("copies_ns")` in a frozen result dataclass with an `origin_ns` field."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.name = source

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> pl.DataFrame:
        if obj is None:
            return self  # type: ignore[return-value]
        value = display_us(getattr(obj, self.source), obj.origin_ns)
        obj.__dict__[self.name] = value  # a frozen dataclass forbids setattr, not its __dict__
        return value
