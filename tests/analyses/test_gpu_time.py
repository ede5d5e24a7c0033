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
