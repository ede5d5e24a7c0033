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
    return merge_sorted(s, by)


def merge_sorted(s: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`merge` of (by..., start_ns, end_ns) already sorted by `by`, then start_ns (a filter of
    such a frame keeps it sorted): the union of several layers of intervals needs one sort."""
    if s.is_empty():
        return s.select(*by, "start_ns", "end_ns")
    fast = _merge_sweep(s, by)
    if fast is not None:
        return fast
    # Runs are contiguous in the sorted rows, so the groups in order of appearance are sorted too:
    # no sort after the group-by.
    return (
        s.select(*by, "start_ns", "end_ns")
        .with_columns(_grp=run_id("start_ns", "end_ns", by))
        .group_by([*by, "_grp"], maintain_order=True)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_grp")
    )


def _merge_sweep(s: pl.DataFrame, by: list[str]) -> pl.DataFrame | None:
    """`merge_sorted` as one sweep over the whole frame, without a window per group or a
    group-by: each group's times are shifted into a band of their own (group number x span), so
    that one running maximum of the ends never reaches from one group into the next. A run
    starts where its group starts or where a start passes every earlier end; it ends at the
    running maximum on its last row. None (use the group-by) when that does not hold: null
    times, an end before its start, or bands that would overflow int64."""
    first = pl.int_range(pl.len()) == 0
    for b in by:
        first = first | pl.col(b).ne_missing(pl.col(b).shift(1))
    t = s.select(
        _n=pl.col("start_ns").null_count() + pl.col("end_ns").null_count(),
        _neg=(pl.col("end_ns") < pl.col("start_ns")).sum(),
        _lo=pl.col("start_ns").min(),
        _hi=pl.col("end_ns").max(),
        _groups=first.sum(),
    ).row(0)
    if t[0] or t[1]:
        return None
    lo, hi, groups = int(t[2]), int(t[3]), int(t[4])
    span = hi - lo + 1
    if groups * span >= 1 << 62:
        return None
    # One lazy query, so that the helper columns are let go inside it (a 1 GB trace merges
    # millions of rows: each helper column is tens of MB).
    band = (first.cum_sum().cast(pl.Int64) - 1) * span - lo
    swept = (
        s.lazy()
        .with_columns(_first=first, _band=band)
        .with_columns(_reach=(pl.col("end_ns") + pl.col("_band")).cum_max())
        .with_columns(_new=pl.col("_first") | ((pl.col("start_ns") + pl.col("_band")) > pl.col("_reach").shift(1)))
        .select(
            *by,
            "start_ns",
            "_new",
            _last=pl.col("_new").shift(-1, fill_value=True),
            _end=pl.col("_reach") - pl.col("_band"),
        )
        .collect()
    )
    ends = swept.filter("_last").get_column("_end").alias("end_ns")
    return swept.filter("_new").select(*by, "start_ns").hstack([ends])


def coverage_index(disjoint: pl.DataFrame, by: list[str], presorted: bool = False) -> pl.DataFrame:
    """Prefix sums over disjoint sorted intervals, for `covered` (`presorted`: `disjoint` is
    sorted by `by`, then start_ns already, as `merge` returns it)."""
    ordered = disjoint if presorted else disjoint.sort([*by, "start_ns"])
    return ordered.with_columns(
        _before=(pl.col("end_ns") - pl.col("start_ns")).cum_sum().shift(1, fill_value=0).over(by)
    )


def _covered_until(q: pl.DataFrame, index: pl.DataFrame, at: str, by: list[str], out: str) -> pl.DataFrame:
    """Covered time from -inf to q[at], per row of q."""
    j = q.sort(at).join_asof(
        # sorted by `by`, then start (coverage_index): what an as-of join by keys needs
        index.select(*by, pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"), "_before"),
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


def overlap_join(
    left: pl.DataFrame,
    right: pl.DataFrame,
    by: list[str],
    left_span: tuple[str, str],
    right_span: tuple[str, str],
    right_by: list[str] | None = None,
) -> pl.DataFrame:
    """Pairs of a `left` and a `right` row with equal `by` keys (`right_by` on the right; none:
    all pairs) whose intervals overlap (left start < right end and left end > right start): the
    inner join, its columns those of both frames (their names must differ).

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
    if not by:
        left, right = left.with_columns(_k0=pl.lit(0)), right.with_columns(_k1=pl.lit(0))
        by, right_by = ["_k0"], ["_k1"]
    lt = left.drop_nulls([*by, ls, le]).sort([*by, ls]).with_row_index("_li")
    rt = (
        right.drop_nulls([*right_by, rs, re_])
        .sort([*right_by, rs])
        .with_columns([pl.col(c).cast(lt.schema[b]) for b, c in zip(by, right_by)])
        .with_row_index("_ri")
    )
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

    # right starts in [left start, left end): right end > left start unless both are the same instant
    starts_inside = ranges(lt, by, pl.col(ls), pl.col(le) - 1, rt, right_by, rs)
    # left starts in (right start, right end)
    opens_over = ranges(rt, right_by, pl.col(rs) + 1, pl.col(re_) - 1, lt, by, ls)
    pairs = pl.concat([starts_inside.select(list(idx)).cast(idx), opens_over.select(list(idx)).cast(idx)])
    out = pl.concat(
        [
            lt.drop("_li")[pairs["_li"]],
            rt.drop("_ri")[pairs["_ri"]],
        ],
        how="horizontal",
    )
    out = out.filter(pl.col(re_) > pl.col(ls))
    helper = [c for c in ("_k0", "_k1") if c in out.columns]
    return out.drop(helper)
