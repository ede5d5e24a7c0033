"""The numpy steps of small frames' sweeps (`analyses.arrays`) give what the polars calls give:
`merge` and `covered` on random intervals, with numpy imported and hidden."""

from __future__ import annotations

import random
import sys

import numpy  # noqa: F401  (the numpy steps run where it is imported)
import polars as pl
import pytest

from traceanalyzer.analyses.arrays import int_order
from traceanalyzer.analyses.intervals import coverage_index, covered, merge


def _without_numpy(fn, *args):
    """`fn(*args)` as a process that never imported numpy runs it (the polars calls)."""
    held = sys.modules.pop("numpy")
    try:
        return fn(*args)
    finally:
        sys.modules["numpy"] = held


def _intervals(rng: random.Random, n: int) -> pl.DataFrame:
    starts = [rng.randint(0, 200) for _ in range(n)]
    return pl.DataFrame(
        {
            "device": [rng.randint(0, 2) for _ in starts],
            "stream": [rng.randint(7, 9) for _ in starts],
            "ts_ns": starts,
            "end_ns": [s + rng.choice([0, 1, 5, 20, 60]) for s in starts],
        }
    )


@pytest.mark.parametrize("seed", range(3))
def test_merge_and_covered_match_the_polars_calls(seed):
    rng = random.Random(seed)
    for _ in range(40):
        df = _intervals(rng, rng.randint(1, 60))
        by = rng.choice([["device"], ["device", "stream"]])
        merged = merge(df, by)
        assert merged.equals(_without_numpy(merge, df, by))
        index = coverage_index(merged, by)
        assert index.equals(_without_numpy(coverage_index, merged, by))
        q = _intervals(rng, rng.randint(1, 30)).rename({"ts_ns": "a", "end_ns": "b"}).with_row_index("q")
        got = covered(q, index, by, "a", "b", "cov")
        assert got.equals(_without_numpy(covered, q, index, by, "a", "b", "cov"))
        # the covered time worked out by hand: the overlap with each merged interval of its keys
        for row in got.iter_rows(named=True):
            keys = merged.filter(*(pl.col(k) == row[k] for k in by))
            want = sum(max(0, min(e, row["b"]) - max(s, row["a"])) for s, e in keys.select("start_ns", "end_ns").rows())
            assert row["cov"] == want


def test_int_order_sorts_stably_and_declines_nulls():
    keys = [pl.Series([2, 1, 2, 1]), pl.Series([5, 5, 3, 5])]
    assert int_order(keys).to_list() == [1, 3, 2, 0]  # by the first key, then the second, ties in row order
    assert int_order([pl.Series([1, None])]) is None
    assert int_order([pl.Series(["a", "b"])]) is None


@pytest.mark.parametrize("seed", range(3))
def test_idle_intervals_and_crossings_match_the_polars_calls(seed):
    from traceanalyzer.analyses import gpu_time
    from traceanalyzer.analyses.crossing import crossing_events

    rng = random.Random(seed)
    for _ in range(40):
        busy = merge(_intervals(rng, rng.randint(1, 40)), ["device"])
        starts = [rng.randint(-10, 150) for _ in range(rng.randint(1, 4))]
        wins = pl.DataFrame(
            {
                "device": [rng.randint(0, 3) for _ in starts],
                "step": list(range(len(starts))),
                "start_ns": starts,
                "end_ns": [s + rng.randint(0, 120) for s in starts],
            }
        )
        idle = gpu_time.idle_intervals(busy, wins)
        assert idle.equals(_without_numpy(gpu_time.idle_intervals, busy, wins))
        cpu = _intervals(rng, rng.randint(2, 60)).rename({"device": "pid", "stream": "tid"})
        assert crossing_events(cpu) == _without_numpy(crossing_events, cpu)


@pytest.mark.parametrize("seed", range(3))
def test_overlap_join_pairs_match_the_join(seed):
    from traceanalyzer.analyses.intervals import overlap_join

    rng = random.Random(seed)
    for _ in range(40):
        left = _intervals(rng, rng.randint(1, 30)).with_row_index("l")
        right = _intervals(rng, rng.randint(1, 30)).rename(
            {"device": "r_device", "stream": "r_stream", "ts_ns": "r_s", "end_ns": "r_e"}
        )
        right = right.with_columns(pl.col("r_device").cast(pl.Int32)).with_row_index("r")  # cast as the join does
        args = (left, right, ["device"], ("ts_ns", "end_ns"), ("r_s", "r_e"), ["r_device"])
        got = overlap_join(*args)
        assert got.schema == _without_numpy(overlap_join, *args).schema
        pairs = sorted(got.select("l", "r").rows())
        assert pairs == sorted(_without_numpy(overlap_join, *args).select("l", "r").rows())
        # by hand: equal devices, and the intervals overlap (a zero-length one at the other's start counts)
        want = [
            (x["l"], y["r"])
            for x in left.iter_rows(named=True)
            for y in right.iter_rows(named=True)
            if x["device"] == y["r_device"]
            and ((x["ts_ns"] <= y["r_s"] < x["end_ns"] and y["r_e"] > x["ts_ns"]) or (y["r_s"] < x["ts_ns"] < y["r_e"]))
        ]
        assert pairs == sorted(want)


@pytest.mark.parametrize("seed", range(3))
def test_union_covered_is_covered_over_the_merged_keys(seed):
    """`union_covered` (each key's union swept on arrays, two searches a row) gives what
    `covered` over `merge` by that key gives each query row, and what the merged intervals give
    worked out by hand: 0 for a key with no interval and for an interval ending before its start."""
    import numpy as np

    from traceanalyzer.analyses.arrays import union_covered

    rng = random.Random(seed)
    for _ in range(30):
        iv = _intervals(rng, rng.randint(1, 50))
        q = _intervals(rng, rng.randint(1, 20)).rename({"ts_ns": "a", "end_ns": "b"})
        q = q.with_columns(b=pl.col("b") - pl.lit(rng.choice([0, 30])))  # some end before they start
        cols = [np.asarray(iv[c].to_list(), np.int64) for c in ("device", "ts_ns", "end_ns")]
        got = union_covered(*cols, *(np.asarray(q[c].to_list(), np.int64) for c in ("device", "a", "b")))
        merged = merge(iv, ["device"])
        want = covered(q.with_row_index("q"), coverage_index(merged, ["device"]), ["device"], "a", "b", "cov")
        assert got.tolist() == want.sort("q")["cov"].to_list()
        for row, cov in zip(q.iter_rows(named=True), got.tolist()):
            mine = merged.filter(pl.col("device") == row["device"]).select("start_ns", "end_ns").rows()
            assert cov == sum(max(0, min(e, row["b"]) - max(s, row["a"])) for s, e in mine)
    assert union_covered(*(np.array([0, 0]), np.array([5, 9]), np.array([4, 12])), *(np.array([0]),) * 3) is None
