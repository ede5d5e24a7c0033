"""`gpu_time.clip_to_windows` against a single window (its Series path) and against several
(the overlap join), worked by hand."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses import gpu_time

INTERVALS = pl.DataFrame(
    {"device": [0, 0, 0, 0, 1], "start_ns": [0, 4, 8, 25, 6], "end_ns": [5, 12, 20, 30, 9], "tag": list("abcde")}
)


def _windows(rows: list[tuple[int, int | None, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"device": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row"
    )


def test_one_window_clips_the_intervals_that_overlap_it():
    # window [5, 22) on device 0: [0, 5) only touches it, [4, 12) -> [5, 12), [8, 20) inside,
    # [25, 30) after it; device 1 has no window
    got = gpu_time.clip_to_windows(INTERVALS, _windows([(0, 3, 5, 22)]))
    assert got.columns == ["device", "start_ns", "end_ns", "tag", "step", "w_start_ns", "w_end_ns"]
    assert got.rows() == [(0, 5, 12, "b", 3, 5, 22), (0, 8, 20, "c", 3, 5, 22)]


def test_one_window_is_the_general_path_with_another_window_that_meets_nothing():
    one = gpu_time.clip_to_windows(INTERVALS, _windows([(0, None, 5, 22)]))
    two = gpu_time.clip_to_windows(INTERVALS, _windows([(0, None, 5, 22), (1, None, 100, 200)]))
    assert one.schema == two.schema and one.equals(two)
    assert one["step"].null_count() == one.height == 2


def _query_idle(busy: pl.DataFrame, wins: pl.DataFrame, monkeypatch) -> pl.DataFrame:
    with monkeypatch.context() as m:
        m.setattr(gpu_time, "_idle_disjoint", lambda *a: None)
        m.setattr(gpu_time, "_idle_small", lambda *a: None)
        return gpu_time.idle_intervals(busy, wins)


def test_idle_of_merged_busy_intervals_is_the_query_s(monkeypatch):
    # device 0: busy [10, 20), [25, 30), [40, 41); device 1: no busy time; device 2: busy, no window;
    # device 3: busy starting before its window and ending after it (no lead, no trail)
    busy = pl.DataFrame({"device": [0, 0, 0, 2, 3], "start_ns": [10, 25, 40, 5, 0], "end_ns": [20, 30, 41, 7, 100]})
    wins = _windows([(0, 1, 0, 35), (0, 2, 35, 50), (1, None, 3, 9), (3, None, 10, 90)])
    got = gpu_time.idle_intervals(busy, wins)
    assert got.rows() == [
        (0, 0, 10, 0, 10),
        (0, 20, 25, 20, 25),
        (0, 30, 40, 30, 40),
        (0, 41, 50, 41, 50),
        (1, 3, 9, 3, 9),
    ]
    assert (
        got.equals(_query_idle(busy, wins, monkeypatch)) and got.schema == _query_idle(busy, wins, monkeypatch).schema
    )


def test_idle_of_overlapping_busy_intervals_takes_the_query(monkeypatch):
    busy = pl.DataFrame({"device": [0, 0], "start_ns": [10, 15], "end_ns": [20, 30]})  # not a union
    wins = _windows([(0, None, 0, 40)])
    assert gpu_time._idle_disjoint(busy, wins) is None
    assert gpu_time.idle_intervals(busy, wins).equals(_query_idle(busy, wins, monkeypatch))
