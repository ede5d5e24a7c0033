"""The dependency graph's lean node table: narrowing keeps values, names come back by id, the
thread clock finds the slices the sorts and joins find, and the findings without savings are
the findings with them, less the savings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from traceanalyzer import Session, load
from traceanalyzer.analyses.graph_table import narrow
from traceanalyzer.findings import evaluate


def test_narrow_casts_only_what_fits_in_int32():
    df = pl.DataFrame(
        {
            "small": pl.Series([0, 2**31 - 1, None], dtype=pl.Int64),  # the largest Int32 fits
            "big": pl.Series([0, 2**31, None], dtype=pl.Int64),  # one past it does not
            "negative": pl.Series([-(2**31), 5, 7], dtype=pl.Int64),
            "nulls": pl.Series([None, None, None], dtype=pl.Int64),
            "ts": pl.Series([1_683_564_901_548_726_000] * 3, dtype=pl.Int64),  # ns since 1970
        }
    )
    out = narrow(df, ["small", "big", "negative", "nulls", "ts", "absent"])
    assert out.schema == {
        "small": pl.Int32,
        "big": pl.Int64,
        "negative": pl.Int32,
        "nulls": pl.Int32,
        "ts": pl.Int64,
    }
    assert out.cast(pl.Int64).equals(df)  # the same values


def test_nodes_are_named_from_their_ids(SHARED_TRACES: Path):
    ses = Session(load(str(SHARED_TRACES / "a100_simple_add_syncs.json.gz")))
    model = ses.dependency_model
    g, trace = model.graph, ses.trace
    n = g.nodes.height
    names = g.names(pl.Series(range(n), dtype=pl.Int64))
    nodes = g.nodes.with_columns(name=names, gpu_id=g.column("gpu_id"))  # the GPU nodes' own table, for every node
    gpu = nodes.filter(pl.col("lane") == "gpu")
    # a GPU node is named after its activity: row gpu_id of the trace's GPU table
    assert gpu["name"].to_list() == trace.gpu["name"].gather(gpu["gpu_id"]).to_list()
    cpu = nodes.filter(pl.col("lane") == "cpu")
    in_call = cpu.filter(pl.col("runtime_id").is_not_null())
    assert in_call.height and in_call["name"].to_list() == trace.runtime["name"].gather(in_call["runtime_id"]).to_list()
    in_op = cpu.filter(pl.col("runtime_id").is_null() & pl.col("op_id").is_not_null())
    assert in_op.height and in_op["name"].to_list() == trace.ops["name"].gather(in_op["op_id"]).to_list()
    bare = cpu.filter(pl.col("runtime_id").is_null() & pl.col("op_id").is_null())
    assert bare["name"].to_list() == bare["kind"].to_list()  # in nothing: its kind


def test_findings_without_savings_are_the_same_findings(SHARED_TRACES: Path):
    trace = load(str(SHARED_TRACES / "b200_eager_rank0.json.gz"))  # launch_bound has a saving there
    full = Session(trace).findings
    ses = Session(trace)
    bare = evaluate(ses, estimate=False)
    assert "dependency_model" not in ses.__dict__  # nothing was replayed
    assert any(f.saving_us is not None for f in full)  # the other side did estimate
    key = lambda f: (f.rule, f.severity, f.message, f.evidence, f.at_stake_us)  # noqa: E731
    assert [key(f) for f in bare] == [key(f) for f in full]
    assert all(f.saving_us is None and f.saving_note == "" for f in bare)


def test_the_thread_clock_counts_coverage_as_covered_does():
    """Two threads; thread (1, 1) busy in [10, 20) and [30, 40), thread (1, 2) never: the time
    covered up to t, counted by hand."""
    from traceanalyzer.analyses.graph_nodes import ThreadClock
    from traceanalyzer.analyses.intervals import coverage_index

    threads = pl.DataFrame({"pid": [1, 1], "tid": [1, 2]})
    union = pl.DataFrame({"pid": [1, 1], "tid": [1, 1], "start_ns": [10, 30], "end_ns": [20, 40]})
    clock = ThreadClock.of(threads, [pl.DataFrame({"lo": [0], "hi": [100]})])
    until = clock.until(coverage_index(union, ["pid", "tid"], presorted=True))
    th = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    t = np.array([5, 10, 15, 20, 35, 50, 15, 50])
    assert until(th, t).tolist() == [0, 0, 5, 10, 15, 20, 0, 0]


def test_no_thread_clock_when_its_keys_would_not_fit_an_int64():
    from traceanalyzer.analyses.graph_nodes import ThreadClock

    threads = pl.DataFrame({"pid": [1, 1], "tid": [1, 2]})
    assert ThreadClock.of(threads, [pl.DataFrame({"lo": [0], "hi": [2**61]})]) is None  # 2 threads x 2^61
    assert ThreadClock.of(threads, [pl.DataFrame({"lo": [0], "hi": [2**60]})]) is not None
    assert ThreadClock.of(threads, [pl.DataFrame({"lo": [0, None], "hi": [5, 6]})]) is None  # a null time


@pytest.mark.parametrize(
    "name", ["a100_multistream_syncs.json.gz", "v100_resnet50_dataloader_workers4.pt.trace.json.gz"]
)
def test_the_graph_on_the_thread_clock_is_the_graph_by_sorts_and_joins(SHARED_TRACES: Path, monkeypatch, name: str):
    """The slices found on one int64 per (thread, instant) and looked up by binary search are
    those of the sort on (pid, tid, time) and the joins on its keys, to every row and edge."""
    from traceanalyzer.analyses import graph_nodes

    ses = Session(load(str(SHARED_TRACES / name)))
    fast = ses.dependency_model.graph
    monkeypatch.setattr(graph_nodes.ThreadClock, "of", classmethod(lambda cls, threads, times: None))
    slow = Session(ses.trace).dependency_model.graph  # a released result is never computed again
    assert fast.nodes.height > 1000
    for a, b in ((fast.nodes, slow.nodes), (fast.edges, slow.edges), (fast.steps, slow.steps), (fast.gpu, slow.gpu)):
        assert a.equals(b)
    assert fast.layer_times.equals(slow.layer_times) and fast.layer_of.equals(slow.layer_of)


def test_layer_fold_is_layer_table():
    """`LayerFold` builds `layer_table`'s two parts a layer at a time: five slices of spans 8, 4,
    7, 6 and 5 ns (the fourth a wait: duration 0, so its one layer's time goes to the long
    table; the fifth wholly in two layers at once, which no fold gives but both keep), and a
    fold started again (layer 0) forgets the first."""
    from traceanalyzer.analyses.graph_table import LayerFold, layer_table

    layers = ("sync", "launch", "python")
    times = {"sync": [5, 0, 0, 6, 5], "launch": [3, 4, 7, 0, 5], "python": [0, 0, 0, 0, 0]}
    dur = np.array([8, 4, 7, 0, 5])
    fold = LayerFold(np.array([8, 4, 7, 6, 5]), layers)
    fold.add(0, np.array([1, 1, 1, 1, 1], dtype=np.int32))  # forgotten: layer 0 again below
    for k, layer in enumerate(layers):
        fold.add(k, np.array(times[layer], dtype=np.int32))
    layer_of, lt = fold.parts(dur)
    cpu = pl.DataFrame({"dur_ns": dur, **{f"t_{c}": pl.Series(v, dtype=pl.Int32) for c, v in times.items()}})
    _, want_of, want = layer_table(cpu, layers)
    assert layer_of.to_list() == want_of.to_list() == [None, 1, 1, None, None]
    assert lt.equals(want) and lt.rows() == [
        (0, "sync", 5), (3, "sync", 6), (4, "sync", 5), (0, "launch", 3), (4, "launch", 5)
    ]  # fmt: skip


def test_layer_times_are_held_as_each_slice_s_one_layer_else_its_times():
    """Four slices: 5 ns of sync and 3 of launch in the first (8 ns: two layers), nothing in
    the second (a null counts as nothing), all 7 ns of the third in launch (its one layer), 6 ns
    of sync in the fourth, a wait of duration 0; a layer listed twice counts twice."""
    from traceanalyzer.analyses.graph_table import DependencyGraph, layer_table

    cpu = pl.DataFrame(
        {
            "dur_ns": [8, 4, 7, 0],
            "t_sync": pl.Series([5, 0, None, 6], dtype=pl.Int32),
            "t_launch": pl.Series([3, None, 7, 0], dtype=pl.Int64),
        }
    )
    slices, layer_of, lt = layer_table(cpu, ("sync", "launch", "python"))
    assert slices.columns == ["dur_ns"]  # the times left the slices
    assert layer_of.to_list() == [None, None, 1, None]  # the third: all in launch
    assert sorted(lt.rows()) == [(0, "launch", 3), (0, "sync", 5), (3, "sync", 6)]
    assert lt.schema == {"node": pl.Int32, "layer": pl.Enum(["sync", "launch", "python"]), "ns": pl.Int32}
    empty = pl.Series([], dtype=pl.String)
    g = DependencyGraph(slices, pl.DataFrame(), pl.DataFrame(), empty, empty, empty, layer_times=lt, layer_of=layer_of)
    assert g.layer_ns(["launch"]).tolist() == [3.0, 0.0, 7.0, 0.0]
    assert g.layer_ns(["sync", "launch"]).tolist() == [8.0, 0.0, 7.0, 6.0]
    assert g.layer_ns(["sync", "sync"]).tolist() == [10.0, 0.0, 0.0, 12.0]
    assert g.layer_ns(["launch", "launch"]).tolist() == [6.0, 0.0, 14.0, 0.0]
    assert g.layer_ns(["python"]).tolist() == [0.0, 0.0, 0.0, 0.0]
    assert g.layer_ns([]).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_the_graph_holds_every_layer_time_of_the_slices(SHARED_TRACES: Path, monkeypatch):
    """The long table gives back, per slice and layer, the time `slice_kinds` computed (each
    layer's times as folded, `LayerFold.add`), on a trace with Python frames and slices that lie
    in two layers (two slices of b200_eager_rank0: each moment is counted once, by layer priority).
    The fold a layer at a time (`_fold_numpy`: the native one fills the fold at once, the same
    as test_graph_native checks)."""
    from traceanalyzer.analyses import graph_table as gt
    from traceanalyzer.analyses import slice_kinds as sk
    from traceanalyzer.analyses.graph_nodes import KIND_LAYERS

    kernel = sk.native_kernel
    monkeypatch.setattr(
        sk, "native_kernel", lambda name, force=False: None if name == "fold_slices" else kernel(name, force)
    )

    seen = {}
    add = gt.LayerFold.add

    def keep(self, k, t):
        seen[KIND_LAYERS[k]] = t.astype(np.float64)
        add(self, k, t)

    monkeypatch.setattr(gt.LayerFold, "add", keep)
    g = Session(load(str(SHARED_TRACES / "b200_eager_rank0.json.gz"))).dependency_model.graph
    n = len(seen["untraced"])
    assert 1000 < n < g.nodes.height and not any(c.startswith("t_") for c in g.nodes.columns)
    for layer in KIND_LAYERS:
        got = g.layer_ns([layer])
        assert np.array_equal(got[:n], seen[layer]) and not got[n:].any(), layer
    assert (g.layer_ns(["python"]) > 0).any()
    assert g.layer_times.group_by("node").len()["len"].max() == 2  # a slice in two layers
    assert g.layer_of.null_count() < g.layer_of.len() / 10  # nearly every slice: one layer


def test_op_dims_by_row_and_by_join():
    """The input shapes of GPU work's ops: by row where op ids are row numbers, else by a join;
    the same answer either way (null for no op or an op not in the table)."""
    from traceanalyzer.analyses.graph_nodes import _op_dims

    dims = ["[[8, 16]]", None, "[[4]]"]
    by_row = pl.DataFrame({"op_id": pl.Series([0, 1, 2], dtype=pl.Int32), "input_dims": dims})
    by_id = pl.DataFrame({"op_id": pl.Series([5, 7, 9], dtype=pl.Int32), "input_dims": dims})
    assert _op_dims(by_row, pl.Series([2, None, 0, 1], dtype=pl.Int32)).to_list() == ["[[4]]", None, "[[8, 16]]", None]
    assert _op_dims(by_id, pl.Series([9, None, 5, 6], dtype=pl.Int32)).to_list() == ["[[4]]", None, "[[8, 16]]", None]
    assert _op_dims(by_row, pl.Series([3], dtype=pl.Int32)).to_list() == [None]  # beyond the rows: joined, none


def test_segments_in_time_order_are_the_walk_reversed_per_window():
    """The walk appends each window's segments walking back: in time order they are each
    window's run reversed (windows in order), or a stable sort by window then position reversed
    (windows out of order), as the sort of the table gave them."""
    import numpy as np

    from traceanalyzer.analyses.critical_path import _time_order

    for w in ([0, 0, 0, 1, 1, 3, 3, 3, 3], [1, 1, 0, 0, 2, 1], [5], [2, 2, 2]):
        want = pl.DataFrame({"w": w}).with_row_index("s").sort("w", "s", descending=[False, True])["s"]
        assert _time_order(np.array(w, dtype=np.int64)).tolist() == want.to_list(), w
    assert _time_order(np.zeros(0, dtype=np.int64)) is None


def test_a_column_at_a_few_rows_is_the_column_gathered(SHARED_TRACES: Path):
    """`column_at` (a GPU node's column, own_ns) gives `column(name).gather(rows)`, rows
    repeated and in any order, without making the node-long column."""
    import numpy as np

    g = Session(load(str(SHARED_TRACES / "a100_multistream_syncs.json.gz"))).dependency_model.graph
    n = g.nodes.height
    syncs = g.own["node"].cast(pl.Int64).to_list()
    assert syncs  # a trace with syncs whose own time is not their duration
    rows = pl.Series(np.random.default_rng(1).integers(0, n, 500).tolist() + syncs[::-1] + [0, n - 1, syncs[0]])
    for name in ("own_ns", "gpu_id", "wait_ns", "dur_ns"):
        assert g.column_at(name, rows).equals(g.column(name).gather(rows)), name


def test_forks_by_joins_on_the_clock_are_the_forks_by_searches(SHARED_TRACES: Path, monkeypatch):
    """Where the searches in the slices' keys step back (two threads tie), the as-of joins find
    the forks from the thread numbers and rows (the slices have no pid or node column on the
    clock): the same edges, on traces whose main thread forks and joins."""
    from traceanalyzer.analyses import dependency_graph as dg

    for name in ("b200_eager_rank0.json.gz", "v100_resnet50_dataloader_workers4.pt.trace.json.gz"):
        ses = Session(load(str(SHARED_TRACES / name)))
        fast = ses.dependency_model.graph.edges
        with monkeypatch.context() as m:
            m.setattr(dg, "_forks_on_clock", lambda *args: None)
            slow = Session(ses.trace).dependency_model.graph.edges
        assert fast.equals(slow), name
    assert fast.filter(pl.col("etype").is_in(["fork", "join"])).height > 0


def test_as_enum_by_codes_where_the_categories_begin_alike():
    """An Enum of ("a", "b") into ("a", "b", "c"): its codes are the new ones (a gather); from
    ("b", "a") or from strings, a cast. Each the values and type the cast gives, nulls kept."""
    from traceanalyzer.analyses.graph_table import as_enum

    wide = pl.Enum(["a", "b", "c"])
    for own in (pl.Enum(["a", "b"]), pl.Enum(["b", "a"]), pl.String):
        s = pl.Series("kind", ["b", None, "a", "b"], dtype=own)
        got = as_enum(s, wide)
        assert got.dtype == wide and got.name == "kind" and got.to_list() == ["b", None, "a", "b"]
        assert got.to_physical().to_list() == [1, None, 0, 1]


def test_narrow_int32_where_every_value_fits():
    """`narrow`: a column whose values all fit in int32 becomes Int32 with the same values, by
    numpy (one chunk, no null: `a`, sorted, keeps its flag) or by polars (`b` has a null, `d` is
    two chunks); `c` holds 2^40 and stays Int64; an Int32 column and a missing name are left."""
    d = pl.concat([pl.Series("d", [-(2**31)]), pl.Series("d", [0, 2**31 - 1])], rechunk=False)
    df = pl.DataFrame({"a": pl.Series([-5, 0, 7]).set_sorted(), "b": [1, None, 3], "c": [2**40, 1, 2], "d": d})
    df = df.with_columns(e=pl.Series([1, 2, 3], dtype=pl.Int32))
    out = narrow(df, ["a", "b", "c", "d", "e", "missing"])
    assert dict(out.schema) == {"a": pl.Int32, "b": pl.Int32, "c": pl.Int64, "d": pl.Int32, "e": pl.Int32}
    assert out.rows() == [(-5, 1, 2**40, -(2**31), 1), (0, None, 1, 0, 2), (7, 3, 2, 2**31 - 1, 3)]
    assert out["a"].flags["SORTED_ASC"] and not out["b"].flags["SORTED_ASC"]
