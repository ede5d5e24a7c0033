"""Two processes that each ran ProfilerStep#0 and #1 (tests/data/malformed/several_processes.json:
pid 100 drives device 0, pid 200 device 1; each step 900 µs, gemm_0 at +50 and gemm_1 at +150 µs,
50 µs each). A step number shared by two processes must not multiply the gaps: each device has, per
step, one gap from gemm_1's end (+200 µs) to the step's end (+900 µs), judged from its own process."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from traceanalyzer.analyses.cpu_activity import step_thread_of as _step_thread_of
from traceanalyzer.session import Session

TRACE = Path(__file__).resolve().parents[1] / "data" / "malformed" / "several_processes.json"


def test_each_row_gets_one_thread_of_the_process_that_launched_the_devices_work():
    # Both processes number their correlations 1..6, so every kernel links to pid 100's launch
    # (the first call of its correlation; gpu.launch_pid): device 1 too, a limit of the linking.
    trace = Session.open(TRACE).trace
    at = pl.DataFrame({"step": [0, 1, 0, 1], "device": [0, 0, 1, 1]})
    got = _step_thread_of(trace, at)
    assert got.height == 4
    launched_by = dict(trace.gpu.group_by("device").agg(pl.col("launch_pid").mode().min()).iter_rows())
    assert got.get_column("step_pid").to_list() == [launched_by[0], launched_by[0], launched_by[1], launched_by[1]]
    assert launched_by[0] == 100
    assert got.get_column("step_tid").to_list() == [1, 1, 1, 1]


def test_a_step_shared_by_two_processes_does_not_multiply_the_gaps():
    gaps = Session.open(TRACE).gaps.all_gaps_ns
    tail = gaps.filter(pl.col("duration_ns") == 700_000).sort("device", "step")
    assert tail.select("device", "step").rows() == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert gaps.select("device", "step", "start_ns").is_duplicated().sum() == 0
