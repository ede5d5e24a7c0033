"""The time each CPU layer union (`cpu_activity.CpuActivity.cumulative`) covers inside the CPU
interval of each gap: several coverage indexes measured over the same query rows at once, on the
bands of `intervals.cumulative_unions` (one int64 axis) when they have them, so that the as-of
joins are on one column rather than by thread keys."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.intervals import Bands, _covered_until


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
    band, or whose as-of match lies in an earlier band, has nothing covered.

    Series all through, one index at a time: both ends of q are sorted once (their rows, band
    numbers and times), each index is banded once for both, and each as-of match is put back
    into q's order by its row (a scatter) and subtracted at once. Holding every layer's
    coverage at both ends, and the as-of joins' copies of q, was ~70 MB at 1 GB (276 k gaps)."""
    span, lo = bands.span, bands.lo
    hi = lo + span - 1
    n = q.height
    k = q.select(by).join(bands.keys, on=by, how="left", maintain_order="left").get_column("_k")
    ends = []
    for side in (a, b):
        at = q.get_column(side)
        valid = k.is_not_null() & at.is_not_null()
        rows, kk, t = valid.arg_true(), k.filter(valid).cast(pl.Int64), at.filter(valid).clip(lo, hi)
        del valid
        order = (kk * span + t).arg_sort()
        kk, t = kk.gather(order), t.gather(order)
        ends.append((rows.gather(order), pl.DataFrame({"_tq": kk * span + t - lo, "_k": kk, "_at": t})))
        del rows, kk, t, order
    del k
    own = pl.col("_tb").is_not_null() & (pl.col("_tb") >= pl.col("_k") * span)
    until = pl.when(own).then(pl.col("_before") + pl.min_horizontal("_at", "_e") - pl.col("_s")).otherwise(0)
    done: dict[int, pl.Series] = {}  # an index shared by two layers is measured once
    cols = []
    for index, out in zip(indexes, outs):
        if index.is_empty():
            cols.append(pl.zeros(n, pl.Int64, eager=True).alias(out))
            continue
        if id(index) not in done:
            ix = index.select(
                _tb=pl.col("_k").cast(pl.Int64) * span + pl.col("start_ns") - lo,
                _s="start_ns",
                _e="end_ns",
                _before="_before",
            )
            covered_until = []
            for rows, qs in ends:
                j = qs.join_asof(ix, left_on="_tq", right_on="_tb", strategy="backward", check_sortedness=False)
                # scatter fills a new column in place: q's rows, 0 where an end has no band
                covered_until.append(pl.zeros(n, pl.Int64, eager=True).scatter(rows, j.select(until).to_series()))
                del j
            del ix
            done[id(index)] = (covered_until[1] - covered_until[0]).clip(0)
            del covered_until
        cols.append(done[id(index)].alias(out))
    return pl.DataFrame(cols)
