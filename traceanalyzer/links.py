"""Vectorised interval relations: nesting on a thread, and the innermost interval that
contains a point. Used to link op -> parent, runtime call -> op, op -> Python frame.

Nesting without a stack: on one thread, sort intervals by (start, end descending); the depth
of interval i is the number of intervals ordered before it minus those that ended by its start.
Its parent is then the latest-starting interval one level up, which under proper nesting
always contains it (intervals of one depth are disjoint).
"""

from __future__ import annotations

import polars as pl

GROUP = ["pid", "tid"]
_MAX_CLIMB = 256


def nest(df: pl.DataFrame, id_col: str, group: list[str] = GROUP) -> pl.DataFrame:
    """Add `depth` (0 = top level) and `parent_id` (id of the innermost enclosing interval on
    the same group, null at top level). `df` needs `ts_ns`, `end_ns`, `id_col` and `group`."""
    if df.is_empty():
        return df.with_columns(depth=pl.lit(0, pl.Int32), parent_id=pl.lit(None, df.schema[id_col]))
    ordered = df.sort([*group, "ts_ns", "end_ns", id_col], descending=[False] * len(group) + [False, True, False])
    # Zero-length intervals at a start instant sort last there and count as "ended" by it;
    # `_zfix` removes those not ordered before the row (itself included).
    zero = (pl.col("end_ns") == pl.col("ts_ns")).cast(pl.Int64)
    ordered = ordered.with_columns(
        _k=pl.int_range(pl.len()).over(group),
        _zfix=(zero.sum() - (zero.cum_sum() - zero)).over([*group, "ts_ns"]),
    )
    ends = (
        ordered.select([*group, "end_ns"])
        .sort("end_ns")
        .with_columns(_ended=pl.int_range(1, pl.len() + 1).over(group))
        # several intervals ending at one instant: keep the count after all of them
        .group_by([*group, "end_ns"])
        .agg(pl.col("_ended").max())
        .sort("end_ns")
    )
    with_depth = (
        ordered.sort("ts_ns")
        .join_asof(
            ends, left_on="ts_ns", right_on="end_ns", by=group, strategy="backward", suffix="_e", check_sortedness=False
        )
        .with_columns(depth=(pl.col("_k") - pl.col("_ended").fill_null(0) + pl.col("_zfix")).clip(0).cast(pl.Int32))
        .drop("_ended", "end_ns_e", "_k", "_zfix")
    )
    parents = with_depth.select(*group, "ts_ns", pl.col("depth").alias("_pdepth"), pl.col(id_col).alias("parent_id"))
    # Several intervals at one (thread, start): the innermost of those that are shallower wins.
    return (
        with_depth.with_columns(_pdepth=pl.col("depth") - 1)
        .sort("ts_ns")
        .join_asof(
            parents.sort("ts_ns"), on="ts_ns", by=[*group, "_pdepth"], strategy="backward", check_sortedness=False
        )
        .drop("_pdepth")
    )


def innermost_containing(
    points: pl.DataFrame,
    intervals: pl.DataFrame,
    id_col: str,
    out_col: str,
    group: list[str] = GROUP,
    point_end: str = "end_ns",
) -> pl.DataFrame:
    """For each row of `points` (`ts_ns`, `point_end`, group), the id of the innermost row of
    `intervals` (`ts_ns`, `end_ns`, `id_col`, `parent_id`, group) containing [ts, point_end].

    Start from the latest interval that starts at or before the point; while it ended too early,
    climb to its parent. Each climb is one vectorised step; nesting depth bounds the steps.
    """
    if points.is_empty() or intervals.is_empty():
        return points.with_columns(pl.lit(None, intervals.schema.get(id_col, pl.Int64)).alias(out_col))
    iv = intervals.select(*group, "ts_ns", "end_ns", id_col, "parent_id").sort(
        [*group, "ts_ns", "end_ns"], descending=[False] * len(group) + [False, True]
    )
    lookup = iv.select(
        pl.col(id_col).alias("_cand"), pl.col("end_ns").alias("_cend"), pl.col("parent_id").alias("_cparent")
    )
    pts = points.select(*group, "ts_ns", pl.col(point_end).alias("_pend")).with_row_index("_row").sort("ts_ns")
    cand = pts.join_asof(
        iv.sort("ts_ns").select(*group, "ts_ns", pl.col(id_col).alias("_cand")),
        on="ts_ns",
        by=group,
        strategy="backward",
        check_sortedness=False,
    )
    done = []
    for _ in range(_MAX_CLIMB):
        cand = cand.join(lookup, on="_cand", how="left")
        ok = pl.col("_cand").is_null() | (pl.col("_cend") >= pl.col("_pend"))
        done.append(cand.filter(ok).select("_row", "_cand"))
        cand = cand.filter(~ok).select("_row", *group, "ts_ns", "_pend", pl.col("_cparent").alias("_cand"))
        if cand.is_empty():
            break
    # Scatter the ids into the points' own order: the wide table is neither sorted nor joined.
    found = pl.concat(done).filter(pl.col("_cand").is_not_null())
    out = pl.Series(out_col, [None] * points.height, dtype=iv.schema[id_col])
    if found.height:
        out = out.scatter(found["_row"], found["_cand"])
    return points.with_columns(out)
