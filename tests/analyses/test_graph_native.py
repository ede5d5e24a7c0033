"""The dependency graph's native kernels against their Python references: the critical path's
walk (`_native.walk` / `critical_path._walk_py`: every segment equal on shared traces and on
every synthetic case of test_whatif, whose paths are worked out by hand there) and the slices'
innermost call and op (`_native.innermost` / numpy in `ThreadClock.innermost`, and both against
`links.innermost_containing`) and the time each layer covers up to each slice boundary
(`_native.covered_until` / numpy in `ThreadClock.until`) and inside each slice
(`_native.covered_in` / numpy in `slice_kinds.coverages`) and folded into the slices' kinds
(`_native.fold_slices` / `slice_kinds._fold_numpy`), on hand-worked arrays and shared traces; and the native side refusing arrays that do not describe one graph."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.analyses import test_whatif
from traceanalyzer.analyses import critical_path as cp
from traceanalyzer.analyses import graph_nodes as gn
from traceanalyzer.analyses.cpu_activity import THREAD
from traceanalyzer.analyses.replay import native_kernel
from traceanalyzer.links import innermost_containing
from traceanalyzer.load import load
from traceanalyzer.load import native as ln
from traceanalyzer.session import Session

SHARED = [
    "v100_resnet50_dataloader_workers0.pt.trace.json.gz",
    "a100_multistream_syncs.json.gz",
    "gb10_vllm_cudagraphs.pt.trace.json.gz",
    "h100_owlv2_inference.json.gz",
    "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz",
    "dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz",
]
native = pytest.mark.skipif(not ln.available(), reason="traceanalyzer._native not built")


def _shared(folder: Path, name: str) -> Path:
    """A shared trace (the `SHARED_TRACES` fixture's folder), or the test skipped without it."""
    path = folder / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def _slices(path: Path):
    """A trace's Trace, CPU activity, thread clock and the dependency graph's CPU slices."""
    ses = Session(load(str(path)))
    trace, act = ses.trace, ses.activity
    threads = gn.graph_threads(trace, act.blocking)
    times = [trace.ops.select("ts_ns", "end_ns"), trace.runtime.select("ts_ns", "end_ns")]
    clock = gn.ThreadClock.of(threads, [*times, *(i.select("start_ns", "end_ns") for i in act.cumulative)])
    return trace, act, clock, gn.slices(trace, threads, clock)


def _keyed(s: pl.DataFrame, clock) -> pl.DataFrame:
    """The slices with their thread's pid and tid (`slices` gives its number on the clock)."""
    return s.with_columns(clock.threads[c].gather(s["_th"]) for c in THREAD)


def _walks(ses: Session):
    """The segments of the Session's capture walked natively and in Python."""
    m = ses.dependency_model
    base = m.base
    w = m.windows(base)
    ends = m._end_nodes(w, base)
    fast = cp.walk(m.graph, m.prepared, base, w, ends, use_native=True)
    slow = cp.walk(m.graph, m.prepared, base, w, ends, use_native=False)
    return fast, slow


@native
@pytest.mark.parametrize("name", SHARED, ids=lambda p: Path(p).name[:30])
def test_native_walk_is_the_python_walk_on_shared_traces(name: str, SHARED_TRACES):
    fast, slow = _walks(Session(load(str(_shared(SHARED_TRACES, name)))))
    assert fast.height > 10
    assert fast.equals(slow)
    assert (fast["end_ns"] > fast["start_ns"]).all()


@native
def test_native_walk_on_every_synthetic_case(tmp_path, monkeypatch):
    """Each hand-worked case of test_whatif, with its walk run by both and compared."""
    walked = []
    plain = cp.walk_back

    def checked(graph, p, sched, windows, end_nodes, use_native=None):
        fast = plain(graph, p, sched, windows, end_nodes, use_native=True)
        slow = plain(graph, p, sched, windows, end_nodes, use_native=False)
        table = cp.segment_table(graph, windows, fast)
        assert table.equals(cp.segment_table(graph, windows, slow))
        walked.append(table.height)
        return fast

    monkeypatch.setattr("traceanalyzer.analyses.whatif.walk_back", checked)
    cases = [f for n, f in inspect.getmembers(test_whatif, inspect.isfunction) if n.startswith("test_")]
    for case in cases:
        if "tmp_path" in inspect.signature(case).parameters and len(inspect.signature(case).parameters) == 1:
            case(tmp_path)
    assert len(walked) >= 5 and sum(walked) > 0


@native
def test_native_walk_checks_its_arrays():
    fn = native_kernel("walk", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    j = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731  the indexes, as the replay keeps them
    u8 = lambda *v: np.array(v, dtype=np.uint8)  # noqa: E731
    # two nodes, one edge 0 -> 1; one window [0, 10) ending at node 1
    ok = [i(0), i(10), i(1), u8(0, 0), i(0, 0), u8(0), i(0, 5), i(5, 10), j(-1, 0), j(-1, -1), j(0), u8(0), j(0, 0, 0)]
    w, kind, named, lane, a, b = (np.frombuffer(x, dtype=np.int64).tolist() for x in fn(*ok))
    # walking back from node 1's end: node 1 [5, 10), its binding edge to node 0, node 0 [0, 5)
    assert (w, kind, named, lane, a, b) == ([0, 0], [-1, -1], [1, 0], [1, 0], [5, 0], [10, 5])
    bad_node = list(ok)
    bad_node[2] = i(2)
    with pytest.raises(ValueError, match="not a node"):
        fn(*bad_node)
    bad_edge = list(ok)
    bad_edge[8] = j(-1, 1)
    with pytest.raises(ValueError, match="not an edge"):
        fn(*bad_edge)
    wide = list(ok)
    wide[8] = i(-1, 0)  # int64 binding edges: read as int32 they are too many, refused
    with pytest.raises(ValueError, match="one value per node"):
        fn(*wide)
    short = list(ok)
    short[4] = i(0)
    with pytest.raises(ValueError, match="one value per node"):
        fn(*short)


def test_switch(monkeypatch):
    """TRACEANALYZER_NATIVE=0 turns the walk off with the decoder."""
    monkeypatch.setenv(ln.ENV, "0")
    assert native_kernel("walk") is None
    monkeypatch.setenv(ln.ENV, "1")
    assert (native_kernel("walk") is not None) == ln.available()


@native
def test_native_innermost_by_hand():
    """Two threads on a clock of span 100 (key = thread x 100 + t). Thread 0: op 0 [0, 50),
    op 1 [10, 20) inside it; thread 1: op 2 [5, 30). Slices (thread, [t, end)):
    (0, [0, 10)) in op 0; (0, [10, 20)) in op 1; (0, [20, 50)): op 1 starts last before it but
    ended at 20, its parent op 0 holds it; (1, [0, 5)): nothing starts before it on thread 1
    (op 1's key 10 is thread 0's); (1, [5, 30)) in op 2; (1, [30, 40)): op 2 ended, no parent."""
    fn = native_kernel("innermost", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    skey, send = i(0, 10, 20, 100, 105, 130), i(10, 20, 50, 5, 30, 40)
    ikey, icand = i(0, 10, 105), i(0, 1, 2)
    ids, end, parent = i(0, 1, 2), i(50, 20, 30), i(-1, 0, -1)
    out = np.empty(6, dtype=np.int64)
    fn(skey, send, ikey, icand, 100, ids, end, parent, 256, out)
    assert out.tolist() == [0, 1, 0, -1, 2, -1]
    # ids that are not row numbers are found by binary search: the same answer under other ids
    fn(skey, send, ikey, i(10, 11, 30), 100, i(10, 11, 30), end, i(-1, 10, -1), 256, out)
    assert out.tolist() == [10, 11, 10, -1, 30, -1]
    # no climb allowed: the slice that needs its parent gets none
    fn(skey, send, ikey, icand, 100, ids, end, parent, 1, out)
    assert out.tolist() == [0, 1, -1, -1, 2, -1]
    # an int32 out (as the graph's ids are) gets the same ids; one that cannot hold an id is refused
    out32 = np.empty(6, dtype=np.int32)
    fn(skey, send, ikey, icand, 100, ids, end, parent, 256, out32)
    assert out32.tolist() == [0, 1, 0, -1, 2, -1]
    big = i(0, 1, 2**31)
    with pytest.raises(ValueError, match="fit in int32"):
        fn(skey, send, ikey, i(0, 1, 2**31), 100, big, end, parent, 256, out32)
    with pytest.raises(ValueError, match="must be sorted"):
        fn(i(10, 0, 20, 100, 105, 130), send, ikey, icand, 100, ids, end, parent, 256, out)
    with pytest.raises(ValueError, match="sorted and distinct"):  # (ids repeated)
        fn(skey, send, ikey, icand, 100, i(0, 1, 1), end, parent, 256, out)
    with pytest.raises(ValueError, match="one value per point"):
        fn(skey, send[:5], ikey, icand, 100, ids, end, parent, 256, out)
    with pytest.raises(ValueError, match="shares memory"):
        fn(skey, send, ikey, icand, 100, ids, end, parent, 256, skey)


@native
@pytest.mark.parametrize("name", SHARED[:4], ids=lambda p: Path(p).name[:30])
def test_innermost_native_numpy_and_links_agree(name: str, monkeypatch, SHARED_TRACES):
    """Each slice's runtime call and op: natively, in numpy, and by `links.innermost_containing`."""
    trace, act, clock, s = _slices(_shared(SHARED_TRACES, name))
    rt = trace.runtime.select(*THREAD, "ts_ns", "end_ns", "runtime_id").with_columns(parent_id=pl.lit(None, pl.Int64))
    for iv, col in ((rt, "runtime_id"), (trace.ops, "op_id")):
        fast = clock.innermost(s, iv, col)
        monkeypatch.setenv(ln.ENV, "0")
        slow = clock.innermost(s, iv, col)
        monkeypatch.delenv(ln.ENV)
        ref = innermost_containing(_keyed(s, clock), iv, col, col)[col]
        assert fast.drop_nulls().len() > 100
        assert fast.equals(slow) and fast.equals(ref)


@native
def test_native_covered_until_by_hand():
    """Span 100 (key = thread x 100 + t). A coverage index: thread 0 covers [10, 20) and
    [30, 50) (before: 0 and 10), thread 1 covers [0, 40) (before 0). Up to thread 0's t = 5:
    nothing starts before, 0; t = 15: 0 + 15 - 10 = 5; t = 25: [10, 20) ended, 10; t = 60: 10 +
    50 - 30 = 30; thread 1's t = 0: 0 + 0 - 0 = 0; t = 70: 0 + 40 - 0 = 40; thread 2's t = 10:
    the last start before it is thread 1's, so none: 0."""
    fn = native_kernel("covered_until", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    q, t = i(5, 15, 25, 60, 100, 170, 210), i(5, 15, 25, 60, 0, 70, 10)
    ikey, ith, start, end, before = i(10, 30, 100), i(0, 0, 1), i(10, 30, 0), i(20, 50, 40), i(0, 10, 0)
    out = np.empty(7, dtype=np.int64)
    fn(q, t, ikey, ith, start, end, before, 100, out)
    assert out.tolist() == [0, 5, 10, 30, 0, 40, 0]
    with pytest.raises(ValueError, match="must be sorted"):
        fn(q[::-1].copy(), t, ikey, ith, start, end, before, 100, out)
    with pytest.raises(ValueError, match="one value per interval"):
        fn(q, t, ikey, ith[:2], start, end, before, 100, out)


@native
def test_native_covered_in_by_hand():
    """The index of test_native_covered_until_by_hand (span 100: thread 0 covers [10, 20) and
    [30, 50), thread 1 [0, 40)) measured inside slices: thread 0's [0, 15) holds [10, 15), 5;
    [15, 35) holds [15, 20) and [30, 35), 10; [35, 60) holds [35, 50), 15; thread 1's [5, 50)
    holds [5, 40), 35; thread 2's [0, 10) nothing (the last start before it is thread 1's)."""
    fn = native_kernel("covered_in", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    th, a, b = i(0, 0, 0, 1, 2), i(0, 15, 35, 5, 0), i(15, 35, 60, 50, 10)
    index = i(10, 30, 100), i(0, 0, 1), i(10, 30, 0), i(20, 50, 40), i(0, 10, 0)
    out = np.empty(5, dtype=np.int64)
    fn(th, a, b, 100, 0, *index, out)
    assert out.tolist() == [5, 10, 15, 35, 0]
    # the same on a clock starting at 5 (key = thread x 100 + t - 5)
    fn(th, a + 5, b + 5, 100, 5, i(10, 30, 100), i(0, 0, 1), i(15, 35, 5), i(25, 55, 45), i(0, 10, 0), out)
    assert out.tolist() == [5, 10, 15, 35, 0]
    with pytest.raises(ValueError, match="key order"):
        fn(i(1, 0, 0, 1, 2), a, b, 100, 0, *index, out)
    with pytest.raises(ValueError, match="one value per slice"):
        fn(th[:4], a, b, 100, 0, *index, out)
    with pytest.raises(ValueError, match="shares memory"):
        fn(th, a, b, 100, 0, *index, a)


@native
@pytest.mark.parametrize("name", SHARED[:4], ids=lambda p: Path(p).name[:30])
def test_layer_times_native_and_numpy_agree(name: str, monkeypatch, SHARED_TRACES):
    """Each slice's time in each cumulative layer union, natively and in numpy."""
    _, act, clock, s = _slices(_shared(SHARED_TRACES, name))
    fast = gn._layer_times(s, act, clock)
    monkeypatch.setenv(ln.ENV, "0")
    slow = gn._layer_times(s, act, clock)
    assert len(fast) == len(slow) and sum(int(u.sum()) for u in fast) > 0
    assert all(a.equals(b) for a, b in zip(fast, slow, strict=True))


@native
def test_native_fold_slices_by_hand():
    """The slices of test_native_covered_in_by_hand (lengths 15, 20, 25, 45, 10) under two
    layers: the first's union is that index (it covers 5, 10, 15, 35, 0 of them), the second's
    (a work layer) covers all of thread 0's [0, 60) and thread 1's [0, 40): 15, 20, 25, 35, 0, so
    the second layer adds 10, 10, 10, 0, 0, and no layer covers 0, 0, 0, 10, 10 (untraced).
    Kinds: 1 (10 beats 5), 0 (10 ties 10: the first), 0, 0, 2 (untraced alone). Busy where the
    second layer has time; empty (untraced all of it), and in one layer whole, the last slice
    alone; two layers have time in each slice but the last. The parts: each layer's times short
    of their slice's length, in slice order."""
    fn = native_kernel("fold_slices", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    th, a, b = i(0, 0, 0, 1, 2), i(0, 15, 35, 5, 0), i(15, 35, 60, 50, 10)
    first = [i(10, 30, 100), i(0, 0, 1), i(10, 30, 0), i(20, 50, 40), i(0, 10, 0)]
    second = [i(0, 100), i(0, 1), i(0, 0), i(60, 40), i(0, 0)]
    outs = [np.zeros(5, np.uint8) for _ in range(5)]
    parts = fn(th, a, b, 100, 0, [*first, *second], [0, 1], [False, True], *outs)
    code, busy, empty, full, count = (o.tolist() for o in outs)
    assert code == [1, 0, 0, 0, 2] and busy == [1, 1, 1, 0, 0] and empty == [0, 0, 0, 0, 1]
    assert full == [255, 255, 255, 255, 2] and count == [2, 2, 2, 2, 1]
    got = [(np.frombuffer(x, np.int64).tolist(), np.frombuffer(y, np.int64).tolist()) for x, y in parts]
    assert got == [([0, 1, 2, 3], [5, 10, 15, 35]), ([0, 1, 2], [10, 10, 10]), ([3], [10])]
    # one union for both layers: the second adds nothing (no slice busy), untraced 10 in each
    # slice, beating the first layer's 5 in the first (kind 2), tying its 10 in the second
    fn(th, a, b, 100, 0, first, [0, 0], [False, True], *outs)
    assert outs[1].tolist() == [0, 0, 0, 0, 0] and outs[0].tolist() == [2, 0, 0, 0, 2]
    with pytest.raises(ValueError, match="key order"):
        fn(i(1, 0, 0, 1, 2), a, b, 100, 0, first, [0], [False], *outs)
    with pytest.raises(ValueError, match="one value per slice"):
        fn(th[:4], a[:4], b[:4], 100, 0, first, [0], [False], *outs)
    with pytest.raises(ValueError, match="shares memory"):
        fn(th, a, b, 100, 0, first, [0], [False], outs[0], outs[0], *outs[2:])
    with pytest.raises(ValueError, match="a union's"):
        fn(th, a, b, 100, 0, first, [1], [False], *outs)


@native
@pytest.mark.parametrize("deep", [False, True])
def test_innermost_ties_native_and_lexsort_agree(deep: bool, monkeypatch):
    """The intervals' order for `innermost` (start key, then the longest, the shallowest, the
    lowest id, the first): each run of equal keys sorted natively, and the lexsort over every
    tied interval, on keys with many ties, in key order and not."""
    from traceanalyzer.analyses import thread_clock as tc

    rng = np.random.default_rng(7)
    n = 5000
    key, end = rng.integers(0, 300, n), rng.integers(0, 40, n)
    depth, ids = (rng.integers(0, 3, n) if deep else None), rng.integers(0, 50, n)
    real = tc.native_kernel
    off = lambda name, force=False: None if name == "innermost_ties" else real(name, force)  # noqa: E731
    for k in (key, np.sort(key)):
        fast = tc._innermost_last(k, end, depth, ids)
        monkeypatch.setattr(tc, "native_kernel", off)
        slow = tc._innermost_last(k, end, depth, ids)
        monkeypatch.setattr(tc, "native_kernel", real)
        assert np.array_equal(fast, slow)
    z = [np.zeros(3, np.int64), np.zeros(3, np.int64), np.zeros(0, np.int64), np.zeros(3, np.int64)]
    with pytest.raises(ValueError, match="positions"):
        native_kernel("innermost_ties", force=True)(np.full(3, 5, np.int64), *z)


@native
def test_native_fold_bands_by_hand():
    """`fold_bands` on the unions of test_native_fold_slices_by_hand kept on their bands' axis
    (thread k's band from k x 100, its intervals [t, te) shifted so): every output the same;
    a thread without a band (thread 2's) has no layer time."""
    bands, keyed = native_kernel("fold_bands", force=True), native_kernel("fold_slices", force=True)
    i = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    th, a, b = i(0, 0, 0, 1, 2), i(0, 15, 35, 5, 0), i(15, 35, 60, 50, 10)
    first = [i(10, 30, 100), i(0, 0, 1), i(10, 30, 0), i(20, 50, 40), i(0, 10, 0)]
    second = [i(0, 100), i(0, 1), i(0, 0), i(60, 40), i(0, 0)]
    on_bands = [i(10, 30, 100), i(20, 50, 140), i(0, 10, 0), i(0, 100), i(60, 140), i(0, 0)]
    outs, ref = [np.zeros(5, np.uint8) for _ in range(5)], [np.zeros(5, np.uint8) for _ in range(5)]
    got = bands(th, a, b, [0, 1, -1], 100, 0, on_bands, [0, 1], [False, True], *outs)
    want = keyed(th, a, b, 100, 0, [*first, *second], [0, 1], [False, True], *ref)
    assert all(np.array_equal(x, y) for x, y in zip(outs, ref, strict=True))
    assert [(bytes(x), bytes(y)) for x, y in got] == [(bytes(x), bytes(y)) for x, y in want]
    with pytest.raises(ValueError, match="key order"):
        bands(i(1, 0, 0, 1, 2), a, b, [0, 1, -1], 100, 0, on_bands, [0], [False], *outs)
    with pytest.raises(ValueError, match="t must be sorted"):
        bands(th, a, b, [0, 1, -1], 100, 0, [i(30, 10, 100), *on_bands[1:]], [0], [False], *outs)
    with pytest.raises(ValueError, match="three arrays per union"):
        bands(th, a, b, [0, 1, -1], 100, 0, on_bands[:4], [0], [False], *outs)


@native
@pytest.mark.parametrize("name", SHARED[:4], ids=lambda p: Path(p).name[:30])
def test_slice_kinds_native_and_numpy_agree(name: str, SHARED_TRACES, monkeypatch):
    """Each slice's layer times, kind code, work and emptiness: folded natively (every layer in
    one pass) and in numpy (a layer at a time, into `LayerFold.add`)."""
    from traceanalyzer.analyses import slice_kinds as sk

    monkeypatch.setenv(ln.ENV, "1")  # the native fold even where the suite runs with it off
    from traceanalyzer.analyses.graph_table import LayerFold

    _, act, clock, s = _slices(_shared(SHARED_TRACES, name))
    th, a, b = (np.ascontiguousarray(s[c].cast(pl.Int64).to_numpy()) for c in ("_th", "ts_ns", "end_ns"))
    seen: list = []
    slow_fold, fast_fold = LayerFold(b - a, sk.KIND_LAYERS), LayerFold(b - a, sk.KIND_LAYERS)

    def sink(k: int, t: np.ndarray) -> None:
        seen.append(t.astype(np.int64))
        slow_fold.add(k, t)

    fast = sk._fold_native(th, a, b, act, clock, fast_fold)
    slow = sk._fold_numpy(th, a, b, act, clock, sink)
    assert all(np.array_equal(x, y) for x, y in zip(fast, slow, strict=True))
    assert np.array_equal(fast_fold.full, slow_fold.full) and np.array_equal(fast_fold.count, slow_fold.count)
    for mine, ref in zip(fast_fold.part, slow_fold.part, strict=True):
        assert np.array_equal(mine[0][0], np.concatenate([p[0] for p in ref]))
        assert np.array_equal(mine[0][1], np.concatenate([p[1] for p in ref]))
    # the two parts `build_graph` keeps, with some slices made waits (duration 0)
    dur = b - a
    dur[::7] = 0
    (lf, lt), (rf, rt) = fast_fold.parts(dur), slow_fold.parts(dur)
    assert lf.equals(rf) and lt.equals(rt) and lt.height > 0
    assert len(set(fast[0].tolist())) > 2 and fast[1].any()  # several kinds, and busy slices
    # every slice's time is its layers' times (each moment counted once)
    assert len(seen) == 7 and np.array_equal(sum(seen), b - a)
