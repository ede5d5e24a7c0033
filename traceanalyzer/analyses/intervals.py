"""Interval arithmetic on polars frames: union of busy intervals, and covered time of a set of
intervals inside query windows, both without Python loops over events."""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.analyses.arrays import asof_covered, band_reach, int_order, overlap_pairs


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
    cols = [*(df.get_column(b) for b in by), df.get_column(start).alias("start_ns"), df.get_column(end).alias("end_ns")]
    order = int_order(cols[:-1]) if df.height < SMALL_ROWS else None  # equal keys: one union whatever their order
    s = pl.DataFrame([c[order] for c in cols]) if order is not None else pl.DataFrame(cols).sort([*by, "start_ns"])
    return merge_sorted(s, by)


def merge_sorted(s: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`merge` of (by..., start_ns, end_ns) already sorted by `by`, then start_ns (a filter of
    such a frame keeps it sorted): the union of several layers of intervals needs one sort."""
    if s.is_empty():
        return s.select(*by, "start_ns", "end_ns")
    fast = _merge_sweep(s, by)
    if fast is not None:
        return fast
    # runs are contiguous in the sorted rows, so the groups come out sorted: no sort after the group-by
    return (
        s.select(*by, "start_ns", "end_ns")
        .with_columns(_grp=run_id("start_ns", "end_ns", by))
        .group_by([*by, "_grp"], maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_grp")
    )


# Below this many rows a frame is filtered or sorted in Series (or numpy) calls, no query (a
# frame's `filter` or `sort` is one, ~30-60 µs whatever its size; a DLRM rank's gaps ran ~550);
# above it the query's one pass over all columns (and its threads) is kept. The same rows either way.
SMALL_ROWS = 1 << 16


def collected(lf: pl.LazyFrame) -> pl.DataFrame:
    """A chain of frame calls written as one lazy query on polars' in-memory engine, as the eager
    calls ran: one query to plan and run where each call was one (~30-60 µs on a small frame)."""
    return lf.collect(engine="in-memory")


def positions(mask: pl.Series) -> pl.Series:
    """The UInt32 row numbers where `mask` (no nulls) is True: `arg_true` without its query."""
    return pl.int_range(0, mask.len(), dtype=pl.UInt32, eager=True).filter(mask)


def filled(value: int, n: int, dtype: pl.DataType = pl.Int64) -> pl.Series:
    """`n` copies of `value` (`pl.zeros`/`pl.repeat` without their query)."""
    return pl.Series([value], dtype=dtype).new_from_index(0, n)


def at_least(s: pl.Series, lower: int) -> pl.Series:
    """`s.clip(lower)` for a Series without nulls, without the query `clip` is."""
    return s.zip_with(s >= lower, filled(lower, s.len(), s.dtype))


def at_most(s: pl.Series, upper: int) -> pl.Series:
    """`s.clip(upper_bound=upper)` for a Series without nulls, without its query."""
    return s.zip_with(s <= upper, filled(upper, s.len(), s.dtype))


def filter_rows(df: pl.DataFrame, mask: pl.Series) -> pl.DataFrame:
    """`df.filter(mask)` (mask: a Boolean Series, null counted as False): column by column below
    SMALL_ROWS rows, else the frame's one query."""
    if df.height >= SMALL_ROWS or not df.width:
        return df.filter(mask)
    if mask.null_count():
        mask = mask.fill_null(False)
    return pl.DataFrame([c.filter(mask) for c in series_of(df, df.columns)])


def picked(df: pl.DataFrame, names: dict[str, str]) -> pl.DataFrame:
    """`df.select(pl.col(c).alias(out) for c, out in names.items())`: a frame of Series below
    SMALL_ROWS rows (no query), else the select (which keeps a one-valued column held once: a
    Series of it is 8 bytes a row, 32 MB for the op table of a 1 GB trace)."""
    if df.height >= SMALL_ROWS:
        return df.select(pl.col(c).alias(out) for c, out in names.items())
    return pl.DataFrame([c.alias(out) for c, out in zip(series_of(df, list(names)), names.values())])


def series_of(df: pl.DataFrame, names: list[str]) -> list[pl.Series]:
    """The columns `names` of `df` as Series, without a query: taken from a frame of those
    columns picked by name, so that a one-valued column of a Trace's table (`trace.one_valued`,
    held as one value) is made in full in that copy only, never stored so in the Trace."""
    picked = df[names]
    return [picked.get_column(c) for c in names]


def key_starts(df: pl.DataFrame, by: list[str]) -> pl.Series:
    """Per row of a non-empty `df`: whether its `by` keys differ from the row before's (True on
    the first row): where each group starts when `df` is sorted by `by`. Slices compared, as
    `ne_missing` where nulls are: `shift` is a polars query (~25 µs), a slice and `!=` are not."""
    n, rest = df.height, pl.Series("first", [False]).new_from_index(0, df.height - 1)
    for col in (df.get_column(b) for b in by):
        after, before = col.slice(1), col.slice(0, n - 1)
        rest = rest | (after.ne_missing(before) if col.null_count() else after != before)
    return pl.Series("first", [True]).append(rest)


def _merge_sweep(s: pl.DataFrame, by: list[str]) -> pl.DataFrame | None:
    """`merge_sorted` as one sweep over the whole frame, no window or group-by: each group's
    times are shifted into a band of their own (group number x span), so that one running
    maximum of the ends never reaches from one group into the next. A run starts where its group
    starts or where a start passes every earlier end; it ends at the running maximum on its last
    row. None (the group-by) for null times, an end before its start, or bands past int64.
    Series operations polars runs as no query of its own (a DLRM rank merges a dozen frames of a
    few hundred rows: planning was most of it); helper columns let go once used (1 GB traces)."""
    start, end = s.get_column("start_ns"), s.get_column("end_ns")
    if start.null_count() or end.null_count() or (end < start).any():
        return None
    lo, hi = start.min(), end.max()
    first = key_starts(s, by)
    groups = int(first.sum())
    span = int(hi) - int(lo) + 1
    if groups * span >= 1 << 62:
        return None
    band, reach = band_reach(first, end, span, int(lo))
    n = s.height  # each row against the running maximum one row up: slices, not `shift` (a query)
    new = first | pl.Series([True]).append((start.slice(1) + band.slice(1)) > reach.slice(0, n - 1))
    del first
    last = new.slice(1).append(pl.Series([True]))
    ends = (reach - band).filter(last).alias("end_ns")
    del reach, band, last
    return pl.DataFrame([*(s.get_column(b).filter(new) for b in by), start.filter(new), ends])


def coverage_index(disjoint: pl.DataFrame, by: list[str], presorted: bool = False) -> pl.DataFrame:
    """Prefix sums over disjoint sorted intervals, for `covered` (`presorted`: `disjoint` is
    sorted by `by`, then start_ns already, as `merge` returns it)."""
    order = None if presorted or disjoint.height >= SMALL_ROWS else int_order(series_of(disjoint, [*by, "start_ns"]))
    ordered = disjoint if presorted else disjoint[order] if order is not None else disjoint.sort([*by, "start_ns"])
    before = (pl.col("end_ns") - pl.col("start_ns")).cum_sum().shift(1, fill_value=0).over(by)
    return d if (d := _before_small(ordered, by)) is not None else ordered.with_columns(_before=before)


def _before_small(ordered: pl.DataFrame, by: list[str]) -> pl.DataFrame | None:
    """`coverage_index`'s `_before` in Series calls (its window was a query); None where a time is null."""
    d = ordered.get_column("end_ns") - ordered.get_column("start_ns") if ordered.height < SMALL_ROWS else None
    if d is None or not d.len() or d.null_count() or d.dtype != pl.Int64 or "_before" in ordered.columns:
        return None
    first = key_starts(ordered, by)
    if (np := sys.modules.get("numpy")) is not None:  # the two running sums on numpy (a query each)
        b, f = np.cumsum(d.to_numpy()) - d.to_numpy(), first.to_numpy()
        return ordered.hstack([pl.Series("_before", b - b[f][np.cumsum(f) - 1])])
    before = d.cum_sum() - d  # the sum of the rows above, then less that at the group's first row
    return ordered.hstack([(before - before.filter(first)[first.cast(pl.UInt32).cum_sum() - 1]).alias("_before")])


def _covered_until(q: pl.DataFrame, index: pl.DataFrame, at: str, by: list[str], out: str) -> pl.DataFrame:
    """Covered time from -inf to q[at], per row of q (sorted by q[at]): the sort and the as-of join
    are the queries, the rest Series calls (a `with_columns`, `drop`, `is_null` were one each)."""
    # sorted by `by`, then start (coverage_index): what an as-of join by keys needs
    if q.height + index.height < SMALL_ROWS and (until := asof_covered(q := q.sort(at), index, at, by)) is not None:
        return q.hstack([until.alias(out)])  # the as-of join by numpy's search (no query)
    names = {"start_ns": "_s", "end_ns": "_e", "_before": "_before"}
    ix = pl.DataFrame([*(index.get_column(b) for b in by), *(index.get_column(c).alias(n) for c, n in names.items())])
    j = q.sort(at).join_asof(ix, left_on=at, right_on="_s", by=by, strategy="backward", check_sortedness=False)
    t, s, e = j.get_column(at), j.get_column("_s"), j.get_column("_e")
    until = j.get_column("_before") + t.zip_with(t < e, e) - s  # null where no interval starts by q[at]
    until = until.fill_null(0) if until.null_count() else until
    return pl.DataFrame([*(c for c in j.get_columns() if c.name not in names.values()), until.alias(out)])


def covered(q: pl.DataFrame, index: pl.DataFrame, by: list[str], a: str, b: str, out: str) -> pl.DataFrame:
    """Add `out`: time covered by the indexed intervals inside [q[a], q[b]] (same `by` keys)."""
    if index.is_empty() or q.is_empty():
        return q.with_columns(pl.lit(0, pl.Int64).alias(out))
    q = _covered_until(q, index, b, by, "_cb")
    q = _covered_until(q, index, a, by, "_ca")
    d = q.get_column("_cb") - q.get_column("_ca")  # clipped at 0 by `zip_with`: `clip` is a query
    d = d.zip_with(d > 0, pl.Series([0], dtype=d.dtype).new_from_index(0, d.len())).alias(out)
    return pl.DataFrame([*(c for c in q.get_columns() if c.name not in ("_cb", "_ca")), d])


def overlap_join(
    left: pl.DataFrame, right: pl.DataFrame, by: list[str], left_span: tuple[str, str], right_span: tuple[str, str],
    right_by: list[str] | None = None,
) -> pl.DataFrame:  # fmt: skip
    """Pairs of a `left` and a `right` row with equal `by` keys (`right_by` on the right; none:
    all pairs) whose intervals overlap (left start < right end and left end > right start): the
    inner join, its columns those of both frames (their names must differ), in no particular order.

    A sorted sweep, in memory the size of the answer: a pair either has the right interval
    starting inside the left one (a range of the right rows sorted by start, found by two
    `join_asof`s per left row), or has the left one starting strictly inside the right one (a
    range of the left rows sorted by start, two `join_asof`s per right row). Never a cross join,
    and never `join_where`, whose interval join holds ~160 bytes per row of the larger side
    (48 MB for 60 windows against 300 k ops). Rows with a null key or time match nothing."""
    right_by = right_by or by
    (ls, le), (rs, re_) = left_span, right_span
    if left.is_empty() or right.is_empty():
        return pl.concat([left.clear(), right.clear()], how="horizontal")
    if by and left.height * right.height <= SMALL_PAIRS:
        return _overlap_join_small(left, right, by, right_by, left_span, right_span)
    if not by:
        left, right = left.with_columns(_k0=pl.lit(0)), right.with_columns(_k1=pl.lit(0))
        by, right_by = ["_k0"], ["_k1"]
    lt = _valid(left, [*by, ls, le]).sort([*by, ls]).with_row_index("_li")
    right = _valid(right, [*right_by, rs, re_])
    if lt.height * 8 < right.height:
        right = _near(right, right_by, right_span, lt, by, left_span)
    rt = right.sort([*right_by, rs])
    cast = [pl.col(c).cast(lt.schema[b]) for b, c in zip(by, right_by) if rt.schema[c] != lt.schema[b]]
    rt = (rt.with_columns(cast) if cast else rt).with_row_index("_ri")
    idx = {"_li": pl.UInt32, "_ri": pl.UInt32}

    def ranges(q: pl.DataFrame, qkeys: list[str], lo: pl.Expr, hi: pl.Expr, t: pl.DataFrame, tkeys: list[str], at: str):
        """(q's index, t's index) for the rows of t (sorted by key, `at`) with lo <= t[at] <= hi."""
        own, other = q.columns[0], t.columns[0]
        bounds = q.select(own, *qkeys, _lo=lo, _hi=hi)
        # An as-of join by keys needs each key's rows sorted, not the whole column: `t` is
        # sorted by key, then `at`, and so is `_lo` (a start, or a start + 1) within q's keys.
        found = t.select(other, *tkeys, at)
        kw = {"by_left": qkeys, "by_right": tkeys, "right_on": at, "check_sortedness": False}
        first = bounds.join_asof(found.rename({other: "_first"}), left_on="_lo", strategy="forward", **kw).drop(at)
        both = first.sort("_hi").join_asof(found.rename({other: "_last"}), left_on="_hi", strategy="backward", **kw)
        return (
            both.filter(pl.col("_first") <= pl.col("_last"))
            .select(own, pl.int_ranges("_first", pl.col("_last") + 1, dtype=pl.UInt32).alias(other))
            .explode(other)
        )

    pairs = _banded_pairs(lt, rt, by, right_by, left_span, right_span)
    if pairs is None:
        # right starts in [left start, left end): right end > left start unless both are the same instant
        starts_inside = ranges(lt, by, pl.col(ls), pl.col(le) - 1, rt, right_by, rs)
        # left starts in (right start, right end)
        opens_over = ranges(rt, right_by, pl.col(rs) + 1, pl.col(re_) - 1, lt, by, ls)
        pairs = pl.concat([starts_inside.select(list(idx)).cast(idx), opens_over.select(list(idx)).cast(idx)])
    # rows gathered by UInt32 positions and the helpers left out as Series: the filter is the one query
    gathered = [*lt[pairs["_li"]].get_columns(), *rt[pairs["_ri"]].get_columns()]
    out = pl.DataFrame([c for c in gathered if c.name not in ("_li", "_ri", "_k0", "_k1")])
    return filter_rows(out, out.get_column(re_) > out.get_column(ls))


# At most this many candidate pairs (rows of `left` x rows of `right`), `overlap_join` is an
# equi-join on the keys, then the overlap test on the pairs: bounded by this constant, never by
# a product of event counts. On the small frames of a DLRM rank (1-1,700 rows a side) it was
# ~0.15 ms a join where the sweep's few dozen polars calls were 0.7-2 ms.
SMALL_PAIRS = 1 << 16


def _overlap_join_small(
    left: pl.DataFrame, right: pl.DataFrame, by: list[str], right_by: list[str], left_span, right_span
) -> pl.DataFrame:
    """`overlap_join` of small frames (`SMALL_PAIRS`): the sweep's pairs (a right start inside
    the left interval, with the right end after the left start; or a left start strictly inside
    the right interval), from the pairs of equal keys."""
    (ls, le), (rs, re_) = left_span, right_span
    if not set(left.columns) & set(right.columns) and (
        p := overlap_pairs(left, right, by, right_by, left_span, right_span)
    ):
        kinds = {c: left.schema[b] for b, c in zip(by, right_by)}  # the join casts the right keys so
        return pl.DataFrame([*left[p[0]].get_columns(), *(s.cast(kinds.get(s.name, s.dtype)) for s in right[p[1]])])
    cast = [pl.col(c).cast(left.schema[b]) for b, c in zip(by, right_by) if right.schema[c] != left.schema[b]]
    j = left.join(right.with_columns(cast) if cast else right, left_on=by, right_on=right_by, coalesce=False)
    a, b, c, d = (j.get_column(x) for x in (ls, le, rs, re_))
    return filter_rows(j, ((c >= a) & (c < b) & (d > a)) | ((c < a) & (a < d)))


def _valid(df: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """`df` without the rows with a null in `cols` (no query when there is none: null counts are
    known without a pass)."""
    return df.drop_nulls(cols) if any(df.get_column(c).null_count() for c in cols) else df


def _banded_pairs(
    lt: pl.DataFrame, rt: pl.DataFrame, by: list[str], right_by: list[str], left_span, right_span
) -> pl.DataFrame | None:
    """`overlap_join`'s candidate pairs (_li, _ri) with Series binary searches instead of as-of
    joins: each key's times are shifted into a band of their own (key number x span, as
    `_merge_sweep` does), so that both sides' starts are one sorted int64 axis each and a
    range of rows is two `search_sorted`s. A DLRM rank's dozen joins of a few thousand rows
    were ~20 queries each; this is one join (the right keys' numbers) and a few Series calls.
    `lt` and `rt`: sorted by key, then start, without null keys or times, with their row
    index first. None when the bands would overflow int64."""
    (ls, le), (rs, re_) = left_span, right_span
    if lt.is_empty() or rt.is_empty():
        return pl.DataFrame(schema={"_li": pl.UInt32, "_ri": pl.UInt32})
    first = key_starts(lt, by)
    lk = first.cast(pl.Int64).cum_sum() - 1  # key numbers in sorted key order: lt's rows stay sorted
    keys = pl.DataFrame([lt.get_column(b).filter(first) for b in by]).with_row_index("_key")
    rk = (
        pl.DataFrame([rt.get_column(c).alias(b) for b, c in zip(by, right_by)])
        .join(keys, on=by, how="left", maintain_order="left")
        .get_column("_key")
        .cast(pl.Int64)
    )
    cols = [lt.get_column(ls), lt.get_column(le), rt.get_column(rs), rt.get_column(re_)]
    lo = min(int(c.min()) for c in cols) - 1
    hi = max(int(c.max()) for c in cols) + 1
    span = hi - lo + 1
    if keys.height * span >= 1 << 62:
        return None
    l_s, l_e = cols[0] + (lk * span - lo), cols[1] + (lk * span - lo)
    r_s, r_e, r_index = cols[2], cols[3], rt.get_column("_ri")
    if rk.null_count():  # a right key no left row has pairs with nothing
        known = rk.is_not_null()
        rk, r_s, r_e, r_index = rk.filter(known), r_s.filter(known), r_e.filter(known), r_index.filter(known)
        del known
    r_band = rk * span - lo
    r_s, r_e = r_s + r_band, r_e + r_band

    def spans(lo_t: pl.Series, hi_t: pl.Series, axis: pl.Series) -> pl.DataFrame:
        """_q (the query's row), _p (positions in `axis`, sorted) with lo_t <= axis[_p] <= hi_t."""
        # one search for both ends (a query each): on integers, "<= hi" is "< hi + 1"
        both = axis.search_sorted(pl.concat([lo_t, hi_t + 1]), side="left").cast(pl.Int64)
        a, b = both.slice(0, lo_t.len()), both.slice(lo_t.len())
        keep = a < b
        q, a, b = pl.int_range(0, a.len(), dtype=pl.UInt32, eager=True).filter(keep), a.filter(keep), b.filter(keep)
        if q.len() == 1 or not (b - a > 1).any():  # one window, or one row each: no list to explode (2 queries)
            p = pl.int_range(a[0], b[0], dtype=pl.UInt32, eager=True) if q.len() == 1 else a.cast(pl.UInt32)
            return pl.DataFrame({"_q": q.new_from_index(0, p.len()) if q.len() == 1 else q, "_p": p})
        ranges = pl.DataFrame({"_q": q, "_a": a, "_b": b}).lazy()  # the ranges and their rows: one query
        return collected(ranges.select("_q", _p=pl.int_ranges("_a", "_b", dtype=pl.UInt32)).explode("_p"))

    # right starts in [left start, left end): right end > left start unless both are the same instant
    inside = spans(l_s, l_e - 1, r_s)
    # left starts in (right start, right end)
    over = spans(r_s + 1, r_e - 1, l_s)
    return pl.DataFrame(
        {
            "_li": pl.concat([inside.get_column("_q"), over.get_column("_p")]),
            "_ri": pl.concat([r_index[inside.get_column("_p")], r_index[over.get_column("_q")]]).cast(pl.UInt32),
        }
    )


def _near(
    right: pl.DataFrame, right_by: list[str], right_span: tuple[str, str], lt: pl.DataFrame, by: list[str], left_span
) -> pl.DataFrame:
    """The rows of `right` (no null key or time) that touch the union of the `left` intervals
    (`lt`: sorted by key, then start) of their key: a superset of the rows `overlap_join` pairs,
    found without sorting `right`. A few gaps against every op of a trace (68 cpu_bound gaps,
    300 k ops) otherwise sort the whole op table for a handful of pairs.

    Each key's times are shifted into a band of their own (key number x span, as `_merge_sweep`
    does), so that one binary search of each right interval's end among the union's sorted
    starts finds the one union interval it may touch. None of this when the bands would
    overflow int64 (then `right` is returned whole)."""
    (ls, le), (rs, re_) = left_span, right_span
    if lt.is_empty() or right.is_empty():
        return right.clear()  # no pairs
    keys = lt.select(by).unique(maintain_order=True).with_row_index("_key")
    lo = min(lt[ls].min(), right[rs].min())
    hi = max(lt[ls].max(), lt[le].max(), right[rs].max(), right[re_].max())
    span = hi - lo + 1
    if keys.height * span >= 1 << 62:
        return right
    band = pl.col("_key").cast(pl.Int64) * span - lo
    # keys numbered in the order of `lt`, so its rows stay sorted by band, then start: the union
    # of all bands at once (bands never touch)
    union = merge_sorted(
        lt.join(keys, on=by, how="left", maintain_order="left").select(
            start_ns=pl.col(ls) + band, end_ns=pl.max_horizontal(ls, le) + band
        ),
        [],
    )
    starts, ends = union.get_column("start_ns"), union.get_column("end_ns")
    cast = [pl.col(c).cast(keys.schema[b]) for b, c in zip(by, right_by)]
    keyed = (
        right.with_row_index("_r")
        .select("_r", *cast, _s=pl.col(rs), _e=pl.max_horizontal(rs, re_))
        .join(keys.rename(dict(zip(by, right_by))), on=right_by, how="inner")
        .select("_r", _s=pl.col("_s") + band, _e=pl.col("_e") + band)
    )
    s_b, e_b = keyed.get_column("_s"), keyed.get_column("_e")
    # the last union interval starting at or before the right interval's end
    i = starts.search_sorted(e_b, side="right").cast(pl.Int64) - 1
    reach = ends.gather(i.clip(0))
    touch = (i >= 0) & (reach >= s_b)
    rows = keyed.get_column("_r").filter(touch).sort()
    return right[rows]
