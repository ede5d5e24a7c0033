"""`intervals.overlap_join` (the sorted sweep that replaced join_where between event tables)
against the definition, pair by pair: every (left, right) with equal keys, left start < right
end and left end > right start, on random small frames with ties, zero-length intervals and
null keys."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from traceanalyzer.analyses import intervals
from traceanalyzer.analyses.intervals import _merge_sweep, key_starts, merge, overlap_join


@pytest.fixture(params=["join", "sweep"])
def path(request, monkeypatch):
    """Each overlap_join test on both paths: small frames are an equi-join on the keys
    (`SMALL_PAIRS`), larger ones the sorted sweep (forced here by a bound of no pairs)."""
    if request.param == "sweep":
        monkeypatch.setattr(intervals, "SMALL_PAIRS", -1)
    return request.param


def _frames(seed: int, few: bool = False):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(0, 30, 2)
    if few:  # a few left rows against many right ones: `overlap_join` narrows the right side first
        n, m = rng.integers(1, 5), rng.integers(40, 120)
    left = pl.DataFrame({"g": rng.integers(0, 3, n), "a": rng.integers(0, 20, n)}).with_columns(
        b=pl.col("a") + pl.Series(rng.integers(0, 6, n)), lid=pl.int_range(pl.len())
    )
    right = pl.DataFrame({"_g": rng.integers(0, 3, m), "s": rng.integers(0, 20, m)}).with_columns(
        e=pl.col("s") + pl.Series(rng.integers(0, 6, m)), rid=pl.int_range(pl.len())
    )
    if n and seed % 3 == 0:
        left = left.with_columns(g=pl.when(pl.col("lid") == 0).then(None).otherwise("g"))
    return left, right


def _definition(left: pl.DataFrame, right: pl.DataFrame, keyed: bool) -> list[tuple[int, int]]:
    out = []
    for l in left.iter_rows(named=True):  # noqa: E741
        for r in right.iter_rows(named=True):
            same = not keyed or (l["g"] is not None and l["g"] == r["_g"])
            if same and r["s"] < l["b"] and r["e"] > l["a"]:
                out.append((l["lid"], r["rid"]))
    return sorted(out)


@pytest.mark.parametrize("seed", range(60))
def test_overlap_join_is_the_definition(seed, path):
    left, right = _frames(seed)
    got = overlap_join(left, right, ["g"], ("a", "b"), ("s", "e"), right_by=["_g"])
    assert sorted(got.select("lid", "rid").rows()) == _definition(left, right, True)
    assert set(got.columns) == set(left.columns) | set(right.columns)
    every = overlap_join(left, right, [], ("a", "b"), ("s", "e"))
    assert sorted(every.select("lid", "rid").rows()) == _definition(left, right, False)


@pytest.mark.parametrize("seed", range(40))
def test_overlap_join_of_a_few_against_many_is_the_definition(seed, path):
    left, right = _frames(seed, few=True)
    got = overlap_join(left, right, ["g"], ("a", "b"), ("s", "e"), right_by=["_g"])
    assert sorted(got.select("lid", "rid").rows()) == _definition(left, right, True)
    every = overlap_join(left, right, [], ("a", "b"), ("s", "e"))
    assert sorted(every.select("lid", "rid").rows()) == _definition(left, right, False)


def _union_by_definition(df: pl.DataFrame, by: list[str]) -> list[tuple]:
    """The union per group by a plain loop: sort by start, extend the open run while the next
    interval starts at or before its end (touching intervals join)."""
    out = []
    for key, part in sorted(df.group_by(by), key=lambda kv: tuple((k is not None, k or 0) for k in kv[0])):
        run = None
        for s, e in sorted(zip(part["ts_ns"], part["end_ns"])):
            if run is not None and s <= run[1]:
                run[1] = max(run[1], e)
                continue
            if run is not None:
                out.append((*key, *run))
            run = [s, e]
        out.append((*key, *run))
    return out


def test_merge_hand_worked():
    # thread (1, 5): [0, 10] and [10, 12] touch, [3, 4] inside, [20, 20] alone; thread (1, 6):
    # [5, 30] must not be swallowed by thread (1, 5)'s runs, nor they by it.
    df = pl.DataFrame(
        {"pid": [1, 1, 1, 1, 1], "tid": [5, 5, 5, 5, 6], "ts_ns": [0, 10, 3, 20, 5], "end_ns": [10, 12, 4, 20, 30]}
    )
    got = merge(df, ["pid", "tid"]).rows()
    assert got == [(1, 5, 0, 12), (1, 5, 20, 20), (1, 6, 5, 30)]
    # two threads spanning 2^61 ns: their bands would pass int64, so the group-by answers
    far = pl.DataFrame({"pid": [1, 2], "tid": [0, 0], "ts_ns": [0, 0], "end_ns": [1 << 61, 5]})
    assert _merge_sweep(far.rename({"ts_ns": "start_ns"}), ["pid", "tid"]) is None
    assert merge(far, ["pid", "tid"]).rows() == [(1, 0, 0, 1 << 61), (2, 0, 0, 5)]


@pytest.mark.parametrize("seed", range(60))
def test_merge_is_the_definition(seed):
    """The banded sweep (`intervals._merge_sweep`) and the group-by it falls back to (bands
    past int64: the last unit) both give the union, null keys included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    unit = [1, 10**9, 1 << 56][seed % 3]
    df = pl.DataFrame(
        {"pid": rng.integers(0, 3, n), "tid": rng.integers(0, 2, n), "ts_ns": rng.integers(-5, 50, n) * unit}
    ).with_columns(end_ns=pl.col("ts_ns") + pl.Series(rng.integers(0, 12, n)) * unit)
    if seed % 4 == 0:
        df = df.with_columns(pid=pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise("pid"))
    ordered = df.select("pid", "tid", start_ns="ts_ns", end_ns="end_ns").sort("pid", "tid", "start_ns")
    if unit < 1 << 56:
        assert _merge_sweep(ordered, ["pid", "tid"]) is not None
    for by in (["pid", "tid"], ["pid"]):
        assert merge(df, by).rows() == _union_by_definition(df, by)


def test_overlap_join_by_two_keys_with_null_and_unmatched_keys(path):
    """Worked by hand: L0 (1,1) [0,10) meets R0 [5,20); R1 starts where L1 ends and R2 ends
    where L0 starts (no overlap); L3 starts inside R3; a null key (L2, R4) and a key only the
    right has (R5) match nothing."""
    left = pl.DataFrame(
        {"pid": [1, 1, None, 2], "tid": [1, 2, 1, 1], "a": [0, 0, 0, 5], "b": [10, 10, 10, 6], "lid": [0, 1, 2, 3]}
    )
    right = pl.DataFrame(
        {
            "_pid": [1, 1, 1, 2, None, 3],
            "_tid": [1, 2, 1, 1, 1, 1],
            "s": [5, 10, -5, 0, 0, 0],
            "e": [20, 12, 0, 100, 10, 10],
            "rid": [0, 1, 2, 3, 4, 5],
        }
    )
    got = overlap_join(left, right, ["pid", "tid"], ("a", "b"), ("s", "e"), right_by=["_pid", "_tid"])
    assert sorted(got.select("lid", "rid").rows()) == [(0, 0), (3, 3)]


def test_overlap_join_when_the_key_bands_would_overflow_int64(path):
    """Two keys whose times span 2^61 ns: the bands do not fit int64, the as-of path answers."""
    far = 1 << 61
    left = pl.DataFrame({"k": [1, 2], "a": [0, far], "b": [10, far + 10], "lid": [0, 1]})
    right = pl.DataFrame({"_k": [2, 1], "s": [far + 5, 9], "e": [far + 6, 30], "rid": [0, 1]})
    got = overlap_join(left, right, ["k"], ("a", "b"), ("s", "e"), right_by=["_k"])
    assert sorted(got.select("lid", "rid").rows()) == [(0, 1), (1, 0)]


def test_key_starts_hand_worked():
    """A group starts on the first row and wherever a key differs from the row before; two
    nulls are equal keys (sorted frames hold their null keys together)."""
    df = pl.DataFrame({"pid": [1, 1, None, None, 2], "tid": [1, 2, 2, 2, 2]})
    assert key_starts(df, ["pid", "tid"]).to_list() == [True, True, True, False, True]
    assert key_starts(df, ["tid"]).to_list() == [True, True, False, False, False]
    assert key_starts(df, []).to_list() == [True, False, False, False, False]
    assert key_starts(df.head(1), ["pid"]).to_list() == [True]


def test_overlap_join_paths_give_the_same_columns_and_pairs(monkeypatch):
    """Worked by hand: left [10, 5) (ending before it starts) lies across right [6, 20) by its
    start, which the sweep pairs (a left start strictly inside a right interval); left [0, 4)
    meets [3, 8); [20, 30) meets nothing. The right key (Int32) comes out as the left one's
    dtype (Int64) on both paths, every column of both frames kept."""
    left = pl.DataFrame({"k": [1, 1, 1], "a": [10, 0, 20], "b": [5, 4, 30], "lid": [0, 1, 2]})
    right = pl.DataFrame({"_k": pl.Series([1, 1], dtype=pl.Int32), "s": [6, 3], "e": [20, 8], "rid": [0, 1]})
    joined = overlap_join(left, right, ["k"], ("a", "b"), ("s", "e"), right_by=["_k"])
    monkeypatch.setattr(intervals, "SMALL_PAIRS", -1)
    swept = overlap_join(left, right, ["k"], ("a", "b"), ("s", "e"), right_by=["_k"])
    assert sorted(swept.select("lid", "rid").rows()) == [(0, 0), (1, 1)]
    assert joined.schema == swept.schema and joined.schema["_k"] == pl.Int64
    assert joined.sort("lid", "rid").equals(swept.sort("lid", "rid"))


@pytest.mark.parametrize("seed", range(6))
def test_coverage_index_before_on_numpy_is_the_polars_one(seed, monkeypatch):
    """`coverage_index`'s `_before` (the time covered before each interval in its group) is the
    same on numpy's running sums as on polars', and the sum of the group's earlier lengths."""
    import types

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    df = pl.DataFrame({"g": rng.integers(0, 3, n), "s": rng.integers(0, 500, n)})
    df = merge(df.with_columns(e=pl.col("s") + pl.Series(rng.integers(0, 30, n))), ["g"], "s", "e")
    fast = intervals.coverage_index(df, ["g"], presorted=True)
    monkeypatch.setattr(intervals, "sys", types.SimpleNamespace(modules={}))
    slow = intervals.coverage_index(df, ["g"], presorted=True)
    assert fast.equals(slow)
    rows = df.rows()
    want = [sum(e - s for g2, s, e in rows[:i] if g2 == g) for i, (g, _, _) in enumerate(rows)]
    assert fast["_before"].to_list() == want
