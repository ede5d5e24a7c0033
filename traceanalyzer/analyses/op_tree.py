"""The nesting tree of CPU ops: the walk up `parent_id` and self time, defined once.

`Trace.ops` carries each op's `parent_id` (the innermost op enclosing it on its thread, see
`links.nest`). Every question about an op's enclosing ops (its chain of names, the namespaced
op a user called, the module around it, inclusive totals) is answered from `ancestors`; every
question about time spent in an op itself, not in the ops nested in it, from `self_time`.
"""

from __future__ import annotations

import sys

import polars as pl

# Deeper than any real trace nests (recursion in Python frames stays far below this).
MAX_DEPTH = 512

ANCESTOR_SCHEMA = {"op_id": pl.Int64, "ancestor_id": pl.Int64, "level": pl.Int32}


def is_row_number(ids: pl.Series) -> bool:
    """Whether ids are 0, 1, ..., n-1 in order (Trace.ops: op_id is the row number)."""
    n = ids.len()
    if n == 0 or ids.null_count():
        return False
    return bool(ids[0] == 0 and ids[n - 1] == n - 1 and ids.is_sorted() and ids.n_unique() == n)


def ancestors(ops: pl.DataFrame, op_ids: pl.Series) -> pl.DataFrame:
    """op_id, ancestor_id, level: every op of `op_ids` (distinct, non-null) with itself at level
    0, its parent at level 1, and so on up to its top-level op.

    When op_id is the row number (every Trace), a level is one gather of `parent_id` at the
    current ancestors' rows; otherwise one join per level."""
    distinct = op_ids.cast(pl.Int64).drop_nulls().unique(maintain_order=True).alias("op_id")
    if distinct.is_empty() or ops.is_empty():
        return pl.DataFrame(schema=ANCESTOR_SCHEMA)
    if is_row_number(ops["op_id"]):
        return _ancestors_by_row(ops["parent_id"].cast(pl.Int64), distinct)
    ids = distinct.to_frame()
    # Int64 throughout (ANCESTOR_SCHEMA), whatever the ids' width in `ops` (the Trace's: Int32)
    parent_of = ops.select(pl.col("op_id", "parent_id").cast(pl.Int64)).rename(
        {"op_id": "ancestor_id", "parent_id": "_up"}
    )
    known = ids.join(ops.select(pl.col("op_id").cast(pl.Int64)), on="op_id", how="semi")
    cur = known.select("op_id", ancestor_id=pl.col("op_id"), level=pl.lit(0, pl.Int32))
    out = [cur]
    for _ in range(MAX_DEPTH):
        cur = (
            cur.join(parent_of, on="ancestor_id", how="inner")
            .filter(pl.col("_up").is_not_null())
            .select("op_id", ancestor_id=pl.col("_up"), level=pl.col("level") + 1)
        )
        if cur.is_empty():
            break
        out.append(cur)
    return pl.concat(out)


def _ancestors_by_row(parent: pl.Series, ids: pl.Series) -> pl.DataFrame:
    """`ancestors` where row i of `parent` is op i's parent_id.

    Each level is a gather and two filters of Series: a frame operation per step planned a
    query of its own (three a level, 320 a DLRM rank, most of the walk's time), and so do a
    `gather` by Int64 and `is_not_null` (~25 µs each); indexing by UInt32 positions and
    comparing with the sentinel n (no parent) do not. The frame is built once at the end. Below `NUMPY_WALK_OPS` ops the walk runs
    in numpy (`_ancestors_numpy`: the same rows in the same order) when something has imported
    numpy already: its import (~0.1 CPU-s) costs more than the walk saves on one trace (a fifth
    of `gaps` on 10 MB, which imports no numpy otherwise)."""
    if parent.len() <= NUMPY_WALK_OPS and "numpy" in sys.modules:
        return _ancestors_numpy(parent, ids)
    n = parent.len()
    up_of = parent.fill_null(n).cast(pl.UInt32)
    ids = ids.filter((ids >= 0) & (ids < n)).cast(pl.UInt32)
    ops, up = [ids], [ids]
    cur_op, cur = ids, ids
    for _ in range(MAX_DEPTH):
        nxt = up_of[cur]
        keep = nxt < n
        if not keep.any():
            break
        cur_op, cur = cur_op.filter(keep), nxt.filter(keep)
        ops.append(cur_op)
        up.append(cur)
    level = pl.concat([pl.Series("level", [i], pl.Int32).new_from_index(0, o.len()) for i, o in enumerate(ops)])
    return pl.DataFrame(
        {"op_id": pl.concat(ops).cast(pl.Int64), "ancestor_id": pl.concat(up).cast(pl.Int64), "level": level}
    )


# A level of the walk in polars is five calls of ~10-20 µs each (a DLRM rank nests 14 deep, and its
# analyses walk several times: ~6 % of the rank); in numpy a level is ~2 µs. Above this many
# ops the polars walk keeps its multithreaded gathers (and numpy's copy of `parent` stays small).
NUMPY_WALK_OPS = 1 << 20


def _ancestors_numpy(parent: pl.Series, ids: pl.Series) -> pl.DataFrame:
    """`_ancestors_by_row` on numpy arrays: a null parent is -1."""
    import numpy as np  # here: a directory's driver imports this module, never walks (~10 MB)

    up_of = parent.fill_null(-1).to_numpy()
    cur = ids.cast(pl.Int64).to_numpy()
    cur = cur[(cur >= 0) & (cur < len(up_of))]
    ops, up, cur_op = [cur], [cur], cur
    for _ in range(MAX_DEPTH):
        nxt = up_of[cur]
        keep = nxt >= 0
        if not keep.any():
            break
        cur_op, cur = cur_op[keep], nxt[keep]
        ops.append(cur_op)
        up.append(cur)
    level = np.repeat(np.arange(len(ops), dtype=np.int32), [len(o) for o in ops])
    return pl.DataFrame(
        {
            "op_id": pl.Series(np.concatenate(ops), dtype=pl.Int64),
            "ancestor_id": pl.Series(np.concatenate(up), dtype=pl.Int64),
            "level": pl.Series(level, dtype=pl.Int32),
        }
    )


def sum_by_row(n: int, at: pl.Series, values: pl.Series) -> pl.Series:
    """Int64: `values` summed by row `at` into n rows, 0 where none (rows outside [0, n) and
    null values left out). In numpy (`add.at`, ~1.5 ms for 300k values) when something has
    imported numpy already, as `_ancestors_by_row`; else a group_by and a scatter (~27 ms)."""
    at = at.cast(pl.Int64)
    keep = at.is_between(0, n - 1) & values.is_not_null()
    at, values = at.filter(keep), values.filter(keep).cast(pl.Int64)
    if "numpy" in sys.modules:
        import numpy as np

        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, at.to_numpy(), values.to_numpy())
        return pl.Series(out, dtype=pl.Int64)
    sums = pl.DataFrame({"at": at.cast(pl.UInt32), "v": values}).group_by("at").agg(pl.col("v").sum())
    return pl.Series([0], dtype=pl.Int64).new_from_index(0, n).scatter(sums["at"], sums["v"])


def chain_sums(parent: pl.Series, ids: pl.Series, values: list[pl.Series]) -> list[pl.Series]:
    """Int64 by op row, one per Series of `values` (a value per id of `ids`: distinct op rows,
    row i of `parent` op i's parent_id): each op's sum of the values of the ids it is or encloses,
    as `sum_by_row` over the pairs of `ancestors` gives it, summed a level at a time up the
    chains without the pairs (a 1 GB trace's 300k launching ops nest 10 deep: +60 MB of pairs)."""
    n = parent.len()
    up_of = parent.fill_null(n).cast(pl.UInt32)
    keep = (ids >= 0) & (ids < n)
    cur, vals = ids.filter(keep).cast(pl.UInt32), [v.filter(keep) for v in values]
    totals = [sum_by_row(n, cur, v) for v in vals]
    for _ in range(MAX_DEPTH):
        nxt = up_of[cur]
        keep = nxt < n
        if not keep.any():
            break
        cur, vals = nxt.filter(keep), [v.filter(keep) for v in vals]
        totals = [t + sum_by_row(n, cur, v) for t, v in zip(totals, vals, strict=True)]
    return totals


def self_time(ops: pl.DataFrame) -> pl.DataFrame:
    """op_id, self_ns: an op's duration less the durations of the ops directly nested in it
    (runtime calls stay in its self time), never below zero."""
    child = ops.filter(pl.col("parent_id").is_not_null()).group_by("parent_id").agg(_child=pl.col("dur_ns").sum())
    return (
        ops.select("op_id", "dur_ns")
        .join(child, left_on="op_id", right_on="parent_id", how="left")
        .select("op_id", self_ns=(pl.col("dur_ns") - pl.col("_child").fill_null(0)).clip(0))
    )
