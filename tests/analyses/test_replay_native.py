"""The native replay loop (`_native.replay`) against the Python one (`replay._replay`): the same
schedule, every array equal, on shared traces under scenarios that change durations, lags and
cut edges, and on every synthetic what-if case; plus a graph small enough to replay by hand.

Small graph (times in ns; `lag` on each edge):

    node 0 cpu [0, 10)                     no start edge: keeps its captured start 0
    node 1 gpu [5, 25)   e0 launch 0 -> 1  from_start, lag 5: starts 0 + 5 = 5, ends 25
    node 2 cpu [10, 30)  e1 serial 0 -> 2  lag 0: starts 10; a sync, own 2
                         e2 sync 1 -> 2    to_end, lag 5: ends max(10 + 2, 25 + 5) = 30 (e2)
    node 3 cpu [100,110) e3 serial 2 -> 3  lag -50: ready 30 - 50 = -20; binds (first edge)
                         e4 fork 0 -> 3    lag -10: ready 0 (later, larger): starts 0 (e4)
                         e5 join 0 -> 3    lag -10: ready 0, a tie: e4 keeps it; ends 0 + 10
"""

from __future__ import annotations

import inspect
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.analyses import test_whatif
from traceanalyzer.analyses import replay as rp
from traceanalyzer.analyses.dependency_graph import build_graph
from traceanalyzer.analyses.whatif import Scenario
from traceanalyzer.load import load
from traceanalyzer.load import native as ln
from traceanalyzer.options import Options
from traceanalyzer.session import Session

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
SHARED = [
    "v100_resnet50_dataloader_workers0.pt.trace.json.gz",
    "a100_multistream_syncs.json.gz",
    "gb10_vllm_cudagraphs.pt.trace.json.gz",
    "h100_owlv2_inference.json.gz",
    "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz",
    "mi300x_ddp_resnet_4ranks/rank3_trace_0_20_3.json.gz",
]
SCENARIOS = [
    Scenario(),
    Scenario(without=("data_loading", "cpu_bound")),
    Scenario(without=("sync", "gpu_wait")),  # sync edges cut, GPU edge lags changed
    Scenario(without=("kernel_spacing", "launch_latency", "peer_wait")),
    Scenario(speedup=(("gemm|conv|elementwise", 2.0), ("aten::", float("inf")))),
]
native = pytest.mark.skipif(not ln.available(), reason="traceanalyzer._native not built")


def _equal(a: rp.Schedule, b: rp.Schedule) -> None:
    for f, dtype in (("start_ns", np.int64), ("end_ns", np.int64), ("bind", np.int32), ("end_bind", np.int32)):
        x, y = getattr(a, f), getattr(b, f)
        if x is None or y is None:  # a replay of times only
            assert x is None and y is None and f in ("bind", "end_bind"), f
            continue
        assert x.dtype == y.dtype == dtype, f
        assert np.array_equal(x, y), f"{f}: first difference at node {int(np.flatnonzero(x != y)[0])}"


def _both(p: rp.Prepared, *args, binds: bool = True, zero_lag: np.ndarray | None = None) -> rp.Schedule:
    kw = {"binds": binds, "zero_lag": zero_lag}
    fast = rp.replay(p, *args, use_native=True, **kw)
    slow = rp.replay(p, *args, use_native=False, **kw)
    _equal(fast, slow)
    if binds:  # the times alone are the same times
        _equal(rp.replay(p, *args, binds=False, zero_lag=zero_lag), replace(fast, bind=None, end_bind=None))
    # own given per node or per sync (the only nodes whose own time a replay reads): one schedule
    dur, own, *rest = args
    syncs = p.sync_nodes()
    if len(own) == p.nodes:
        other = np.asarray(own)[syncs]
    else:
        other = np.zeros(p.nodes, np.int64)
        other[syncs] = own
    for use_native in (True, False):
        _equal(rp.replay(p, dur, other, *rest, use_native=use_native, **kw), fast)
    return fast


def _small() -> tuple[rp.Prepared, np.ndarray, np.ndarray]:
    nodes = pl.DataFrame(
        {
            "node": [0, 1, 2, 3],
            "lane": ["cpu", "gpu", "cpu", "cpu"],
            "ts_ns": [0, 5, 10, 100],
            "end_ns": [10, 25, 30, 110],
        }
    )
    edges = pl.DataFrame(
        {
            "src": [0, 0, 1, 2, 0, 0],
            "dst": [1, 2, 2, 3, 3, 3],
            "from_start": [True, False, False, False, False, False],
            "to_end": [False, False, True, False, False, False],
            "lag_ns": [5, 0, 5, -50, -10, -10],
        }
    )
    return rp.prepare(nodes, edges), np.array([10, 20, 20, 10]), np.array([10, 20, 2, 10])


@native
def test_small_graph_by_hand():
    p, dur, own = _small()
    assert p.index == np.int32  # every index held at half the width
    assert all(a.dtype == np.int32 for a in (p.order, p.src, p.start_off, p.start_idx, p.end_off, p.end_idx))
    assert p.ts.dtype == p.lag.dtype == np.int64
    assert p.start_off.tolist() == [0, 0, 1, 2, 5] and p.start_idx.tolist() == [0, 1, 3, 4, 5]
    assert p.end_off.tolist() == [0, 0, 0, 1, 1] and p.end_idx.tolist() == [2]
    assert p.order.tolist() == [0, 1, 2, 6, 3]  # by time: starts at 0, 5, 10, the sync's end (6) at 30, 100
    s = s0 = _both(p, dur, own)
    assert s.start_ns.tolist() == [0, 5, 10, 0]
    assert s.end_ns.tolist() == [10, 25, 30, 10]
    assert s.bind.tolist() == [-1, 0, 1, 4]
    assert s.end_bind.tolist() == [-1, -1, 2, -1]
    # the sync edge cut: the call ends after its own 2 ns; node 3 then reads 12 - 50 first
    s = _both(p, dur, own, None, np.array([False, False, True, False, False, False]))
    assert s.end_ns.tolist()[2] == 12 and s.end_bind.tolist()[2] == -1
    assert s.start_ns.tolist()[3] == 0 and s.bind.tolist()[3] == 4
    # lags changed (launch 0, e3 -5) and node 3's later edges cut: node 1 runs [0, 20), the call
    # ends at 20 + 0, and node 3's one edge binds below its capture: 20 - 5 = 15
    s = _both(p, dur, own, np.array([0, 0, 0, -5, 0, 0]), np.array([False, False, False, False, True, True]))
    assert s.start_ns.tolist() == [0, 0, 10, 15] and s.bind.tolist() == [-1, 0, 1, 3]
    assert s.end_ns.tolist() == [10, 20, 20, 25] and s.end_bind.tolist() == [-1, -1, 2, -1]
    # durations given as int32 (a what-if's, where every one fits): the same schedule
    _equal(_both(p, dur.astype(np.int32), own), s0)
    # the launch's lag taken away (e0): node 1 runs [0, 20), the call ends at max(12, 20 + 5) = 25
    s = _both(p, dur, own, zero_lag=np.array([True, False, False, False, False, False]))
    assert s.start_ns.tolist()[:3] == [0, 0, 10] and s.end_ns.tolist()[:3] == [10, 20, 25]


@native
def test_small_graph_held_lean(monkeypatch):
    """The small graph with its start edges first (no index of them) and the captured start of
    its one node without start edges alone: the same schedules; a replay whose cuts leave a
    node's start to a captured start not held is refused, not guessed."""
    monkeypatch.setenv(ln.ENV, "1")  # the native checks even where the suite runs with them off
    p, dur, own = _small()
    # the start edges, then the sync's end edge: edge j of the lean graph is edge first[j]
    first = np.array([0, 1, 3, 4, 5, 2])
    lean = rp.Prepared(
        p.order,
        p.ts,
        p.src[first],
        p.lag[first],
        p.from_start[first],
        p.start_off,
        None,
        p.end_off,
        np.array([5], dtype=np.int32),
    ).keep_starts()
    assert lean.ts.tolist() == [0] and lean.ts_nodes.tolist() == [0]
    lean = lean.keep_syncs()  # the one sync's end offsets alone
    assert lean.end_nodes.tolist() == [2] and lean.end_off.tolist() == [0, 1] and lean.end_idx.tolist() == [5]
    assert lean.end_offsets().tolist() == p.end_off.tolist() and lean.sync_nodes().tolist() == [2]
    assert lean.is_sync(2) and not lean.is_sync(1) and lean.end_edges(2).tolist() == [5]
    assert lean.start_edges(3).tolist() == [2, 3, 4] and lean.starts().tolist() == [0, 0, 0, 0]
    for cut in (None, np.array([False, False, True, False, False, False]), np.array([0, 0, 0, 0, 1, 1], bool)):
        lean_cut = None if cut is None else cut[first]
        a, b = _both(p, dur, own, None, cut), _both(lean, dur, own, None, lean_cut)
        assert a.start_ns.tolist() == b.start_ns.tolist() and a.end_ns.tolist() == b.end_ns.tolist()
        assert [first[k] if k >= 0 else -1 for k in b.bind.tolist()] == a.bind.tolist()
    with pytest.raises(ValueError, match="end_nodes needs sorted, distinct nodes, each with an end edge"):
        rp.replay(replace(lean, end_off=np.array([0, 0], dtype=np.int32), end_idx=lean.end_idx[:0]), dur, own)
    every = np.array([False, False, True, True, True, False])  # node 3's three start edges
    for use_native in (True, False):
        with pytest.raises(ValueError, match="node 3 has no live start edge"):
            rp.replay(lean, dur, own, None, every, use_native=use_native)


@native
def test_native_checks_its_arrays():
    p, dur, own = _small()
    with pytest.raises(ValueError, match="one value per node"):
        rp.replay(p, dur[:3], own, use_native=True)
    with pytest.raises(ValueError, match="dur needs one value per node"):  # int64 read as int32: twice as long
        ln.replay_loop(force=True)(
            *(p.order, p.ts, p.src, p.lag, p.from_start.view(np.uint8), p.start_off, p.start_idx, p.end_off),
            *(
                p.end_idx,
                dur.astype(np.int64),
                own.astype(np.int64),
                None,
                np.zeros(4, np.int64),
                np.zeros(4, np.int64),
            ),
            None,
            None,
            dur32=True,
        )
    with pytest.raises(ValueError, match="one value per edge"):
        rp.replay(p, dur, own, None, np.zeros(5, bool), use_native=True)
    with pytest.raises(ValueError, match="zero_lag need one value per edge"):
        rp.replay(p, dur, own, zero_lag=np.zeros(5, bool), use_native=True)
    assert p.sync_nodes().tolist() == [2]  # own: 4 values (per node) or 1 (per sync), nothing else
    with pytest.raises(ValueError, match="own needs one value per node or one per sync"):
        rp.replay(p, dur, own[:2], use_native=True)
    fn = ln.replay_loop(force=True)
    n = np.zeros(4, np.int64)
    b = np.zeros(4, np.int32)
    base = (p.order, p.ts, p.src, p.lag, p.from_start.view(np.uint8), p.start_off, p.start_idx)
    times = (dur.astype(np.int64), own.astype(np.int64), None)
    with pytest.raises(ValueError, match="shares memory"):
        fn(*base, p.end_off, p.end_idx, *times, n, n, b, b.copy())
    with pytest.raises(ValueError, match="both arrays or both None"):
        fn(*base, p.end_off, p.end_idx, *times, n, n.copy(), b, None)
    # the buffers carry no dtype: int64 indexes are refused by their lengths
    with pytest.raises(ValueError, match="one item per node and one per sync"):
        fn(p.order.astype(np.int64), *base[1:], p.end_off, p.end_idx, *times, n, n.copy(), None, None)
    with pytest.raises(ValueError, match="one value per edge"):
        fn(p.order, p.ts, p.src.astype(np.int64), *base[3:], p.end_off, p.end_idx, *times, n, n.copy(), None, None)
    with pytest.raises(ValueError, match="start edges"):
        fn(*base[:6], p.start_idx.astype(np.int64), p.end_off, p.end_idx, *times, n, n.copy(), None, None)
    with pytest.raises(ValueError, match="need one writable value per node"):
        fn(*base, p.end_off, p.end_idx, *times, n, n.copy(), b[:3].copy(), b.copy())
    bad = p.start_idx.copy()
    bad[0] = 6
    args = (p.order, p.ts, p.src, p.lag, p.from_start.view(np.uint8), p.start_off, bad, p.end_off, p.end_idx)
    with pytest.raises(ValueError, match="edge index out of range"):
        fn(*args, *times, n, n.copy(), None, None)


@native
def test_int64_indexes_replay_in_python():
    """A graph too big for int32 indexes (here the small one widened) replays in Python, with the
    same schedule; forcing the native loop on it is an error, not a wrong answer."""
    p, dur, own = _small()
    wide = replace(p, **{f: getattr(p, f).astype(np.int64) for f in ("order", "src", "start_off", "start_idx")})
    wide = replace(wide, end_off=p.end_off.astype(np.int64), end_idx=p.end_idx.astype(np.int64))
    assert wide.index == np.int64
    s = rp.replay(wide, dur, own)
    assert s.start_ns.tolist() == [0, 5, 10, 0] and s.bind.tolist() == [-1, 0, 1, 4] and s.bind.dtype == np.int64
    with pytest.raises(ValueError, match="int32 indexes"):
        rp.replay(wide, dur, own, use_native=True)


def test_switch(monkeypatch):
    """TRACEANALYZER_NATIVE=0 turns the replay loop off with the decoder."""
    monkeypatch.setenv(ln.ENV, "0")
    assert ln.replay_loop() is None
    monkeypatch.setenv(ln.ENV, "1")
    assert (ln.replay_loop() is not None) == ln.available()


@native
@pytest.mark.parametrize("name", SHARED, ids=lambda p: Path(p).name[:30])
def test_shared_traces_same_schedule(name):
    session = Session(load(str(TRACES / name)))
    model = session.dependency_model
    p = model.prepared
    assert p.nodes > 1000  # a real graph
    # held: the start edges first (no index of them), the captured starts of the nodes without
    # start edges alone; the captured start of every node is the capture's, as built
    assert p.start_idx is None and p.ts_nodes is not None and len(p.ts) == len(p.ts_nodes) < 100
    assert np.array_equal(p.ts_nodes, np.flatnonzero(np.diff(p.start_off) == 0))
    graph = build_graph(session.trace, session.activity, Options().patterns.collective_pattern)
    captured = graph.nodes["ts_ns"].cast(pl.Int64).to_numpy()
    assert np.array_equal(p.ts, captured[p.ts_nodes])
    full = rp.prepare(graph.nodes, graph.edges)
    assert full.ts_nodes is None and full.start_idx is None and np.array_equal(full.ts, captured)
    # and the end offsets of the syncs alone (a few, not n + 1)
    assert p.end_nodes is not None and len(p.end_off) == len(p.end_nodes) + 1 < p.nodes / 10
    assert np.array_equal(p.end_offsets(), full.end_off) and np.array_equal(p.sync_nodes(), full.sync_nodes())
    for sc in SCENARIOS:
        dur, own, zero_lag, cut = model._apply(sc)
        s = _both(p, dur, own, None, cut, zero_lag=zero_lag)
        if zero_lag is not None:  # the lags taken away are those lags set to 0
            assert zero_lag.any()
            _equal(_both(p, dur, own, np.where(zero_lag, 0, p.lag), cut), s)
        if sc == Scenario():
            _equal(s, model.base)
            # nothing changed: the lags reproduce every captured start
            assert np.array_equal(s.start_ns, captured)
            _equal(_both(full, dur, own, None, cut, zero_lag=zero_lag), s)
    # the graph's lags as int32 (every one fits), read by the native loop as such: the schedule
    # of the same lags given as int64
    assert p.lag.dtype == np.int32 and model.graph.edges["lag_ns"].dtype == pl.Int32
    dur, own, zero_lag, cut = model._apply(SCENARIOS[-1])
    _equal(
        _both(p, dur, own, p.lag.astype(np.int64), cut, zero_lag=zero_lag),
        _both(p, dur, own, None, cut, zero_lag=zero_lag),
    )


CASES = [
    f
    for n, f in inspect.getmembers(test_whatif, inspect.isfunction)
    if n.startswith("test_") and list(inspect.signature(f).parameters) == ["tmp_path"]
]


@native
@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_synthetic_cases_same_schedule(case, tmp_path, monkeypatch):
    """Each synthetic what-if case, with every replay it makes run by both loops and compared."""
    calls = []

    def checked(p, *args, **kw):
        calls.append(1)
        return _both(p, *args, **kw)

    monkeypatch.setattr("traceanalyzer.analyses.whatif.replay", checked)
    case(tmp_path)
    assert calls


def _same_prepared(nodes: pl.DataFrame, edges: pl.DataFrame, monkeypatch) -> rp.Prepared:
    """`prepare` in its native pass and in numpy (TRACEANALYZER_NATIVE=0): every array equal, of one dtype."""
    fast = rp.prepare(nodes, edges)
    with monkeypatch.context() as m:
        m.setenv(ln.ENV, "0")
        slow = rp.prepare(nodes, edges)
    for f in fields(rp.Prepared):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b)), f.name
    return fast


@native
@pytest.mark.parametrize("name", SHARED, ids=lambda p: Path(p).name[:30])
def test_native_prepare_is_numpys(name, monkeypatch):
    """The replay's order and adjacency of a shared trace's graph, natively and in numpy."""
    session = Session(load(str(TRACES / name)))
    graph = build_graph(session.trace, session.activity, Options().patterns.collective_pattern)
    p = _same_prepared(graph.nodes, graph.edges, monkeypatch)
    assert p.nodes > 1000 and len(p.end_idx) > 0


@native
def test_native_prepare_out_of_order(monkeypatch):
    """The small graph with node 3 captured at -100, before the nodes its edges come from: the
    native pass finds its time order broken (None), and Kahn's algorithm orders it, on either
    path: node 0 (the one ready), which readies 1 and 2 (2 taken first: a stack), 2 then 1 ready
    the sync's end (6), which readies node 3 (its serial edge from node 2's end)."""
    fn = rp.native_kernel("prepare_order", force=True)
    i32, u8 = (lambda *v: np.array(v, dtype=np.int32)), (lambda *v: np.array(v, dtype=np.uint8))  # noqa: E731
    ts, end = np.array([0, 5, 10, -100]), np.array([10, 25, 30, -90])
    src, dst = i32(0, 0, 1, 2, 0, 0), i32(1, 2, 2, 3, 3, 3)
    fs, to_end = u8(1, 0, 0, 0, 0, 0), u8(0, 0, 1, 0, 0, 0)
    out = [np.empty(k, np.int32) for k in (5, 5, 5, 5, 1)]  # order: 4 nodes + 1 to_end edge
    assert fn(ts, end, u8(0, 1, 0, 0), src, dst, fs, to_end, *out) is None
    # node 3 at 100, after all it depends on: 5 items in time order, the adjacency of _small
    assert fn(np.array([0, 5, 10, 100]), np.array([10, 25, 30, 110]), u8(0, 1, 0, 0), src, dst, fs, to_end, *out) == 5
    assert [o.tolist() for o in out] == [[0, 1, 2, 6, 3], [0, 0, 1, 2, 5], [0, 1, 3, 4, 5], [0, 0, 0, 1, 1], [2]]
    with pytest.raises(ValueError, match="not a node"):
        fn(ts, end, u8(0, 1, 0, 0), src, i32(1, 2, 2, 3, 3, 4), fs, to_end, *out)
    with pytest.raises(ValueError, match="one value per start"):
        fn(ts, end, u8(0, 1, 0, 0), src, dst, fs, to_end, out[0], out[1], out[2][:4], out[3], out[4])
    with pytest.raises(ValueError, match="shares memory"):
        fn(ts, end, u8(0, 1, 0, 0), src, dst, fs, to_end, out[0], out[1], out[2], out[1], out[4])
    nodes = pl.DataFrame({"ts_ns": ts, "end_ns": end, "lane": ["cpu", "gpu", "cpu", "cpu"]})
    edges = pl.DataFrame({"src": src, "dst": dst, "from_start": fs.astype(bool), "to_end": to_end.astype(bool)})
    p = _same_prepared(nodes, edges.with_columns(lag_ns=pl.lit(0, pl.Int32)), monkeypatch)
    assert p.order.tolist() == [0, 2, 1, 6, 3]


@native
@pytest.mark.parametrize("name", SHARED, ids=lambda p: Path(p).name[:30])
def test_native_window_ends_are_numpys(name):
    """The node that ends each step window, natively and on numpy arrays: the same node."""
    model = Session(load(str(TRACES / name))).dependency_model
    w = model.windows(model.base)
    fast = model._end_nodes(w, model.base, use_native=True)
    assert fast == model._end_nodes(w, model.base, use_native=False)
    assert sum(v >= 0 for v in fast) >= 1


@native
def test_native_window_ends_by_hand():
    """Nodes ending at 5, 9, 9, 12 (starting at 0, 3, 4, 4), window ends 4, 9, 10, 20: before 4
    none; at 9 the two ending at 9, the later start (node 2); at 10 still node 2; at 20 node 3;
    a tie in end and start goes to the lower node."""
    fn = rp.native_kernel("window_ends", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    out = np.empty(4, np.int64)
    fn(i(0, 3, 4, 4), i(5, 9, 9, 12), i(4, 9, 10, 20), out)
    assert out.tolist() == [-1, 2, 2, 3]
    fn(i(1, 1), i(7, 7), i(4, 9, 10, 20), out)
    assert out.tolist() == [-1, 0, 0, 0]
    with pytest.raises(ValueError, match="sorted and distinct"):
        fn(i(1, 1), i(7, 7), i(9, 4, 10, 20), out)
