"""The steps of a small frame's interval sweeps on numpy arrays, where numpy is imported (a
directory of many ranks imports it: `jobs.executors.NUMPY_RANKS`; its own import costs more than
a single trace saves): a polars Series call such as `cum_sum`, `cum_max` or a frame's `sort` is
a query of its own, ~30-50 µs to plan whatever its size, where numpy's call on a few hundred
rows takes a microsecond or two. Each returns what the polars calls return, or (for the order)
None where it cannot."""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.links import int64_arrays


def int_order(keys: list[pl.Series]) -> pl.Series | None:
    """The rows' order by `keys` (numpy's stable lexsort), as UInt32 positions; None where a key
    is null or no integer, or without numpy imported."""
    if (arrays := int64_arrays(keys)) is None:
        return None
    return pl.Series(sys.modules["numpy"].lexsort(arrays[::-1])).cast(pl.UInt32)


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
    qk, ik = q[[*by, at]], index[[*by, "start_ns", "end_ns", "_before"]]
    if len(by) > 2 or (cols := int64_arrays([*qk.get_columns(), *ik.get_columns()])) is None:
        return None
    np = sys.modules["numpy"]
    *qkeys, t = cols[: qk.width]
    *ikeys, s, e, before = cols[qk.width :]
    qcode, icode = _key_codes(qkeys, ikeys) if by else (np.zeros(len(t), np.int64), np.zeros(len(s), np.int64))
    times = np.unique(np.concatenate([t, s]))
    width = len(times)
    qkey = qcode * width + np.searchsorted(times, t)
    ikey = icode * width + np.searchsorted(times, s)  # sorted: the index's own order
    pos = np.searchsorted(ikey, qkey, side="right") - 1
    hit = pos >= 0
    hit[hit] = ikey[pos[hit]] // width == qcode[hit]
    p = np.maximum(pos, 0)
    until = np.where(hit, before[p] + np.minimum(t, e[p]) - s[p], 0)
    return pl.Series(until)


def _key_codes(left: list, right: list) -> tuple:
    """The keys of both sides (int64 arrays) as one dense int64 code per row of each side."""
    np = sys.modules["numpy"]
    code = np.zeros(len(left[0]) + len(right[0]), dtype=np.int64) if left else None
    for a, b in zip(left, right):
        values, k_no = np.unique(np.concatenate([a, b]), return_inverse=True)
        code = code * len(values) + k_no.reshape(-1)
    return code[: len(left[0])], code[len(left[0]) :]


def overlap_pairs(
    left: pl.DataFrame, right: pl.DataFrame, by: list[str], right_by: list[str], left_span, right_span
) -> tuple[pl.Series, pl.Series] | None:
    """`intervals._overlap_join_small`'s pairs as row positions (left, right): equal keys, and the
    right start inside the left interval with the right end after the left start, or the left
    start strictly inside the right interval; None (the join) without numpy, where a key or time
    is null or not an integer, or for more than two keys."""
    lf, rf = left[[*by, *left_span]], right[[*right_by, *right_span]]
    if len(by) > 2 or (cols := int64_arrays([*lf.get_columns(), *rf.get_columns()])) is None:
        return None
    np = sys.modules["numpy"]
    *lk, a, b = cols[: lf.width]
    *rk, c, d = cols[lf.width :]
    lcode, rcode = _key_codes(lk, rk)
    r_order = np.argsort(rcode, kind="stable")
    lo = np.searchsorted(rcode[r_order], lcode, side="left")
    counts = np.searchsorted(rcode[r_order], lcode, side="right") - lo
    li = np.repeat(np.arange(len(lcode)), counts)  # every pair of equal keys, then the overlap test
    ri = r_order[np.repeat(lo, counts) + np.arange(len(li)) - np.repeat(np.cumsum(counts) - counts, counts)]
    a, b, c, d = a[li], b[li], c[ri], d[ri]
    keep = ((c >= a) & (c < b) & (d > a)) | ((c < a) & (a < d))
    return pl.Series(li[keep]).cast(pl.UInt32), pl.Series(ri[keep]).cast(pl.UInt32)


def union_sorted(us, ue, s, e) -> tuple:
    """The disjoint sorted union (us, ue) (int64 arrays, empty for none) and intervals (s, e)
    sorted by start, as one disjoint sorted union: the rows merged by start (a search for where
    each of (s, e) goes), then one sweep (a run ends where a start passes every earlier end, as
    `intervals.merge_sorted`); ends before starts are the caller's to rule out."""
    np = sys.modules["numpy"]
    if us.size:
        at = np.searchsorted(us, s, side="right") + np.arange(s.size)
        mine = np.zeros(us.size + s.size, bool)
        mine[at] = True
        ms, me = np.empty(mine.size, np.int64), np.empty(mine.size, np.int64)
        ms[at], me[at], ms[~mine], me[~mine] = s, e, us, ue
    else:
        ms, me = s, e
    reach = np.maximum.accumulate(me)
    new = np.ones(ms.size, bool)
    new[1:] = ms[1:] > reach[:-1]
    last = np.ones(ms.size, bool)
    last[:-1] = new[1:]
    return ms[new], reach[last]


def covered_until(us, ue, before, x):
    """`intervals._covered_until` on arrays: the time of a disjoint sorted union (us, ue;
    `before`: the time it covers before each interval) from -inf to each x, the interval
    starting last by x binary searched, counted up to x or its end; 0 before the first."""
    np = sys.modules["numpy"]
    i = np.searchsorted(us, x, side="right") - 1
    at = np.maximum(i, 0)
    return np.where(i >= 0, before[at] + np.minimum(x, ue[at]) - us[at], 0)


def covered_between(us, ue, a, b):
    """The time of a disjoint sorted union (us, ue) inside each [a, b] (int64 arrays): what it
    covers up to b less what it covers up to a (`covered_until` on its prefix sums), clipped at
    0 as `intervals.covered` clips it."""
    np = sys.modules["numpy"]
    length = ue - us
    before = np.cumsum(length) - length
    d = covered_until(us, ue, before, b) - covered_until(us, ue, before, a)
    return np.where(d > 0, d, 0)


def union_covered(key, s, e, qkey, a, b):
    """Per query row (qkey, a, b: int64 arrays): the time inside [a, b] covered by the union of
    the intervals (s, e) of its key, as `intervals.covered` over `intervals.merge` by that key
    gives it (0 where its key has none, or b is before a); None where an interval ends before
    it starts (the frames' version)."""
    np = sys.modules["numpy"]
    if (e < s).any():
        return None
    order = np.argsort(s, kind="stable")
    key, s, e = key[order], s[order], e[order]
    out = np.zeros(len(qkey), np.int64)
    none = np.empty(0, np.int64)
    for k in np.unique(qkey):
        if not (mine := key == k).any():
            continue
        us, ue = union_sorted(none, none, s[mine], e[mine])
        at = qkey == k
        out[at] = covered_between(us, ue, a[at], b[at])
    return out
