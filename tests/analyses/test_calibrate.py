"""The calibration of the dependency graph (`calibration.calibrate`): lags and own times worked out by
hand on a small graph, natively (`_native.calibrate`) and in numpy (`_calibrate_np`), and the two
equal on shared traces; the native side refusing arrays that do not describe one graph.

Small graph (captured [ts, end), dur; a sync's end is set by its `to_end` edges):

    node 0 cpu [0, 10) 10      node 1 gpu [5, 25) 20      node 2 cpu [10, 30) 20 (a sync)
    node 3 cpu [100, 110) 10   node 4 cpu [200, 250) 50 (a sync)   node 5 cpu [240, 260) 20
    node 6 gpu [190, 210) 20

Each edge's reference is its source's start (from_start) or modelled end (start + dur; a sync's
captured end), its target the destination's start (or a sync's end); lag0 = min(target - ref, 0),
ready = ref + lag0; the latest ready per (node, to_end) binds and carries the rest, target - ready:

    e0 0->1 launch (from_start): ref 0, target 5, ready 0; binds node 1: lag 5
    e1 0->2 serial: ref 10, target 10: binds node 2's start, lag 0
    e2 1->2 sync (to_end): ref 25, target 30, ready 25. Node 2's own time: 30 - max(10, 25) = 5;
       own ready 10 + 5 = 15 < 25: the edge binds the end, lag 30 - 25 = 5
    e3 2->3 serial: ref 30 (node 2's captured end), ready 30: binds node 3 (over e4, e5), lag 70
    e4, e5 0->3 fork, join: ref 10, ready 10: lag 0
    e6 3->4 serial: ref 110, target 200: binds, lag 90
    e7 6->4 sync: ref 210, target 250, ready 210. Node 4's own time: 250 - max(200, 210) = 40;
       own ready 200 + 40 = 240 >= 210: the own time binds and takes the rest, 40 + 250 - 240 = 50;
       lag 0
    e8 4->5 serial: ref 250, target 240: lag0 -10, ready 240, binds with rest 0: lag -10

Own times: the others' durations. Edges by (destination, source, index): e0, e1, e2, e4, e5, e3,
e6, e7, e8.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from traceanalyzer.analyses import calibration as rp
from traceanalyzer.analyses.replay import native_kernel
from traceanalyzer.load import load
from traceanalyzer.load import native as ln
from traceanalyzer.session import Session

native = pytest.mark.skipif(not ln.available(), reason="traceanalyzer._native not built")
SHARED = [
    "v100_resnet50_dataloader_workers4.pt.trace.json.gz",
    "a100_multistream_syncs.json.gz",
    "gb10_vllm_cudagraphs.pt.trace.json.gz",
    "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz",
    "dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz",
]


def _graph(ids: pl.DataType = pl.Int64) -> tuple[pl.DataFrame, pl.DataFrame]:
    nodes = pl.DataFrame(
        {
            "ts_ns": [0, 5, 10, 100, 200, 240, 190],
            "end_ns": [10, 25, 30, 110, 250, 260, 210],
            "dur_ns": pl.Series([10, 20, 20, 10, 50, 20, 20], dtype=pl.Int32),
        }
    )
    edges = pl.DataFrame(
        {
            "src": pl.Series([0, 0, 1, 2, 0, 0, 3, 6, 4], dtype=ids),
            "dst": pl.Series([1, 2, 2, 3, 3, 3, 4, 4, 5], dtype=ids),
            "etype": ["launch", "serial", "sync", "serial", "fork", "join", "serial", "sync", "serial"],
            "from_start": [True, False, False, False, False, False, False, False, False],
            "to_end": [False, False, True, False, False, False, False, True, False],
        }
    )
    return nodes, edges


@pytest.mark.parametrize("use_native", [False, pytest.param(True, marks=native)])
@pytest.mark.parametrize("ids", [pl.Int64, pl.Int32])
def test_calibrate_by_hand(use_native: bool, ids: pl.DataType):
    nodes, edges = _graph(ids)
    n, e = rp.calibrate(nodes, edges, use_native=use_native)
    assert n["own_ns"].to_list() == [10, 20, 5, 10, 50, 20, 20]
    order = [0, 1, 2, 4, 5, 3, 6, 7, 8]
    assert e["src"].to_list() == [edges["src"][k] for k in order]
    assert e["dst"].to_list() == [edges["dst"][k] for k in order]
    lag = [5, 0, 5, 70, 0, 0, 90, 0, -10]
    assert e["lag_ns"].to_list() == [lag[k] for k in order]
    assert e.columns == ["src", "dst", "etype", "from_start", "to_end", "lag_ns"]


@native
def test_native_calibrate_checks_its_arrays():
    fn = native_kernel("calibrate", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    j = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731  node and edge indexes, as the graph holds them
    u = lambda *v: np.array(v, dtype=np.uint8)  # noqa: E731
    ts, end, dur = i(0, 5), i(10, 25), i(10, 20)
    own, lag, order = np.empty(2, np.int64), np.empty(1, np.int64), np.empty(1, np.int32)
    fn(ts, end, dur, j(0), j(1), u(1), u(0), own, lag, order)
    assert own.tolist() == [10, 20] and lag.tolist() == [5] and order.tolist() == [0]
    with pytest.raises(ValueError, match="not a node"):
        fn(ts, end, dur, j(0), j(2), u(1), u(0), own, lag, order)
    with pytest.raises(ValueError, match="one value per edge"):
        fn(ts, end, dur, j(0), j(1, 0), u(1), u(0), own, lag, order)
    with pytest.raises(ValueError, match="one value per edge"):  # int64 indexes, read as int32: twice as many
        fn(ts, end, dur, i(0), i(1), u(1), u(0), own, lag, order)
    with pytest.raises(ValueError, match="one value per node"):
        fn(ts, end[:1], dur, j(0), j(1), u(1), u(0), own, lag, order)
    with pytest.raises(ValueError, match="shares memory"):
        fn(ts, end, dur, j(0), j(1), u(1), u(0), ts, lag, order)


@native
@pytest.mark.parametrize("name", SHARED, ids=lambda p: Path(p).name[:30])
def test_native_calibrate_is_numpys_on_shared_traces(name: str, monkeypatch, SHARED_TRACES: Path):
    """The graph's nodes and edges just before calibrating, calibrated both ways: every own
    time, lag and edge in the same order."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    seen = []
    real = rp.calibrate

    def keep(nodes, edges, use_native=None, start_first=False):
        seen.append((nodes, edges))
        return real(nodes, edges, use_native, start_first)

    monkeypatch.setattr("traceanalyzer.analyses.dependency_graph.calibrate", keep)
    Session(load(str(path))).dependency_model  # noqa: B018
    nodes, edges = seen[0]
    fast, slow = rp.calibrate(nodes, edges, use_native=True), rp.calibrate(nodes, edges, use_native=False)
    assert edges.height > 1000 and int((fast[1]["lag_ns"] != 0).sum()) > 100
    assert fast[0].equals(slow[0]) and fast[1].equals(slow[1])
    # the start edges first: each node's start edges and end edges in the same order as before
    first = rp.calibrate(nodes, edges, use_native=True, start_first=True)[1]
    assert first.equals(rp.calibrate(nodes, edges, use_native=False, start_first=True)[1])  # in place natively
    late = first["to_end"].to_numpy()
    assert not late[: int((~late).sum())].any()
    assert first.filter(~pl.col("to_end")).equals(fast[1].filter(~pl.col("to_end")))
    assert first.filter(pl.col("to_end")).equals(fast[1].filter(pl.col("to_end")))
