"""The activities around each gap (`gap_edges.edge_activities`) on one banded int64 key give what
the joins on (device, time) give, and the tie rules hold: of the activities ending when a gap
begins, the one that started last; of those starting when it ends, the one launched first."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from tests.synthetic import TraceBuilder
from traceanalyzer.analyses import gpu_time, windows
from traceanalyzer.analyses.gap_edges import _edge_activities_by_join, edge_activities


def _pieces(trace: ta.Trace) -> pl.DataFrame:
    """The idle pieces as `classify_gaps` builds them before their neighbours are looked up."""
    busy = gpu_time.busy_intervals(trace)
    wins = windows.device_windows(trace)
    idle = gpu_time.idle_intervals(busy, wins)
    return (
        gpu_time.clip_to_windows(idle, wins)
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select("device", "step", "start_ns", "end_ns", "prev_end_ns", "next_start_ns")
        .sort("device", "start_ns")
    )


def test_ties_at_a_gaps_edges(tmp_path):
    # Device 0: A (10-20 µs) and B (12-20 µs) both end at 20: B started last, so it is the one
    # before the gap [20, 30). C (launched at 25) and D (launched at 22) both start at 30: D was
    # launched first, so it is the one after. Device 1 runs E at 50-55 µs, on its own band.
    b = TraceBuilder(devices=2)
    b.kernel("A", ts=10, dur=10, launch_ts=5, stream=7)
    b.kernel("B", ts=12, dur=8, launch_ts=6, stream=8)
    b.kernel("C", ts=30, dur=5, launch_ts=25, stream=7)
    b.kernel("D", ts=30, dur=5, launch_ts=22, stream=8)
    b.kernel("E", ts=50, dur=5, launch_ts=40, device=1)
    trace = ta.load(b.write(tmp_path))
    pieces = _pieces(trace)
    prev, nxt = edge_activities(trace, pieces)
    names = trace.gpu["name"]
    got = pieces.with_columns(prev=names.gather(prev), next=names.gather(nxt))
    gap = got.filter((pl.col("device") == 0) & (pl.col("start_ns") == 20_000) & (pl.col("end_ns") == 30_000))
    assert gap.select("prev", "next").rows() == [("B", "D")]
    # and what the joins say, row for row
    by_join = _edge_activities_by_join(trace.gpu.filter(pl.col("device").is_not_null()), pieces)
    assert prev.to_list() == by_join[0].to_list() and nxt.to_list() == by_join[1].to_list()


@pytest.mark.parametrize(
    "name", ["a100_multistream_syncs.json.gz", "gb10_vllm_cudagraphs.pt.trace.json.gz", "mi250_rocm_minitoy.json.gz"]
)
def test_banded_lookups_are_the_joins(SHARED_TRACES, name):
    trace = ta.Session.open(SHARED_TRACES / name).trace  # the steps the Session's windows are cut by
    pieces = _pieces(trace)
    prev, nxt = edge_activities(trace, pieces)
    by_join = _edge_activities_by_join(trace.gpu.filter(pl.col("device").is_not_null()), pieces)
    assert prev.null_count() < pieces.height and nxt.null_count() < pieces.height
    assert prev.to_list() == by_join[0].to_list()
    assert nxt.to_list() == by_join[1].to_list()


@pytest.mark.parametrize(
    "name",
    [
        "a100_multistream_syncs.json.gz",  # 872 activities without a launch time
        "dlrm_v100_8ranks/worker1_step_12.1694128201556.pt.trace.json.gz",  # 64 of 326 without
        "dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz",  # every one launched
        "gb10_vllm_cudagraphs.pt.trace.json.gz",
    ],
)
def test_numpy_lookups_are_the_polars_ones(SHARED_TRACES, name, monkeypatch):
    """Small frames look the edges up on numpy arrays (numpy imported); forced off, the polars
    steps give the same ids, row for row."""
    import numpy  # noqa: F401  (the numpy path runs where numpy is imported)

    from traceanalyzer.analyses import gap_edges

    trace = ta.Session.open(SHARED_TRACES / name).trace
    pieces = _pieces(trace)
    gpu = trace.gpu[["gpu_id", "device", "ts_ns", "end_ns", "launch_ts_ns"]].filter(pl.col("device").is_not_null())
    lo = min(gpu["ts_ns"].min(), pieces["prev_end_ns"].min(), pieces["next_start_ns"].min())
    hi = max(gpu["end_ns"].max(), pieces["prev_end_ns"].max(), pieces["next_start_ns"].max())
    fast = gap_edges._edges_numpy(gpu, pieces, int(gpu["device"].min()), int(lo), int(hi) - int(lo) + 1)
    assert fast is not None
    monkeypatch.setattr(gap_edges, "SMALL_ROWS", 0)  # the polars steps
    slow = edge_activities(trace, pieces)
    assert [s.to_list() for s in fast] == [s.to_list() for s in slow]
    assert [s.dtype for s in fast] == [s.dtype for s in slow] and [s.name for s in fast] == [s.name for s in slow]
