"""nest / innermost_containing on small hand-built frames, with the expected depth and parent
written out by hand, plus random properly nested trees checked against the tree they came from."""

from __future__ import annotations

import random

import numpy  # noqa: F401  (the small paths run where numpy is imported)
import polars as pl
import pytest

from traceanalyzer import links
from traceanalyzer.links import innermost_containing, nest

# (id, pid, tid, ts_ns, end_ns, expected depth, expected parent_id)
HAND = [
    # thread (1, 1)
    (0, 1, 1, 0, 100, 0, None),
    (1, 1, 1, 10, 40, 1, 0),
    (2, 1, 1, 15, 20, 2, 1),
    (3, 1, 1, 20, 30, 2, 1),  # starts where its sibling 2 ends: a sibling, not a child
    (4, 1, 1, 50, 90, 1, 0),
    (5, 1, 1, 50, 60, 2, 4),  # equal start: the longer one is the parent
    (6, 1, 1, 200, 210, 0, None),  # after the first top-level range: a second root
    (11, 1, 1, 40, 40, 1, 0),  # zero duration, where 1 ends
    (12, 1, 1, 50, 50, 3, 5),  # zero duration at the start of 4 and 5
    (13, 1, 1, 0, 0, 1, 0),  # zero duration at the start of 0
    # thread (1, 2): the same times as on thread (1, 1) do not interact
    (7, 1, 2, 10, 40, 0, None),
    (8, 1, 2, 10, 40, 1, 7),  # identical range: the lower id is the parent
    (9, 1, 2, 15, 35, 2, 8),
    # pid 2, tid 1: the same tid in another process is another thread
    (10, 2, 1, 0, 100, 0, None),
]


def _frame(rows) -> pl.DataFrame:
    return pl.DataFrame(
        [r[:5] for r in rows],
        schema={"id": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )


@pytest.fixture
def nested() -> pl.DataFrame:
    shuffled = HAND[:]
    random.Random(7).shuffle(shuffled)  # the input order must not matter
    return nest(_frame(shuffled), "id")


def test_nest_depth_and_parent(nested):
    got = nested.sort("id").select("id", "depth", "parent_id").rows()
    assert got == sorted((r[0], r[5], r[6]) for r in HAND)


def test_nest_keeps_rows_and_columns(nested):
    assert nested.height == len(HAND)
    assert {"id", "pid", "tid", "ts_ns", "end_ns", "depth", "parent_id"} <= set(nested.columns)
    assert nested.schema["parent_id"] == pl.Int64


def test_nest_siblings_only():
    df = _frame([(0, 1, 1, 0, 10), (1, 1, 1, 10, 20), (2, 1, 1, 25, 30)])
    assert nest(df, "id").sort("id").select("depth", "parent_id").rows() == [(0, None)] * 3


def test_nest_empty():
    out = nest(_frame([]), "id")
    assert out.is_empty() and {"depth", "parent_id"} <= set(out.columns)


# (pid, tid, ts_ns, end_ns, point_end, expected innermost id)
POINTS = [
    (1, 1, 16, 18, "end_ns", 2),
    (1, 1, 16, 25, "end_ns", 1),  # starts in 2, ends after it: its parent holds it
    (1, 1, 41, 45, "end_ns", 0),  # in the gap between 1 and 4
    (1, 1, 55, 58, "end_ns", 5),
    (1, 1, 150, 160, "end_ns", None),  # between two roots
    (1, 1, -5, 1, "end_ns", None),  # starts before everything
    (1, 1, 95, 150, "end_ns", None),  # starts inside 0, ends after it
    (1, 2, 16, 18, "end_ns", 9),
    (2, 1, 16, 18, "end_ns", 10),
    (3, 3, 0, 1, "end_ns", None),  # a thread without intervals
    (1, 1, 16, 99, "ts_ns", 2),  # only the start has to be inside
]


@pytest.mark.parametrize("point_end", ["end_ns", "ts_ns"])
def test_innermost_containing(nested, point_end):
    cases = [p for p in POINTS if p[4] == point_end]
    points = pl.DataFrame(
        [(i, *p[:4]) for i, p in enumerate(cases)],
        schema={"point": pl.Int64, "pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )
    out = innermost_containing(points, nested, "id", "inside", point_end=point_end)
    assert out["point"].to_list() == list(range(len(cases)))  # row order kept
    assert out["inside"].to_list() == [p[5] for p in cases]


def test_innermost_containing_without_intervals():
    points = pl.DataFrame({"pid": [1], "tid": [1], "ts_ns": [5], "end_ns": [6]})
    empty = nest(_frame([]), "id")
    assert innermost_containing(points, empty, "id", "inside")["inside"].to_list() == [None]


# -- random trees ------------------------------------------------------------------------------
def _random_tree(rng: random.Random, threads: int = 3, roots: int = 6):
    """Properly nested intervals with ids in pre-order; returns rows and (depth, parent) per id."""
    rows, truth = [], {}

    def grow(pid, tid, start, end, depth, parent):
        node = len(rows)
        rows.append((node, pid, tid, start, end))
        truth[node] = (depth, parent)
        if depth >= 6 or end - start < 4:
            return
        t = start
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.2 and t < end:  # zero duration, strictly inside a gap
                t += 1
                if t >= end:
                    break
                z = len(rows)
                rows.append((z, pid, tid, t, t))
                truth[z] = (depth + 1, node)
                t += 1
                continue
            s = t if rng.random() < 0.4 else t + rng.randint(1, 5)  # touching or after a gap
            e = min(end, s + rng.randint(1, max(1, (end - start) // 2)))
            if s >= e:
                break
            grow(pid, tid, s, e, depth + 1, node)
            t = e

    for th in range(threads):
        t = 0
        for _ in range(roots):
            s = t + rng.randint(0, 3)
            e = s + rng.randint(5, 400)
            grow(1, th, s, e, 0, None)
            t = e
    return rows, truth


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_nest_matches_generated_trees(seed):
    rng = random.Random(seed)
    rows, truth = _random_tree(rng)
    rng.shuffle(rows)
    out = nest(_frame(rows), "id")
    got = {i: (d, p) for i, d, p in out.select("id", "depth", "parent_id").iter_rows()}
    assert got == truth


@pytest.mark.parametrize("seed", [4, 5])
def test_innermost_containing_matches_brute_force(seed):
    rng = random.Random(seed)
    rows, truth = _random_tree(rng)
    intervals = nest(_frame(rows), "id")
    points = []
    for k in range(400):
        tid = rng.randrange(3)
        ts = rng.randint(-5, 2500) * 2 + 1  # odd: never on a boundary (all boundaries are ints...)
        points.append((k, 1, tid, ts, ts + rng.choice([0, 0, 2, 10, 50])))
    # ...so work on a doubled time axis where every interval boundary is even
    intervals = intervals.with_columns(pl.col("ts_ns") * 2, pl.col("end_ns") * 2)
    pts = pl.DataFrame(points, schema=["point", "pid", "tid", "ts_ns", "end_ns"], orient="row")
    got = innermost_containing(pts, intervals, "id", "inside")["inside"].to_list()

    def brute(tid, ts, end):
        holding = [r for r in rows if r[2] == tid and 2 * r[3] <= ts and end <= 2 * r[4]]
        return max(holding, key=lambda r: truth[r[0]][0])[0] if holding else None

    assert got == [brute(tid, ts, end) for _, _, tid, ts, end in points]


# -- the thread as one int64 key, or its two columns ------------------------------------------------
# (pid offset, tid offset): small ids (one int64 key); negative tids (Kineto's wrapped pthread ids:
# the key is offset by the minimum); ranges whose product passes 2^62 (the two columns themselves).
THREAD_IDS = [(0, 0), (0, -(2**31) - 7), (2**40, 2**40)]


@pytest.mark.parametrize(("pid_off", "tid_off"), THREAD_IDS)
def test_nest_and_containing_whatever_the_thread_ids(nested, pid_off, tid_off):
    def moved(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("pid") * (1 + pid_off), pl.col("tid") + pl.col("tid") * tid_off)

    # pid 1 and 2 -> 1 + off and 2 + 2 off; tid 1 and 2 -> 1 + off and 2 + 2 off: still distinct
    shuffled = HAND[:]
    random.Random(3).shuffle(shuffled)
    out = nest(moved(_frame(shuffled)), "id")
    assert out["id"].to_list() == [r[0] for r in shuffled]  # the rows keep their order
    assert sorted(out.select("id", "depth", "parent_id").rows()) == sorted((r[0], r[5], r[6]) for r in HAND)
    cases = [p for p in POINTS if p[4] == "end_ns"]
    points = pl.DataFrame(
        [p[:4] for p in cases],
        schema={"pid": pl.Int64, "tid": pl.Int64, "ts_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )
    got = innermost_containing(moved(points), moved(nested), "id", "inside")["inside"].to_list()
    assert got == [p[5] for p in cases]


def test_threads_differing_only_in_pid_stay_apart_with_a_wide_tid_range():
    # Two threads (pid 1 and 2, same tid) and a third whose tid alone spans 2^61: the key
    # (pid - 1) * span + (tid - min) must not let pid 2's ranges nest pid 1's.
    rows = [(0, 1, 5, 0, 100), (1, 2, 5, 10, 20), (2, 1, 2**61, 0, 1)]
    out = nest(_frame(rows), "id").sort("id")
    assert out.select("depth", "parent_id").rows() == [(0, None)] * 3
    pts = pl.DataFrame({"pid": [2, 1], "tid": [5, 5], "ts_ns": [12, 12], "end_ns": [13, 13]})
    assert innermost_containing(pts, out, "id", "inside")["inside"].to_list() == [1, 0]


@pytest.mark.parametrize("shift", [0, 2**61])
def test_nest_whatever_the_span_of_ends(shift):
    # The ends are sorted by (thread, end) as one packed int64 key where (threads x span) fits
    # in 2^62, else by the two columns: thread 2's times moved 2^61 later take the second way
    # (3 threads x a 2^61 span), and nesting is the same either way.
    rows, truth = _random_tree(random.Random(7))
    moved = [(i, p, t, ts + shift * (t == 2), end + shift * (t == 2)) + tuple(rest) for i, p, t, ts, end, *rest in rows]
    got = nest(_frame(moved), "id").select("id", "depth", "parent_id").iter_rows()
    assert {i: (d, p) for i, d, p in got} == truth


# -- the numpy path of small frames against the frame path ---------------------------------------
def _by_frames(fn, *args, **kw):
    """`fn` on its polars-frame path (the one frames of `links.SMALL_ROWS` rows or more take)."""
    old = links.SMALL_ROWS
    links.SMALL_ROWS = 0
    try:
        return fn(*args, **kw)
    finally:
        links.SMALL_ROWS = old


def _random_intervals(rng: random.Random, n: int) -> list[tuple]:
    """Intervals not nested properly: overlaps, equal starts, identical ranges, zero lengths."""
    rows = []
    for i in range(n):
        a = rng.randint(0, 30)
        rows.append((i * 3, rng.randint(1, 2), rng.randint(1, 3), a, a + rng.choice([0, 0, 1, 2, 5, 10, 20])))
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_small_paths_match_the_frame_paths(seed):
    rng = random.Random(seed)
    for _ in range(60):
        iv = pl.DataFrame(
            _random_intervals(rng, rng.randint(1, 50)),
            schema={"id": rng.choice([pl.Int64, pl.UInt32]), "pid": pl.Int64, "tid": pl.Int64}
            | {"ts_ns": pl.Int64, "end_ns": pl.Int64},
            orient="row",
        )
        nested = nest(iv, "id")
        assert nested.equals(_by_frames(nest, iv, "id")) and nested.schema == _by_frames(nest, iv, "id").schema
        if rng.random() < 0.3:  # parents that are not among the intervals
            nested = nested.filter(pl.col("id") % 2 == 0)
        if rng.random() < 0.3:
            nested = nested.drop("depth")
        starts = [rng.randint(-2, 35) for _ in range(rng.randint(1, 40))]
        points = pl.DataFrame(
            {
                "pid": [rng.randint(1, 2) for _ in starts],
                "tid": [rng.randint(1, 4) for _ in starts],
                "ts_ns": starts,
                "end_ns": [s + rng.choice([0, 1, 3, 8]) for s in starts],
            }
        )
        for end in ("end_ns", "ts_ns"):
            got = innermost_containing(points, nested, "id", "inside", point_end=end)
            assert got.equals(_by_frames(innermost_containing, points, nested, "id", "inside", point_end=end))
