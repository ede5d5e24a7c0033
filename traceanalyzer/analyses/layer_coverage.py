"""The CPU layer unions (`cpu_activity.CpuActivity.cumulative`) and the time each covers inside
the CPU interval of each gap: the unions of the layers 0..k built on one banded int64 axis
(`cumulative_unions`), and several coverage indexes measured over the same query rows at once,
on those bands when they have them (`covered_many`), so that the searches are on one column
rather than by thread keys."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.intervals import (
    SMALL_ROWS,
    _covered_until,
    at_least,
    at_most,
    collected,
    coverage_index,
    filled,
    key_starts,
    merge_sorted,
    positions,
)


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
    to measure it and once to merge it, so that no two such layers are held at once; one of
    under SMALL_ROWS rows is kept between the two instead).

    Each group's times are shifted into a band of their own (group number x span, as
    `_merge_sweep` does), so that the sorts are of one int64 column rather than of the keys and
    the start, and each union is the previous one merged (`merge_sorted`, linear) with one
    layer sorted alone: one sort per layer, never of the union so far. A layer that adds
    nothing shares the previous index. Falls back to sorting and merging the union, layer by
    layer, when the bands do not hold (null times, an end before its start, int64 overflow):
    then the Bands are None. Consumes `layers` (each is emptied once banded).

    On the bands, each index is kept as it was swept: `_t`, `_te` (an interval on the bands'
    axis) and `_before`, 24 bytes a row, not by..., start_ns, end_ns, _before, _k (44): the
    measure of `covered_many` reads it so, and `unband` gives the keyed form to what asks for it
    (1 GB: 1.5 M rows, 37 MB held while the gaps are classified instead of 67, and no 32 MB copy
    of each index to measure it)."""
    n_null = neg = 0
    lo = hi = None
    firsts: list[pl.Series | None] = []
    heads: list = []  # each layer's first rows of its keys, then their key numbers
    for i, f in enumerate(map(_built, layers)):  # per layer (Series calls), never a concatenated copy of them all
        if f.height < SMALL_ROWS and callable(layers[i]):  # a small layer is kept, not built twice
            layers[i] = f
        s, e = f.get_column("start_ns"), f.get_column("end_ns")
        n_null, neg = n_null + s.null_count() + e.null_count(), neg + int((e < s).sum())
        lo = min((v for v in (lo, s.min()) if v is not None), default=None)
        hi = max((v for v in (hi, e.max()) if v is not None), default=None)
        # every key is on a row whose keys differ from the row before's: `unique` hashes those
        # few rows (events come in runs of one thread), not millions (~75 MB at 1 GB)
        firsts.append(key_starts(f, by) if f.height else None)  # one bit a row
        # the heads as a frame of Series (a frame's `select` and `filter` are a query each)
        cols = [f.get_column(c) for c in by]
        heads.append(pl.DataFrame([c.filter(firsts[-1]) if f.height else c.clear() for c in cols]))
        del cols
    all_heads = pl.concat(heads)
    keys = collected(all_heads.lazy().unique().sort(by).with_row_index("_k"))
    span = (hi - lo + 1) if lo is not None else 1
    if n_null or neg or lo is None or keys.height * span >= 1 << 62:
        return _cumulative_unions_by_sort([_built(f) for f in layers], by), None
    # every layer's heads numbered by one join (one a layer cost ~0.1 ms each on a DLRM rank)
    head_k = all_heads.join(keys, on=by, how="left", nulls_equal=True, maintain_order="left").get_column("_k")
    at = 0
    for i, h in enumerate(heads):
        heads[i], at = head_k.slice(at, h.height), at + h.height
    del all_heads, head_k
    union = pl.DataFrame(schema={"_t": pl.Int64, "_te": pl.Int64})
    out: list[pl.DataFrame] = []
    for i, layer in enumerate(map(_built, layers)):
        layers[i] = layer.clear()  # consumed: each layer is let go once banded (~70 MB at 1 GB)
        if layer.is_empty():
            out.append(out[-1] if out else _with_before(union, span))
            continue
        # each row's group number: that of its run's first row (a join of the few heads, then a
        # gather), not a join of every row (row-encoded keys and indexes: ~20 MB at 311 MB)
        first, firsts[i] = firsts[i], None
        head, heads[i] = heads[i], None
        if (np := _numpy_for(layer, union)) is not None:  # a small union: numpy, no query
            union = _merged_small(np, union, layer, first, head, span, lo)
            del layer, first, head
            out.append(_with_before(union, span))
            continue
        run = first.cast(pl.UInt32).cum_sum() - 1
        band = head.cast(pl.Int64)[run] * span - lo
        del first, run, head
        banded = pl.DataFrame({"_t": layer.get_column("start_ns") + band, "_te": layer.get_column("end_ns") + band})
        del layer, band
        banded = banded.sort("_t")
        union = union.merge_sorted(banded, "_t") if union.height else banded
        # the sweep of `_merge_sweep` on the banded axis, in Series operations (no query to plan)
        t, reach = union.get_column("_t"), union.get_column("_te").cum_max()
        # each row against the running maximum one row up by slices (`shift` is a polars query)
        m = t.len()
        new = pl.Series([True]).append(t.slice(1) > reach.slice(0, m - 1))
        union = pl.DataFrame({"_t": t.filter(new), "_te": reach.filter(new.slice(1).append(pl.Series([True])))})
        # one chunk, exactly sized: the filter of the merged chunks keeps buffers about twice the
        # rows kept, and the union is kept (1 GB: 72 MB of RSS for 37 MB of unions)
        union = union.rechunk()
        del t, reach, new
        out.append(_with_before(union, span))
    return out, Bands(keys, span, lo)


def _built(layer: pl.DataFrame | Callable[[], pl.DataFrame]) -> pl.DataFrame:
    return layer() if callable(layer) else layer  # a layer given as a function: built now


def _numpy_for(layer: pl.DataFrame, union: pl.DataFrame):
    """numpy where it is imported and the union with `layer` stays under SMALL_ROWS rows of Int64 times."""
    np = sys.modules.get("numpy")
    small = layer.height + union.height < SMALL_ROWS
    return np if small and all(layer.schema[c] == pl.Int64 for c in ("start_ns", "end_ns")) else None


def _merged_small(np, union: pl.DataFrame, layer: pl.DataFrame, first: pl.Series, head: pl.Series, span: int, lo: int):
    """The loop's banding, sort, merge and sweep of one layer into `union` on numpy arrays (four
    queries a layer in polars; a DLRM rank merges five small layers per gap chain). A stable sort
    of the union and the layer: tied starts give the same runs whatever their order."""
    band = head.cast(pl.Int64).to_numpy()[np.cumsum(first.to_numpy()) - 1] * span - lo
    t = np.concatenate([union.get_column("_t").to_numpy(), layer.get_column("start_ns").to_numpy() + band])
    te = np.concatenate([union.get_column("_te").to_numpy(), layer.get_column("end_ns").to_numpy() + band])
    order = np.argsort(t, kind="stable")
    t, reach = t[order], np.maximum.accumulate(te[order])
    new = np.ones(len(t), bool)
    new[1:] = t[1:] > reach[:-1]
    last = np.ones(len(t), bool)
    last[:-1] = new[1:]
    return pl.DataFrame({"_t": t[new], "_te": reach[last]})


def _with_before(union: pl.DataFrame, span: int) -> pl.DataFrame:
    """A banded union (`_t`, `_te`: disjoint, sorted) as a banded index: with `_before`, the
    time covered before each interval in its band (its group). Series operations: one call into
    polars each, no query to plan."""
    t, te = union.get_column("_t"), union.get_column("_te")
    m = t.len()
    if not m:
        return pl.DataFrame([t, te, te.clear().alias("_before")])
    if (np := sys.modules.get("numpy")) is not None and m < SMALL_ROWS and t.dtype == te.dtype == pl.Int64:
        tn, ten = t.to_numpy(), te.to_numpy()  # the same sums on numpy (the select is a query)
        band = tn - tn % span
        f = np.ones(m, bool)
        f[1:] = band[1:] != band[:-1]
        c = np.cumsum(ten - tn) - (ten - tn)
        return pl.DataFrame([t, te, pl.Series("_before", c - c[f][np.cumsum(f) - 1])])
    band = t - t % span  # _t is k x span + (start - lo), start - lo in [0, span): its band's start
    # each row against the one before by slices (`shift` and `ne_missing` are a query each)
    first = pl.Series([True]).append(band.slice(1) != band.slice(0, m - 1))
    del band  # each helper let go once used: the unions of a 1 GB trace are millions of rows
    # the running sums and the value at each group's first row in one query (three calls were three)
    c = pl.col("_l").cum_sum() - pl.col("_l")
    before = pl.DataFrame([(te - t).alias("_l"), first.alias("_f")]).select(
        _before=c - pl.when("_f").then(c).forward_fill()
    )
    return pl.DataFrame([t, te, before.get_column("_before")])


def unband(index: pl.DataFrame, bands: Bands | None, by: list[str]) -> pl.DataFrame:
    """A coverage index of `cumulative_unions` in its keyed form: by..., start_ns, end_ns,
    _before (as `intervals.coverage_index` gives), _k (its group's number). As it is when it is
    keyed already (no bands)."""
    if bands is None or "_t" not in index.columns:
        return index
    span, lo = bands.span, bands.lo
    t, te = index.get_column("_t"), index.get_column("_te")
    k = t // span
    kk, off = k.cast(pl.UInt32), k * span - lo
    del k
    cols = [bands.keys.get_column(b).gather(kk) for b in by]  # keys' rows are their numbers
    return pl.DataFrame(
        [*cols, (t - off).alias("start_ns"), (te - off).alias("end_ns"), index.get_column("_before"), kk.alias("_k")]
    )


def bounds(index: pl.DataFrame, bands: Bands | None) -> pl.DataFrame:
    """A coverage index of `cumulative_unions` as start_ns, end_ns frames whose least start and
    greatest end are the index's: on the bands, each band's first and last interval alone (its
    intervals are disjoint and in order), not the index unbanded (a keyed copy of every union:
    17 ms at 311 MB)."""
    if bands is None or "_t" not in index.columns:
        return index.select("start_ns", "end_ns")
    t, te = index.get_column("_t"), index.get_column("_te")
    at = pl.int_range(0, bands.keys.height + 1, dtype=pl.Int64, eager=True) * bands.span
    first = t.search_sorted(at, side="left").cast(pl.Int64)
    some = first[:-1] < first[1:]
    off = (at[:-1] - bands.lo).filter(some)
    start = t.gather(first[:-1].filter(some)) - off
    return pl.DataFrame({"start_ns": start, "end_ns": te.gather(first[1:].filter(some) - 1) - off})


def on_bands(index: pl.DataFrame, bands: Bands | None, by: list[str]) -> pl.DataFrame:
    """A keyed coverage index (by..., start_ns, end_ns, _before) on the bands' axis (`_t`,
    `_te`, `_before`), so that `covered_many` measures it as the layer unions; as it is when a
    group of it has no band (or there are no bands)."""
    if bands is None or index.is_empty() or "_t" in index.columns:
        return index
    k = index.select(by).join(bands.keys, on=by, how="left", maintain_order="left").get_column("_k")
    if k.null_count():
        return index
    band = k.cast(pl.Int64) * bands.span - bands.lo
    return pl.DataFrame(
        [
            (index.get_column("start_ns") + band).alias("_t"),
            (index.get_column("end_ns") + band).alias("_te"),
            index.get_column("_before"),
        ]
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
    of `cumulative_unions` (its indexes on the bands' axis: `_t`, `_te`, `_before`; `on_bands`
    puts another there), each as-of match is a binary search on one int64 axis instead of an
    as-of join by keys (~20x faster); keyed indexes are measured by keys (`unband` gives that
    form of a banded one)."""
    if bands is not None and all(i.is_empty() or "_t" in i.columns for i in indexes):
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
    band, or whose match (the last interval starting at or before it) lies in an earlier band,
    has nothing covered.

    Series all through: both ends of q on the axis one after the other (sorted when large: the
    searches then walk the index in order), each index searched as it is kept (on the axis
    already), once for both ends, and each match put back into q's order by its row (a scatter
    where the rows were sorted or some left out) and subtracted at once. Holding every layer's
    coverage at both ends, and the as-of joins' copies of q, was ~70 MB at 1 GB (276 k gaps).
    Small indexes are stacked on one axis (index j shifted by j x the axis' width) and searched
    at once: each Series call costs ~2-25 µs whatever its size, and a DLRM rank measured six
    indexes of a few hundred rows (~0.15 ms each, one by one)."""
    span, lo = bands.span, bands.lo
    hi = lo + span - 1
    n = q.height
    k = pl.DataFrame([q.get_column(c) for c in by]).join(bands.keys, on=by, how="left", maintain_order="left")
    k = k.get_column("_k")
    rows, groups, times = [], [], []
    for side in (a, b):
        at = q.get_column(side)
        if k.null_count() or at.null_count():
            valid = k.is_not_null() & at.is_not_null()
            r, kk, t = positions(valid), k.filter(valid), at.filter(valid)
            del valid
        else:
            r, kk, t = None, k, at  # every row, in q's order
        kk, t = kk.cast(pl.Int64), at_most(at_least(t, lo), hi)
        if t.len() >= SMALL_ROWS:
            order = (kk * span + t).arg_sort()
            r = order if r is None else r[order]
            kk, t = kk[order], t[order]
            del order
        rows.append(r)
        groups.append(kk)
        times.append(kk * span + t - lo)
        del r, kk, t
    del k
    # both ends as one axis of queries: one search of each index for both
    n_a = times[0].len()
    band, tq = pl.concat(groups) * span, pl.concat(times)  # each query's band starts at its group's
    del groups, times
    distinct = list({id(i): i for i in indexes if not i.is_empty()}.values())  # shared by two layers: once
    width = bands.keys.height * span  # the whole axis, every group's band
    stacked = sum(i.height for i in distinct) < SMALL_ROWS and tq.len() * len(distinct) < SMALL_ROWS
    if distinct and stacked and len(distinct) * width < 1 << 62:
        shifts = [j * width for j in range(len(distinct))]
        until = _until(
            pl.concat([i.get_column("_t") + d for i, d in zip(distinct, shifts)]),
            pl.concat([i.get_column("_te") + d for i, d in zip(distinct, shifts)]),
            pl.concat([i.get_column("_before") for i in distinct]),
            pl.concat([tq + d for d in shifts]),
            pl.concat([band + d for d in shifts]),
        )
        m = tq.len()
        found = {id(i): until.slice(j * m, m) for j, i in enumerate(distinct)}
    else:
        found = {
            id(i): _until(i.get_column("_t"), i.get_column("_te"), i.get_column("_before"), tq, band) for i in distinct
        }
    del tq, band
    done: dict[int, pl.Series] = {}
    cols = []
    for index, out in zip(indexes, outs):
        if index.is_empty():
            cols.append(filled(0, n).alias(out))
            continue
        if id(index) not in done:
            until = found.pop(id(index))
            # q's rows, 0 where an end has no band (a scatter fills a new column in place)
            ends = [
                until.slice(at, size) if r is None else filled(0, n).scatter(r, until.slice(at, size))
                for r, at, size in ((rows[0], 0, n_a), (rows[1], n_a, until.len() - n_a))
            ]
            del until
            done[id(index)] = at_least(ends[1] - ends[0], 0)
            del ends
        cols.append(done[id(index)].alias(out))
    return pl.DataFrame(cols)


def _until(starts: pl.Series, te: pl.Series, before: pl.Series, tq: pl.Series, band: pl.Series) -> pl.Series:
    """The covered time of an index on the bands' axis (its sorted, distinct starts, their ends
    and `_before`) until each query time `tq` (its band starting at `band`): from the last
    interval starting at or before it (a binary search), when that lies in the query's own band,
    else 0. An as-of join copied the index's columns (1 GB: +30 MB for the largest)."""
    p = starts.search_sorted(tq, side="right").cast(pl.Int64) - 1
    at = at_least(p, 0).cast(pl.UInt32)
    t, end = starts[at], te[at]
    own = (p >= 0) & (t >= band)
    until = before[at] + tq.zip_with(tq < end, end) - t
    return until.zip_with(own, filled(0, tq.len()))
