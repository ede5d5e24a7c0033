"""Vectorised interval relations: nesting on a thread, and the innermost interval that
contains a point. Used to link op -> parent, runtime call -> op, op -> Python frame.

Nesting without a stack: on one thread, sort intervals by (start, end descending); the depth
of interval i is the number of intervals ordered before it minus those that ended by its start.
Its parent is then the latest-starting interval one level up, which under proper nesting
always contains it (intervals of one depth are disjoint).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np

GROUP = ["pid", "tid"]
CLIMB_LEVELS = 256  # the deepest nesting climbed (`innermost_containing`)


def _run_ends(keys: list[str]) -> pl.Expr:
    """True on the last row of each run of equal `keys` (rows sorted by them)."""
    differs = pl.lit(False)
    for k in keys:
        differs = differs | pl.col(k).ne_missing(pl.col(k).shift(-1))
    return differs | (pl.int_range(pl.len()) == pl.len() - 1)


def _run_starts(keys: list[str]) -> pl.Expr:
    """True on the first row of each run of equal `keys` (rows sorted by them)."""
    differs = pl.int_range(pl.len()) == 0
    for k in keys:
        differs = differs | pl.col(k).ne_missing(pl.col(k).shift(1))
    return differs


def _rank_in_run(start: pl.Expr, base: int = 0) -> pl.Expr:
    """The row's position in its run (`base` for the first row), the runs starting where
    `start` holds: `int_range(...).over(group)` without a window's group-by."""
    row = pl.int_range(pl.len(), dtype=pl.Int64)
    return row - pl.when(start).then(row).forward_fill() + base


_STATS = (pl.Series.null_count, pl.Series.min, pl.Series.max)


def _thread_key(frames: list[pl.DataFrame], group: list[str]) -> list[pl.Expr]:
    """The group as one int64 column `_t` where that is exact for every frame (two columns
    without nulls whose ranges multiply to under 2^62: Kineto's pids, tids, devices, streams),
    else the group's own columns. An as-of join `by` two int64 columns row-encodes and hashes
    them: +37 MB at peak for the runtime calls of a 311 MB trace, against none for one."""
    plain = [pl.col(c) for c in group]
    if len(group) != 2:
        return plain
    # a Series' null count, min and max are no polars query (a frame's `select` of them was one,
    # ~0.2 ms: three a DLRM rank)
    picked = [f[group] for f in frames if f.height]  # copies: a Trace's one-valued column stays held once
    rows = [tuple(_STATS[k](p.get_column(c)) for k in range(3) for c in group) for p in picked]
    if not rows or any(any(r[:2]) or None in r for r in rows):
        return plain
    lo_a, lo_b = (min(r[k] for r in rows) for k in (2, 3))
    hi_a, hi_b = (max(r[k] for r in rows) for k in (4, 5))
    span = hi_b - lo_b + 1
    if (hi_a - lo_a + 1) * span >= 1 << 62:
        return plain
    return [((pl.col(group[0]) - lo_a) * span + (pl.col(group[1]) - lo_b)).alias("_t")]


def _ends_by_thread(ordered: pl.DataFrame) -> pl.DataFrame:
    """`_g` (UInt32) and `end_ns` of `ordered`, sorted by both. Where they pack into one int64
    (`_g * span + end - min`, no null end: every trace's), one sort of that key, both columns
    read back from it: a two-column sort row-encodes its keys and gathers (1 GB: 0.13 -> 0.05
    CPU-s for the ops)."""
    lo, hi, g_max, nulls = ordered.select(
        lo=pl.col("end_ns").min(), hi=pl.col("end_ns").max(), g=pl.col("_g").max(), n=pl.col("end_ns").null_count()
    ).row(0)
    span = hi - lo + 1 if lo is not None else 0
    if nulls or not span or (g_max + 1) * span >= 1 << 62:
        return ordered.select("_g", "end_ns").sort("_g", "end_ns", multithreaded=False)
    key = (
        ordered.select(pl.col("_g").cast(pl.Int64) * span + (pl.col("end_ns") - lo))
        .to_series()
        .sort(multithreaded=False)
    )
    return pl.DataFrame([(key // span).cast(pl.UInt32).alias("_g"), (key % span + lo).alias("end_ns")])


# Below this many rows `nest` runs on numpy arrays (`_nest_small`): the frame version is ~20
# polars queries (~2 ms a DLRM rank, of its ~100), whatever the size; above it their passes win.
SMALL_ROWS = 1 << 16


def int64_arrays(columns: list[pl.Series]) -> list[np.ndarray] | None:
    """The columns as int64 numpy arrays, for a small frame's steps on numpy; None (the polars
    steps) without numpy imported (the decoder imports it; its own import costs more than a small
    frame saves), or when a column holds a null, is not an integer or exceeds int64."""
    if "numpy" not in sys.modules:
        return None
    out = []
    for s in columns:
        if not s.dtype.is_integer() or s.null_count() or (s.dtype == pl.UInt64 and s.max() >= 1 << 63):
            return None
        out.append(s.cast(pl.Int64).to_numpy())
    return out


def clean_ints(df: pl.DataFrame, cols: list[str]) -> list[np.ndarray] | None:
    """`int64_arrays` of the columns `cols` of `df`."""
    picked = df[list(dict.fromkeys(cols))]  # a copy: a Trace's one-valued column stays held once
    return int64_arrays([picked.get_column(c) for c in cols])


def _nest_small(df: pl.DataFrame, id_col: str, group: list[str]) -> pl.DataFrame | None:
    """`nest` on numpy arrays, the frame version's steps one for one (the same depth and parent
    for every row, ties and zero-length intervals included); None (the frame version) where a key
    is null or not an integer, or ids repeat."""
    cols = clean_ints(df, [*group, "ts_ns", "end_ns", id_col])
    if cols is None or df.schema[id_col] == pl.UInt64:
        return None
    np = sys.modules["numpy"]
    *keys, ts, end, ids = cols
    n = len(ts)
    # (thread, start, end descending, id): the frame version's sort
    order = np.lexsort((ids, -end, ts, *reversed(keys)))
    keys, ts, end, ids = [k[order] for k in keys], ts[order], end[order], ids[order]
    new_thread = np.zeros(n, dtype=bool)
    new_thread[0] = True
    for k in keys:
        new_thread[1:] |= k[1:] != k[:-1]
    same = ~new_thread[1:] & (ts[1:] == ts[:-1]) & (end[1:] == end[:-1]) & (ids[1:] == ids[:-1])
    if same.any():
        return None  # repeated ids: the frame sort's order of equal rows is its own
    g = np.cumsum(new_thread) - 1
    firsts = np.flatnonzero(new_thread)
    k_in = np.arange(n) - firsts[g]  # the row's place in its thread
    # intervals of the thread ended by the row's start (an end at the start counts)
    ended = np.empty(n, dtype=np.int64)
    for a, b in zip(firsts, [*firsts[1:], n]):
        ended[a:b] = np.searchsorted(np.sort(end[a:b]), ts[a:b], side="right")
    # zero-length rows from this one to the end of its (thread, start) block (`nest`'s `_zfix`)
    zero = (end == ts).astype(np.int64)
    block_last = np.ones(n, dtype=bool)
    block_last[:-1] = new_thread[1:] | (ts[1:] != ts[:-1])
    block_end = np.flatnonzero(block_last)[np.cumsum(np.r_[True, block_last[:-1]]) - 1]
    cz = np.cumsum(zero)
    depth = np.maximum(k_in - ended + cz[block_end] - cz + zero, 0)
    # the parent: the last row (in this order) one level up on the thread starting at or before
    # the row (the frame version's backward as-of join by (thread, depth))
    level = g * (1 << 32) + depth
    by_level = np.argsort(level, kind="stable")  # (level, start), ties in this order
    levels, level_no = np.unique(level, return_inverse=True)
    starts = np.unique(ts)
    width = len(starts)
    sorted_key = (level_no * width + np.searchsorted(starts, ts))[by_level]
    want = np.searchsorted(levels, level - 1)
    want_ok = (depth > 0) & (want < len(levels))
    want_ok[want_ok] = levels[want[want_ok]] == level[want_ok] - 1
    at = np.searchsorted(sorted_key, want * width + np.searchsorted(starts, ts), side="right") - 1
    has = want_ok & (at >= 0)
    has[has] = sorted_key[at[has]] // width == want[has]
    parent = np.where(has, ids[by_level[np.maximum(at, 0)]], 0)
    back = np.empty(n, dtype=np.int64)
    back[order] = np.arange(n)
    return with_nesting(df, id_col, depth[back], parent[back], has[back])


def with_nesting(df: pl.DataFrame, id_col: str, depth: np.ndarray, parent: np.ndarray, has: np.ndarray) -> pl.DataFrame:
    """`df` with `depth` (Int32) and `parent_id` (of `id_col`'s type: `parent` where `has`, else
    null), numpy arrays in the rows' order, as `nest` adds them."""
    n, id_type = len(depth), df.schema[id_col]
    parent_s = pl.Series("parent_id", parent).cast(id_type)
    parent_s = parent_s.zip_with(pl.Series(has), pl.Series([None], dtype=id_type).new_from_index(0, n))
    out = [pl.Series("depth", depth).cast(pl.Int32), parent_s]
    if "depth" in df.columns or "parent_id" in df.columns:
        return df.with_columns(out)
    return df.hstack(out)


def nest(df: pl.DataFrame, id_col: str, group: list[str] = GROUP) -> pl.DataFrame:
    """Add `depth` (0 = top level) and `parent_id` (id of the innermost enclosing interval on
    the same group, null at top level). `df` needs `ts_ns`, `end_ns`, `id_col` and `group`; its
    rows stay in their order (only the key columns are sorted, as copies)."""
    if df.is_empty():
        return df.with_columns(depth=pl.lit(0, pl.Int32), parent_id=pl.lit(None, df.schema[id_col]))
    if df.height < SMALL_ROWS and (small := _nest_small(df, id_col, group)) is not None:
        return small
    if df.height >= SMALL_ROWS:
        from traceanalyzer.links_native import nest_native  # its switch is the decoder's (`load.native`)

        if (done := nest_native(df, id_col, group)) is not None:
            return done
    # The key columns only, sorted (a frame sort: ~10x less CPU than `arg_sort_by` on these
    # keys), with each row's place in `df` (`_r`) to put the answers back. The thread is one
    # small code (`_g`) in place of its columns: every relation below is within a thread, and
    # the rows stay in (thread, start) order throughout (an as-of join `by` a group needs its
    # keys sorted within each group only).
    thread = _thread_key([df], group)
    tkeys = [k.meta.output_name() for k in thread]
    ordered = (
        df.select(*thread, "ts_ns", "end_ns", _id=id_col)
        .with_row_index("_r")
        .sort([*tkeys, "ts_ns", "end_ns", "_id"], descending=[False] * len(tkeys) + [False, True, False])
    )
    ordered = ordered.select("_r", _run_starts(tkeys).cum_sum().cast(pl.UInt32).alias("_g"), "ts_ns", "end_ns", "_id")
    # Zero-length intervals at a start instant sort last there and count as "ended" by it;
    # `_zfix` removes those not ordered before the row (itself included): the zero-length rows
    # from this one to the end of its (thread, start) block, from a reverse running sum (a
    # window `.over([*group, "ts_ns"])` took 2.3 s of a 1 GB trace's 3 s of nesting).
    zero = (pl.col("end_ns") == pl.col("ts_ns")).cast(pl.Int64)
    from_here = zero.reverse().cum_sum().reverse()  # zero-length rows at or after this one
    ordered = ordered.with_columns(
        _k=_rank_in_run(_run_starts(["_g"])),
        _zfix=from_here - pl.when(_run_ends(["_g", "ts_ns"])).then(from_here - zero).backward_fill(),
    )
    # several intervals ending at one instant: keep the count after all of them (the last row
    # of each run of equal (thread, end) once sorted so)
    ends = (
        _ends_by_thread(ordered)
        .with_columns(_ended=_rank_in_run(_run_starts(["_g"]), base=1))
        .filter(_run_ends(["_g", "end_ns"]))
    )
    depth = (
        ordered.select("_g", "ts_ns")
        .join_asof(ends, left_on="ts_ns", right_on="end_ns", by="_g", strategy="backward", check_sortedness=False)
        .get_column("_ended")
        .fill_null(0)
    )
    del ends
    ordered = ordered.select(
        "_r", "_g", "ts_ns", "_id", depth=(pl.col("_k") - depth + pl.col("_zfix")).clip(0).cast(pl.Int32)
    )
    # Several intervals at one (thread, start): the innermost of those that are shallower wins.
    # Thread and depth as one int64 key (depth < 2^31, so `- 1` at depth 0 names no level): an
    # as-of join `by` two columns row-encodes them (+31 MB for the ops of a 311 MB trace).
    level = pl.col("_g").cast(pl.Int64) * (1 << 32) + pl.col("depth")
    parent = (
        ordered.select("ts_ns", _level=level - 1)
        .join_asof(
            ordered.select("ts_ns", _level=level, parent_id="_id"),
            on="ts_ns",
            by="_level",
            strategy="backward",
            check_sortedness=False,
        )
        .get_column("parent_id")
    )
    # back into the rows' own order
    back = ordered.get_column("_r").arg_sort()
    return df.with_columns(
        # indexed by positions (the same take as `gather`, no polars query)
        ordered.get_column("depth")[back],
        parent[back].alias("parent_id").cast(df.schema[id_col]),
    )


def _innermost_small(
    points: pl.DataFrame, intervals: pl.DataFrame, id_col: str, out_col: str, group: list[str], point_end: str
) -> pl.DataFrame | None:
    """`innermost_containing` on numpy arrays, its steps one for one (the same id for every
    point); None (the frame version) where a key or time is null or not an integer, or ids
    repeat."""
    if (np := sys.modules.get("numpy")) is None:  # its own import costs more than it saves here
        return None
    deep = ["depth"] if "depth" in intervals.columns else []
    pcols = clean_ints(points, [*group, "ts_ns", point_end])
    icols = clean_ints(intervals, [*group, "ts_ns", "end_ns", *deep, id_col])
    parent_s = intervals[["parent_id"]].get_column("parent_id")
    if pcols is None or icols is None or not parent_s.dtype.is_integer() or intervals.schema[id_col] == pl.UInt64:
        return None
    *pkeys, pts, pend = pcols
    *ikeys, its, iend = icols[: len(group) + 2]
    depth = icols[len(group) + 2] if deep else None
    ids = icols[-1]
    by_id = np.argsort(ids, kind="stable")
    ids_sorted = ids[by_id]
    if len(ids_sorted) > 1 and not (ids_sorted[1:] > ids_sorted[:-1]).all():
        return None  # repeated ids
    # the thread of each row as one dense code over both sides
    both = [np.concatenate([p, i]) for p, i in zip(pkeys, ikeys)]
    code = np.zeros(len(pts) + len(its), dtype=np.int64)
    for k in both:
        values, k_no = np.unique(k, return_inverse=True)
        code = code * len(values) + k_no.reshape(-1)
    _, code = np.unique(code, return_inverse=True)
    code = code.reshape(-1)
    pcode, icode = code[: len(pts)], code[len(pts) :]
    # intervals by (thread, start, end descending, depth, id): among those starting at one
    # instant the innermost comes last, as the frame version sorts them
    sort_keys = [ids, *([depth] if deep else []), -iend, its, icode]
    order = np.lexsort(sort_keys)
    starts = np.unique(np.concatenate([pts, its]))
    width = len(starts)
    ikey = icode[order] * width + np.searchsorted(starts, its[order])
    at = np.searchsorted(ikey, pcode * width + np.searchsorted(starts, pts), side="right") - 1
    has = at >= 0
    has[has] = ikey[at[has]] // width == pcode[has]
    row = np.flatnonzero(has)
    cand = ids[order[at[has]]]
    ends = iend[by_id]
    parents = parent_s.fill_null(0).cast(pl.Int64).to_numpy()[by_id]
    parent_known = parent_s.is_not_null().to_numpy()[by_id]
    found_row, found_id = [], []
    for _ in range(CLIMB_LEVELS):
        pos = np.minimum(np.searchsorted(ids_sorted, cand, side="left"), len(ids_sorted) - 1)
        found = ids_sorted[pos] == cand  # a dangling parent drops out
        ok = found & (ends[pos] >= pend[row])
        found_row.append(row[ok])
        found_id.append(cand[ok])
        climb = found & ~ok & parent_known[pos]
        row, cand = row[climb], parents[pos[climb]]
        if not len(cand):
            break
    id_type = intervals.schema[id_col]
    value = np.zeros(len(pts), dtype=np.int64)
    known = np.zeros(len(pts), dtype=bool)
    value[np.concatenate(found_row)] = np.concatenate(found_id)
    known[np.concatenate(found_row)] = True
    out = pl.Series(out_col, value).cast(id_type)
    out = out.zip_with(pl.Series(known), pl.Series([None], dtype=id_type).new_from_index(0, len(pts)))
    return points.with_columns(out) if out_col in points.columns else points.hstack([out])


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
    if points.height + intervals.height < SMALL_ROWS:
        small = _innermost_small(points, intervals, id_col, out_col, group, point_end)
    else:
        from traceanalyzer.links_native import innermost_native

        small = innermost_native(points, intervals, id_col, out_col, group, point_end)
    if small is not None:
        return small
    # Among intervals starting at one instant the innermost (shortest; of equal ones, the
    # deepest) comes last, so that the backward as-of join picks it.
    deep = ["depth"] if "depth" in intervals.columns else []
    key = _thread_key([points, intervals], group)
    by = [k.meta.output_name() for k in key]
    iv = (
        intervals.select(*key, "ts_ns", "end_ns", *deep, _cand=id_col)
        .sort(["ts_ns", "end_ns", *deep, "_cand"], descending=[False, True] + [False] * (len(deep) + 1))
        .select(*by, "ts_ns", "_cand")
    )
    # Climbing looks intervals up by id: a binary search in the ids sorted once, then gathers
    # (a hash join against all the intervals per climb cost ~0.08 s each on a 1 GB trace,
    # however few points were left). Ids already in order (op_id, frame_id: row numbers) are
    # searched where they are, without a copy.
    if intervals[id_col].is_sorted():
        ids, ends, parents = intervals[id_col], intervals["end_ns"], intervals["parent_id"]
    else:
        by_id = intervals.select(pl.col(id_col).arg_sort()).to_series()
        ids, ends, parents = (intervals[c][by_id] for c in (id_col, "end_ns", "parent_id"))  # takes, no query
    # The points sorted by start, their keys only; what climbing needs is looked up by row.
    pts = points.select(*key, "ts_ns").with_row_index("_row").sort("ts_ns")
    cand = (
        pts.join_asof(iv, on="ts_ns", by=by, strategy="backward", check_sortedness=False)
        .select("_row", "_cand")
        .filter(pl.col("_cand").is_not_null())
    )
    del pts, iv
    point_ends = points[point_end]
    done = []
    # A climb indexes and filters Series: no polars query but the search (`gather`, `clip`,
    # `is_not_null`, a frame's `filter`: ~25 µs each). `x == x` is false at a null.
    row, cand = cand.get_column("_row"), cand.get_column("_cand")
    for _ in range(CLIMB_LEVELS):
        pos = ids.search_sorted(cand, side="left")
        pos = pos - (pos >= ids.len()).cast(pos.dtype)
        hit, cend, cparent = ids[pos], ends[pos], parents[pos]
        # an id not among the intervals (a dangling parent) drops out, as the join used to do
        found = hit == cand
        ok = found & (cend >= point_ends[row])
        done.append(pl.DataFrame([row.filter(ok), cand.filter(ok)]))
        climb = found & ~ok & (cparent == cparent)
        row, cand = row.filter(climb), cparent.filter(climb).alias("_cand")
        if cand.is_empty():
            break
    # Scatter the ids into the points' own order: the wide table is neither sorted nor joined.
    found = pl.concat(done)
    out = pl.Series(out_col, [], dtype=intervals.schema[id_col]).extend_constant(None, points.height)
    if found.height:
        out = out.scatter(found["_row"], found["_cand"])
    return points.with_columns(out)
