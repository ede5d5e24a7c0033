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
    nodes = g.nodes.with_columns(name=names)
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
    for a, b in ((fast.nodes, slow.nodes), (fast.edges, slow.edges), (fast.steps, slow.steps)):
        assert a.equals(b)


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
