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


def _run_ends(keys: list[str]) -> pl.Expr:
    """True on the last row of each run of equal `keys` (rows sorted by them)."""
    differs = pl.lit(False)
    for k in keys:
        differs = differs | pl.col(k).ne_missing(pl.col(k).shift(-1))
    return differs | (pl.int_range(pl.len()) == pl.len() - 1)


def nest(df: pl.DataFrame, id_col: str, group: list[str] = GROUP) -> pl.DataFrame:
    """Add `depth` (0 = top level) and `parent_id` (id of the innermost enclosing interval on
    the same group, null at top level). `df` needs `ts_ns`, `end_ns`, `id_col` and `group`."""
    if df.is_empty():
        return df.with_columns(depth=pl.lit(0, pl.Int32), parent_id=pl.lit(None, df.schema[id_col]))
    ordered = df.sort([*group, "ts_ns", "end_ns", id_col], descending=[False] * len(group) + [False, True, False])
    # Zero-length intervals at a start instant sort last there and count as "ended" by it;
    # `_zfix` removes those not ordered before the row (itself included): the zero-length rows
    # from this one to the end of its (group, start) block. Computed from a reverse running
    # sum over the sorted rows: a window `.over([*group, "ts_ns"])` has one group per start
    # instant and took 2.3 s of a 1 GB trace's 3 s of nesting.
    zero = (pl.col("end_ns") == pl.col("ts_ns")).cast(pl.Int64)
    from_here = zero.reverse().cum_sum().reverse()  # zero-length rows at or after this one
    last = _run_ends([*group, "ts_ns"])
    ordered = ordered.with_columns(
        _k=pl.int_range(pl.len()).over(group),
        _zfix=from_here - pl.when(last).then(from_here - zero).backward_fill(),
    )
    # several intervals ending at one instant: keep the count after all of them (the last row
    # of each run of equal (group, end) once sorted so)
    ends = (
        ordered.select([*group, "end_ns"])
        .sort([*group, "end_ns"])
        .with_columns(_ended=pl.int_range(1, pl.len() + 1).over(group))
        .filter(_run_ends([*group, "end_ns"]))
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
    `intervals` (`ts_ns`, `end_ns`, `id_col` (unique), `parent_id`, group; `depth` if known)
    containing [ts, point_end].

    Start from the latest interval that starts at or before the point; while it ended too early,
    climb to its parent. Each climb is one vectorised step; nesting depth bounds the steps.
    """
    if points.is_empty() or intervals.is_empty():
        return points.with_columns(pl.lit(None, intervals.schema.get(id_col, pl.Int64)).alias(out_col))
    # Among intervals starting at one instant the innermost (shortest; of equal ones, the
    # deepest) comes last, so that the backward as-of join picks it. (The sort used to leave
    # equal intervals in any order: a call inside an op and its child of the same range was
    # given either.)
    deep = ["depth"] if "depth" in intervals.columns else []
    iv = intervals.select(*group, "ts_ns", "end_ns", *deep, id_col, "parent_id").sort(
        ["ts_ns", "end_ns", *deep, id_col], descending=[False, True] + [False] * (len(deep) + 1)
    )
    # Climbing looks intervals up by id: a binary search in the ids sorted once, then gathers.
    # (A hash join against all the intervals per climb cost ~0.08 s each on a 1 GB trace,
    # however few points were left.)
    lookup = iv.select(
        pl.col(id_col).alias("_cand"), pl.col("end_ns").alias("_cend"), pl.col("parent_id").alias("_cparent")
    ).sort("_cand")
    ids, ends, parents = lookup["_cand"], lookup["_cend"], lookup["_cparent"]
    pts = points.select(*group, "ts_ns", pl.col(point_end).alias("_pend")).with_row_index("_row").sort("ts_ns")
    cand = pts.join_asof(
        iv.select(*group, "ts_ns", pl.col(id_col).alias("_cand")),
        on="ts_ns",
        by=group,
        strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("_cand").is_not_null())
    done = []
    for _ in range(_MAX_CLIMB):
        pos = ids.search_sorted(cand["_cand"], side="left").clip(upper_bound=max(ids.len() - 1, 0))
        cand = cand.with_columns(_hit=ids.gather(pos), _cend=ends.gather(pos), _cparent=parents.gather(pos))
        # an id not among the intervals (a dangling parent) drops out, as the join used to do
        cand = cand.filter(pl.col("_hit") == pl.col("_cand"))
        ok = pl.col("_cend") >= pl.col("_pend")
        done.append(cand.filter(ok).select("_row", "_cand"))
        cand = cand.filter(~ok & pl.col("_cparent").is_not_null()).select(
            "_row", *group, "ts_ns", "_pend", pl.col("_cparent").alias("_cand")
        )
        if cand.is_empty():
            break
    # Scatter the ids into the points' own order: the wide table is neither sorted nor joined.
    found = pl.concat(done)
    out = pl.Series(out_col, [], dtype=iv.schema[id_col]).extend_constant(None, points.height)
    if found.height:
        out = out.scatter(found["_row"], found["_cand"])
    return points.with_columns(out)
