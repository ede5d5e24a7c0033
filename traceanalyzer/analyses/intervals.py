"""Interval arithmetic on polars frames: union of busy intervals, and covered time of a set of
intervals inside query windows, both without Python loops over events."""

from __future__ import annotations

import polars as pl


def reach(end: str, by: list[str] | None = None) -> pl.Expr:
    """The furthest end among the earlier rows of each group, rows sorted by start (null on a
    group's first row): the one sweep behind merging intervals, finding the outermost ones and
    overlaps. A row starting after it opens a new run; one starting before it overlaps an
    earlier row; one ending by it lies inside an earlier one."""
    furthest = pl.col(end).cum_max().shift(1)
    return furthest.over(by) if by else furthest


def run_id(start: str, end: str, by: list[str], join: int | float = 0) -> pl.Expr:
    """A number per run of overlapping intervals (rows sorted by `by`, then start): a row that
    starts more than `join` after every earlier row of its group has ended opens a new run."""
    furthest = reach(end)  # per group: the whole expression runs inside one window
    return (furthest.is_null() | (pl.col(start) > furthest + join)).cast(pl.Int64).cum_sum().over(by)


def merge(df: pl.DataFrame, by: list[str], start: str = "ts_ns", end: str = "end_ns") -> pl.DataFrame:
    """Union of possibly overlapping intervals per group -> disjoint (by..., start_ns, end_ns)."""
    if df.is_empty():
        return pl.DataFrame(schema={**{b: df.schema[b] for b in by}, "start_ns": pl.Int64, "end_ns": pl.Int64})
    s = df.select(*by, pl.col(start).alias("start_ns"), pl.col(end).alias("end_ns")).sort([*by, "start_ns"])
    s = s.with_columns(_grp=run_id("start_ns", "end_ns", by))
    return (
        s.group_by([*by, "_grp"])
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_grp")
        .sort([*by, "start_ns"])
    )


def coverage_index(disjoint: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Prefix sums over disjoint sorted intervals, for `covered`."""
    return disjoint.sort([*by, "start_ns"]).with_columns(
        _before=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().shift(1, fill_value=0).over(by)
    )


def _covered_until(q: pl.DataFrame, index: pl.DataFrame, at: str, by: list[str], out: str) -> pl.DataFrame:
    """Covered time from -inf to q[at], per row of q."""
    j = q.sort(at).join_asof(
        index.select(*by, pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"), "_before").sort("_s"),
        left_on=at,
        right_on="_s",
        by=by,
        strategy="backward",
        check_sortedness=False,
    )
    return j.with_columns(
        pl.when(pl.col("_s").is_null())
        .then(0)
        .otherwise(pl.col("_before") + pl.min_horizontal(pl.col(at), pl.col("_e")) - pl.col("_s"))
        .alias(out)
    ).drop("_s", "_e", "_before")


def covered(q: pl.DataFrame, index: pl.DataFrame, by: list[str], a: str, b: str, out: str) -> pl.DataFrame:
    """Add `out`: time covered by the indexed intervals inside [q[a], q[b]] (same `by` keys)."""
    if index.is_empty() or q.is_empty():
        return q.with_columns(pl.lit(0, pl.Int64).alias(out))
    q = _covered_until(q, index, b, by, "_cb")
    q = _covered_until(q, index, a, by, "_ca")
    return q.with_columns((pl.col("_cb") - pl.col("_ca")).clip(0).alias(out)).drop("_cb", "_ca")
