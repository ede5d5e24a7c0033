"""The CPU layer unions (`cpu_activity.CpuActivity.cumulative`) and the time each covers inside
the CPU interval of each gap: the unions of the layers 0..k built on one banded int64 axis
(`cumulative_unions`), and several coverage indexes measured over the same query rows at once,
on those bands when they have them (`covered_many`), so that the as-of joins are on one column
rather than by thread keys."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.intervals import _covered_until, coverage_index, key_starts, merge_sorted


@dataclass(frozen=True)
class Bands:
    """How `cumulative_unions` numbered its groups: `keys` (by..., `_k`: the number, in the
    groups' sort order) and each group's band [k x span, (k + 1) x span) for the times
    [lo, lo + span). Its coverage indexes carry `_k`, so that `covered_many` measures them on
    one int64 axis, without an as-of join by keys."""

    keys: pl.DataFrame
    span: int
    lo: int


def cumulative_unions(
    layers: list[pl.DataFrame | Callable[[], pl.DataFrame]], by: list[str]
) -> tuple[list[pl.DataFrame], Bands | None]:
    """The coverage indexes (`coverage_index`) of the unions of layers[0..k] for every k, per
    group `by` (each layer: by..., start_ns, end_ns; or a function that builds it, called once
    to measure it and once to merge it, so that no two such layers are held at once).

    Each group's times are shifted into a band of their own (group number x span, as
    `_merge_sweep` does), so that the sorts are of one int64 column rather than of the keys and
    the start, and each union is the previous one merged (`merge_sorted`, linear) with one
    layer sorted alone: one sort per layer, never of the union so far. A layer that adds
    nothing shares the previous index. Falls back to sorting and merging the union, layer by
    layer, when the bands do not hold (null times, an end before its start, int64 overflow):
    then the Bands are None. Consumes `layers` (each is emptied once banded)."""
    n_null = neg = 0
    lo = hi = None
    firsts: list[pl.Series | None] = []
    heads: list[pl.DataFrame] = []
    for f in map(_built, layers):  # per layer (Series calls), never a concatenated copy of them all
        s, e = f.get_column("start_ns"), f.get_column("end_ns")
        n_null, neg = n_null + s.null_count() + e.null_count(), neg + int((e < s).sum())
        lo = min((v for v in (lo, s.min()) if v is not None), default=None)
        hi = max((v for v in (hi, e.max()) if v is not None), default=None)
        # every key is on a row whose keys differ from the row before's: `unique` hashes those
        # few rows (events come in runs of one thread), not millions (~75 MB at 1 GB)
        firsts.append(key_starts(f, by) if f.height else None)  # one bit a row
        heads.append(_rows(f, by, firsts[-1]) if f.height else f[by].clear())  # Series filters: no query
    heads_all = pl.concat(heads)
    keys = heads_all.unique().sort(by).with_row_index("_k")
    # each layer's heads' group numbers: one join of them all, sliced per layer below
    head_k = heads_all.join(keys, on=by, how="left", nulls_equal=True, maintain_order="left").get_column("_k")
    head_at = [0]
    for h in heads:
        head_at.append(head_at[-1] + h.height)
    del heads_all, heads
    span = (hi - lo + 1) if lo is not None else 1
    if n_null or neg or lo is None or keys.height * span >= 1 << 62:
        return _cumulative_unions_by_sort([_built(f) for f in layers], by), None
    union = pl.DataFrame(schema={"_t": pl.Int64, "_te": pl.Int64})
    out: list[pl.DataFrame] = []
    for i, layer in enumerate(map(_built, layers)):
        layers[i] = layer.clear()  # consumed: each layer is let go once banded (~70 MB at 1 GB)
        if layer.is_empty():
            out.append(out[-1] if out else coverage_index(layer.select(*by, "start_ns", "end_ns"), by, True))
            continue
        # each row's group number: that of its run's first row (the heads' numbers, then by
        # position), not a join of every row (row-encoded keys and indexes: ~20 MB at 311 MB)
        first, firsts[i] = firsts[i], None
        run = (first.cast(pl.UInt32).cum_sum() - 1).cast(pl.UInt32)
        head = head_k.slice(head_at[i], head_at[i + 1] - head_at[i])  # the layer's heads, in its order
        band = head.cast(pl.Int64)[run] * span - lo  # by UInt32 positions: no query
        del first, run, head
        banded = pl.DataFrame({"_t": layer.get_column("start_ns") + band, "_te": layer.get_column("end_ns") + band})
        del layer, band
        banded = banded.sort("_t")
        union = union.merge_sorted(banded, "_t") if union.height else banded
        # the sweep of `_merge_sweep` on the banded axis, in Series operations (no query to plan)
        # and each row against the running maximum one row up by slices (`shift` is a query)
        t, reach = union.get_column("_t"), union.get_column("_te").cum_max()
        m = t.len()
        new = pl.Series([True]).append(t.slice(1) > reach.slice(0, m - 1))
        union = pl.DataFrame({"_t": t.filter(new), "_te": reach.filter(new.slice(1).append(pl.Series([True])))})
        del t, reach, new
        out.append(_unband(union, keys, by, span, lo))
    return out, Bands(keys, span, lo)


def _rows(f: pl.DataFrame, by: list[str], mask: pl.Series) -> pl.DataFrame:
    """The `by` columns of `f` at `mask`: Series filters (a frame `filter` is a polars query)."""
    return pl.DataFrame([f.get_column(b).filter(mask) for b in by])


def _built(layer: pl.DataFrame | Callable[[], pl.DataFrame]) -> pl.DataFrame:
    return layer() if callable(layer) else layer  # a layer given as a function: built now


def _unband(union: pl.DataFrame, keys: pl.DataFrame, by: list[str], span: int, lo: int) -> pl.DataFrame:
    """A banded union (`_t`, `_te`: disjoint, sorted) back to a coverage index: by...,
    start_ns, end_ns, _before (the time covered before each interval in its group), _k (its
    group's number). Series operations, and of those one polars query (`cum_sum`): the groups'
    first rows by slices, not `shift`; each row's group start by its group number (a scatter of
    the starts, then UInt32 positions), not `forward_fill`; the keys by position, not `gather`."""
    t, te = union.get_column("_t"), union.get_column("_te")
    k = t // span  # _t is k x span + (start - lo), start - lo in [0, span)
    kk, off, m = k.cast(pl.UInt32), k * span - lo, k.len()
    first = pl.Series([True]).append(k.slice(1) != k.slice(0, m - 1)) if m else pl.Series([], dtype=pl.Boolean)
    del k  # each helper let go once used: the unions of a 1 GB trace are millions of rows
    c = (te - t).cum_sum() - (te - t)
    starts = pl.Series([0], dtype=pl.Int64).new_from_index(0, keys.height).scatter(kk.filter(first), c.filter(first))
    before = c - starts[kk]
    del c, first, starts
    cols = [keys.get_column(b)[kk] for b in by]  # keys' rows are their numbers
    return pl.DataFrame(
        [*cols, (t - off).alias("start_ns"), (te - off).alias("end_ns"), before.alias("_before"), kk.alias("_k")]
    )


def _cumulative_unions_by_sort(layers: list[pl.DataFrame], by: list[str]) -> list[pl.DataFrame]:
    """`cumulative_unions` by sorting the union so far with each layer and sweeping it."""
    union = layers[0].select(*by, "start_ns", "end_ns").clear()
    out = []
    for layer in layers:
        union = merge_sorted(pl.concat([union, layer.select(union.columns)]).sort([*by, "start_ns"]), by)
        out.append(coverage_index(union, by, presorted=True))
    return out


def covered_many(
    q: pl.DataFrame,
    indexes: list[pl.DataFrame],
    by: list[str],
    a: str,
    b: str,
    outs: list[str],
    bands: Bands | None = None,
) -> pl.DataFrame:
    """`covered` for several indexes at once over the same [q[a], q[b]]: out_k per row of q, in
    q's order (a frame of the columns `outs`). q is sorted twice in all (by a, by b), not twice
    per index: the gaps of a 1 GB trace are measured against six layer unions. With the `bands`
    of `cumulative_unions` (its indexes carry `_k`), each as-of join is on one int64 axis
    instead of by keys (~20x faster)."""
    if bands is not None and all(i.is_empty() or "_k" in i.columns for i in indexes):
        return _covered_banded(q, indexes, by, a, b, outs, bands)
    qa = q.select(*by, a).with_row_index("_r").sort(a)
    qb = q.select(*by, b).with_row_index("_r").sort(b)
    ca, cb = [], []
    done: dict[int, tuple[pl.Series, pl.Series]] = {}  # an index shared by two layers is measured once
    for index, out in zip(indexes, outs):
        if index.is_empty() or q.is_empty():
            ca.append(pl.lit(0, pl.Int64).alias(out))
            cb.append(pl.lit(0, pl.Int64).alias(out))
            continue
        if id(index) not in done:
            done[id(index)] = (
                _covered_until(qa, index, a, by, "_c").get_column("_c"),
                _covered_until(qb, index, b, by, "_c").get_column("_c"),
            )
        ua, ub = done[id(index)]
        ca.append(ua.alias(out))
        cb.append(ub.alias(out))
    # back to q's order: the rows of each sorted frame in the order of their row number
    until_a = qa.select("_r").with_columns(ca).sort("_r").drop("_r")
    until_b = qb.select("_r").with_columns(cb).sort("_r").drop("_r")
    return until_b.select((pl.col(o) - until_a.get_column(o)).clip(0).alias(o) for o in outs)


def _covered_banded(
    q: pl.DataFrame, indexes: list[pl.DataFrame], by: list[str], a: str, b: str, outs: list[str], bands: Bands
) -> pl.DataFrame:
    """`covered_many` on the bands' axis. A time outside [lo, lo + span) is clipped into it (no
    interval lies outside, so the covered time until it is the same); a row whose group has no
    band, or whose match lies in an earlier band, has nothing covered.

    Series all through, one index at a time: each index's interval holding (or last before)
    each end of q is one `search_sorted` of both ends' band times among its sorted band starts
    (the as-of match, with no sort of q), and each end's covered time is put back into q's
    order by its row (a scatter) and subtracted at once. Only the search and the join of q's
    keys are polars queries (~25 µs each on a DLRM rank's few hundred gaps); holding every
    layer's coverage at both ends was ~70 MB at 1 GB (276 k gaps)."""
    span, lo = bands.span, bands.lo
    n = q.height
    k = q[by].join(bands.keys, on=by, how="left", maintain_order="left").get_column("_k")
    row = k.to_frame().with_row_index("_r").get_column("_r")
    ends = []  # per end of q: its rows with a band and a time, their band's start and their time
    for side in (a, b):
        at = q.get_column(side)
        valid = _not_null(k) & _not_null(at)
        kk, t = k.filter(valid).cast(pl.Int64) * span, _clipped(at.filter(valid), lo, lo + span - 1)
        ends.append((row.filter(valid), kk, t))
    del k, row
    tq = pl.concat([kk + t - lo for _, kk, t in ends])  # both ends' band times: one search per index
    done: dict[int, pl.Series] = {}  # an index shared by two layers is measured once
    cols = []
    for index, out in zip(indexes, outs):
        if index.is_empty():
            cols.append(pl.Series(out, [0], pl.Int64).new_from_index(0, n))
            continue
        if id(index) not in done:
            s0, e0, before = index.get_column("start_ns"), index.get_column("end_ns"), index.get_column("_before")
            tb = index.get_column("_k").cast(pl.Int64) * span + s0 - lo  # sorted: bands, then starts
            found = tb.search_sorted(tq, side="right")  # the intervals starting at or before each end
            covered_until, off = [], 0
            for rows, band, t in ends:
                f = found.slice(off, t.len())
                off += t.len()
                has = f > 0
                j = f - has.cast(pl.UInt32)  # the interval (row 0 where none: masked out next)
                keep = has & (tb[j] >= band)  # one, in the end's own band (not an earlier one)
                j, rows, t = j.filter(keep), rows.filter(keep), t.filter(keep)
                del f, has, keep
                e = e0[j]
                until = before[j] + t.zip_with(t < e, e) - s0[j]  # covered before it, and inside it
                del e
                # scatter fills a new column in place: q's rows, 0 where an end has no interval
                covered_until.append(pl.Series("", [0], pl.Int64).new_from_index(0, n).scatter(rows, until))
            d = covered_until[1] - covered_until[0]
            done[id(index)] = d.zip_with(d > 0, pl.Series("", [0], pl.Int64).new_from_index(0, n))
            del covered_until, d
        cols.append(done[id(index)].alias(out))
    return pl.DataFrame(cols)


def _not_null(s: pl.Series) -> pl.Series:
    """`is_not_null` without its query (~25 µs) when there is no null (null counts are known)."""
    return s.is_not_null() if s.null_count() else pl.Series([True]).new_from_index(0, s.len())


def _clipped(t: pl.Series, lo: int, hi: int) -> pl.Series:
    """`t.clip(lo, hi)` (no nulls) by `zip_with`, and only when a time lies outside: `clip` is a query."""
    if t.is_empty() or (t.min() >= lo and t.max() <= hi):
        return t
    t = t.zip_with(t >= lo, pl.Series([lo], dtype=t.dtype).new_from_index(0, t.len()))
    return t.zip_with(t <= hi, pl.Series([hi], dtype=t.dtype).new_from_index(0, t.len()))
