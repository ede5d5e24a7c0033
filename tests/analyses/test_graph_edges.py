"""The dependency graph's edges built on arrays: the edge table from its parts (loops dropped,
repeated sync edges once, the ends of launches and syncs), the fork/join searches on the thread
clock against the as-of joins (worked by hand, and a tie left to the joins), and the graph with
its lookups by row the graph with joins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from traceanalyzer import Session, load
from traceanalyzer.analyses import dependency_graph as dg
from traceanalyzer.analyses.thread_clock import ThreadClock


def _arr(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def test_the_edge_table_from_its_parts():
    parts = [
        dg._part("serial", _arr(0, 1, 2), _arr(1, 2, 3)),
        dg._part("sync", _arr(7, 7, 8), _arr(3, 3, 8)),  # 7 -> 3 twice, 8 -> 8 a loop
        dg._part("launch", _arr(1), _arr(7)),
        dg._part("sync", _arr(7, 9), _arr(3, 2)),  # 7 -> 3 a third time
    ]
    e = dg._edge_table(parts)
    assert e.schema == pl.Schema(dg.EDGE_SCHEMA)
    assert e.rows() == [
        (0, 1, "serial", False, False),
        (1, 2, "serial", False, False),
        (2, 3, "serial", False, False),
        (1, 7, "launch", True, False),
        (7, 3, "sync", False, True),  # once, after every other edge
        (9, 2, "sync", False, True),
    ]
    assert all(e[c].n_chunks() == 1 for c in e.columns)
    assert dg._edge_table([]).schema == pl.Schema(dg.EDGE_SCHEMA)


def _cpu(rows: list[tuple[int, int, int, int, str]]) -> pl.DataFrame:
    """Slices (pid, tid, ts_ns, end_ns, kind) in (pid, tid, ts_ns) order, numbered by row."""
    df = pl.DataFrame(rows, schema=["pid", "tid", "ts_ns", "end_ns", "kind"], orient="row")
    threads = df.select("pid", "tid").unique().sort("pid", "tid").with_row_index("_th")
    df = df.join(threads, on=["pid", "tid"], how="left", maintain_order="left")
    return df.with_row_index("node").with_columns(pl.col("node", "_th").cast(pl.Int64))


def _both(cpu: pl.DataFrame, forks: pl.DataFrame):
    threads = cpu.select("pid", "tid").unique().sort("pid", "tid")
    clock = ThreadClock.of(threads, [pl.DataFrame({"lo": [0], "hi": [1000]})])
    keep = (pl.col("kind") != "thread_wait") & ~((pl.col("pid") == 1) & (pl.col("tid") == 1))
    cols = ["pid", "gap_a", "gap_b", "_dst", "_ts", "_jsrc", "_te"]
    fast = dg._forks_on_clock(cpu, forks, keep, clock)
    slow = dg._forks_by_joins(cpu, forks, keep).select(cols).sort("gap_a")
    return (None if fast is None else fast.select(cols).sort("gap_a")), slow


def test_forks_on_the_clock_are_the_joins_worked_by_hand():
    # main thread (1, 1) idle in [100, 400); threads (1, 2) and (1, 3) work in it; (2, 5) is
    # another process; (1, 2)'s [100, 150) is a wait and does not count
    cpu = _cpu(
        [
            (1, 1, 0, 100, "cpu_op"),  # node 0
            (1, 1, 100, 400, "python"),  # node 1: the gap
            (1, 2, 100, 150, "thread_wait"),  # 2
            (1, 2, 150, 250, "launch"),  # 3
            (1, 2, 250, 320, "cpu_op"),  # 4
            (1, 3, 130, 200, "cpu_op"),  # 5: the first to start after 100
            (1, 3, 200, 390, "cpu_op"),  # 6: the last to end before 400
            (1, 3, 390, 500, "cpu_op"),  # 7: ends after 400
            (2, 5, 90, 110, "cpu_op"),  # 8: another process
        ]
    )
    forks = pl.DataFrame({"pid": [1, 1], "gap_a": [100, 600], "gap_b": [400, 700]})
    fast, slow = _both(cpu, forks)
    assert fast.equals(slow)
    assert fast.row(0) == (1, 100, 400, 5, 130, 6, 390)
    assert fast.row(1)[3:5] == (None, None)  # nothing starts after 600
    assert fast.row(1)[5:] == (7, 500)  # the last to end by 700


def test_forks_on_the_clock_leave_a_tie_to_the_joins():
    cpu = _cpu(
        [
            (1, 1, 0, 100, "cpu_op"),
            (1, 1, 100, 400, "python"),
            (1, 2, 130, 200, "cpu_op"),
            (1, 3, 130, 180, "cpu_op"),  # starts with (1, 2)'s: which one the joins take is theirs
        ]
    )
    fast, slow = _both(cpu, pl.DataFrame({"pid": [1], "gap_a": [100], "gap_b": [400]}))
    assert fast is None
    assert slow["_ts"].to_list() == [130]


@pytest.mark.parametrize("name", ["a100_multistream_syncs.json.gz", "gb10_vllm_cudagraphs.pt.trace.json.gz"])
def test_the_graph_by_row_lookups_is_the_graph_by_joins(SHARED_TRACES: Path, monkeypatch, name: str):
    """Launches gathered by runtime row and forks searched on the clock, against their joins."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    ses = Session(load(str(path)))
    o = ses.options
    fast = dg.build_graph(ses.trace, ses.activity, o.patterns.collective_pattern, o.path.thread_wait_us)
    assert fast.edges.filter(pl.col("etype") == "fork").height  # the trace has forks
    monkeypatch.setattr(dg, "_by_row", lambda ids, wanted: False)
    monkeypatch.setattr(dg, "_forks_on_clock", lambda *args: None)
    slow = dg.build_graph(ses.trace, ses.activity, o.patterns.collective_pattern, o.path.thread_wait_us)
    for part in ("nodes", "edges", "steps"):
        assert getattr(fast, part).equals(getattr(slow, part)), part


def test_stream_order_by_numpy_sorts_is_polars_sort():
    """Ties in time broken by gpu_id, lanes by device then stream; a null stream or gpu_ids out
    of order take polars' sort, whose order is the rule."""
    gpu = pl.DataFrame(
        {
            "device": [1, 0, 0, 0, 1, 0],
            "stream": [7, 9, 7, 7, 7, 9],
            "ts_ns": [5, 3, 8, 8, 1, 2],
            "gpu_id": [0, 1, 2, 3, 4, 5],
        }
    )
    # (0, 7): rows 2, 3 at 8 (gpu_id 2 first); (0, 9): row 5 at 2, row 1 at 3; (1, 7): row 4, row 0
    assert dg._stream_order(gpu).to_list() == [2, 3, 5, 1, 4, 0]
    for other in (gpu.with_columns(stream=pl.Series([7, None, 7, 7, 7, 9])), gpu.reverse()):
        rule = other.select(pl.arg_sort_by("device", "stream", "ts_ns", "gpu_id")).to_series()
        assert dg._stream_order(other).cast(pl.Int64).to_list() == rule.cast(pl.Int64).to_list()
