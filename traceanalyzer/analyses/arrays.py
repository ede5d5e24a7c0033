"""The steps of a small frame's interval sweeps on numpy arrays, where numpy is imported (a
directory of many ranks imports it: `jobs.executors.NUMPY_RANKS`; its own import costs more than
a single trace saves): a polars Series call such as `cum_sum`, `cum_max` or a frame's `sort` is
a query of its own, ~30-50 µs to plan whatever its size, where numpy's call on a few hundred
rows takes a microsecond or two. Each returns what the polars calls return, or (for the order)
None where it cannot."""

from __future__ import annotations

import sys

import polars as pl


def int_order(keys: list[pl.Series]) -> pl.Series | None:
    """The rows' order by `keys` (numpy's stable lexsort), as UInt32 positions; None where a key
    is null or no integer, or without numpy imported."""
    np = sys.modules.get("numpy")
    if np is None or any(k.null_count() or not k.dtype.is_integer() or k.dtype == pl.UInt64 for k in keys):
        return None
    return pl.Series(np.lexsort([k.cast(pl.Int64).to_numpy() for k in reversed(keys)])).cast(pl.UInt32)


def band_reach(first: pl.Series, end: pl.Series, span: int, lo: int) -> tuple[pl.Series, pl.Series]:
    """`intervals._merge_sweep`'s band per row ((group number) x span - lo, the groups starting
    where `first` holds) and the running maximum of the banded ends (`end` Int64 without nulls,
    bands within int64)."""
    np = sys.modules.get("numpy")
    if np is None or end.dtype != pl.Int64:
        band = (first.cast(pl.Int64).cum_sum() - 1) * span - lo
        return band, (end + band).cum_max()
    band = (np.cumsum(first.to_numpy(), dtype=np.int64) - 1) * span - lo
    return pl.Series(band), pl.Series(np.maximum.accumulate(end.to_numpy() + band))


def asof_covered(q: pl.DataFrame, index: pl.DataFrame, at: str, by: list[str]) -> pl.Series | None:
    """`intervals._covered_until`'s covered time to q[at] per row of `q` (sorted by q[at]) by a
    search among `index`'s rows (sorted by `by`, then start_ns: disjoint intervals and their
    `_before`), as its backward as-of join by `by` finds them; None (the join) without numpy,
    where a key or time is null or not an integer, or for more than two keys."""
    np = sys.modules.get("numpy")
    qk, ik = q[[*by, at]], index[[*by, "start_ns", "end_ns", "_before"]]
    cols = [*qk.get_columns(), *ik.get_columns()]
    if (
        np is None
        or len(by) > 2
        or any(c.null_count() or not c.dtype.is_integer() or c.dtype == pl.UInt64 for c in cols)
    ):
        return None
    *qkeys, t = (c.cast(pl.Int64).to_numpy() for c in qk.get_columns())
    *ikeys, s, e, before = (c.cast(pl.Int64).to_numpy() for c in ik.get_columns())
    code = np.zeros(len(t) + len(s), dtype=np.int64)  # the keys as one dense code over both sides
    for a, b in zip(qkeys, ikeys):
        values, k_no = np.unique(np.concatenate([a, b]), return_inverse=True)
        code = code * len(values) + k_no.reshape(-1)
    times = np.unique(np.concatenate([t, s]))
    width = len(times)
    qkey = code[: len(t)] * width + np.searchsorted(times, t)
    ikey = code[len(t) :] * width + np.searchsorted(times, s)  # sorted: the index's own order
    pos = np.searchsorted(ikey, qkey, side="right") - 1
    hit = pos >= 0
    hit[hit] = ikey[pos[hit]] // width == code[: len(t)][hit]
    p = np.maximum(pos, 0)
    until = np.where(hit, before[p] + np.minimum(t, e[p]) - s[p], 0)
    return pl.Series(until)
