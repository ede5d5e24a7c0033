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
    band, or whose as-of match lies in an earlier band, has nothing covered."""
    span, lo = bands.span, bands.lo
    hi = lo + span - 1
    qk = q.select(*by, a, b).join(bands.keys, on=by, how="left", maintain_order="left").with_row_index("_r")
    until: dict[str, list[pl.Series]] = {}
    for side in (a, b):
        qs = (
            qk.filter(pl.col("_k").is_not_null() & pl.col(side).is_not_null())
            .select("_r", "_k", _at=pl.col(side).clip(lo, hi))
            .with_columns(_tq=pl.col("_k").cast(pl.Int64) * span + pl.col("_at") - lo)
            .sort("_tq")
        )
        done: dict[int, pl.Series] = {}
        cols = []
        for index, out in zip(indexes, outs):
            if index.is_empty():
                cols.append(pl.lit(0, pl.Int64).alias(out))
                continue
            if id(index) not in done:
                ix = index.select(
                    _tb=pl.col("_k").cast(pl.Int64) * span + pl.col("start_ns") - lo,
                    _s="start_ns",
                    _e="end_ns",
                    _before="_before",
                )
                j = qs.join_asof(ix, left_on="_tq", right_on="_tb", strategy="backward", check_sortedness=False)
                own = pl.col("_tb").is_not_null() & (pl.col("_tb") >= pl.col("_k").cast(pl.Int64) * span)
                done[id(index)] = j.select(
                    pl.when(own).then(pl.col("_before") + pl.min_horizontal("_at", "_e") - pl.col("_s")).otherwise(0)
                ).to_series()
            cols.append(done[id(index)].alias(out))
        found = qs.select("_r").with_columns(cols)
        back = qk.select("_r").join(found, on="_r", how="left", maintain_order="left")
        until[side] = [back.get_column(o).fill_null(0) for o in outs]
    return pl.DataFrame([(ub - ua).clip(0).alias(o) for o, ua, ub in zip(outs, until[a], until[b])])
