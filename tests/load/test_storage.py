"""How the Trace stores its tables (trace.py, "Storage"): the same values in fewer bytes. Each
case is a small trace written here, its expected values worked out from its JSON."""

from __future__ import annotations

import json

import polars as pl

from traceanalyzer.jobs import cache
from traceanalyzer.load.loader import load
from traceanalyzer.trace import GPU_ACTIVITY_KINDS, one_valued


def _kernel(ts, *, pid=0, tid=7, grid=(1, 1, 1), device=0, stream=7, cat="kernel", corr=1):
    args = {"device": device, "stream": stream, "correlation": corr, "grid": list(grid), "block": [128, 1, 1]}
    return {"ph": "X", "cat": cat, "name": f"k{ts}", "pid": pid, "tid": tid, "ts": ts, "dur": 2, "args": args}


def _op(ts, dur, name="aten::mm", tid=11):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 42, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _launch(ts, corr):
    args = {"correlation": corr}
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 42,
        "tid": 11,
        "ts": ts,
        "dur": 1,
        "args": args,
    }


def _write(tmp_path, events, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_one_valued_columns_are_held_once(tmp_path):
    # every op and runtime call is on pid 42, on two threads; the kernels on device 0
    events = [_op(0, 100), _op(10, 20), _op(200, 50, tid=12), _launch(15, 1), _launch(210, 2)]
    events += [_kernel(30, corr=1), _kernel(230, corr=2, grid=(4, 1, 1))]
    trace = load(_write(tmp_path, events))
    # a scalar column: a few bytes whatever the rows; a column with two values is 8 bytes a row
    assert trace.ops.select("pid").estimated_size() < 16
    assert trace.ops.select("tid").estimated_size() == 3 * 8
    assert trace.gpu.select("pid", "device").estimated_size() < 32
    assert trace.ops.schema["pid"] == pl.Int64  # the same type as stored in full
    # read through a select, every row has the value (`ops["pid"]` would store it in full)
    values = trace.ops.select("pid", "tid").to_dict(as_series=False)
    assert values == {"pid": [42, 42, 42], "tid": [11, 11, 12]}
    assert trace.runtime.select("pid").to_series().to_list() == [42, 42]
    assert trace.gpu.select("device", "launch_pid").rows() == [(0, 42), (0, 42)]
    assert trace.ops.filter(pl.col("tid") == 12).select("pid").item() == 42
    assert trace.ops.select("pid").estimated_size() < 16  # still held once
    # the cache reads a table back stored the same way
    folder = tmp_path / "entry"
    folder.mkdir()
    cache.dump_trace(trace, folder)
    cached = cache.load_trace(folder)
    assert cached.ops.select("pid").estimated_size() < 16
    assert cached.ops["pid"].to_list() == [42, 42, 42]


def test_one_valued_leaves_nulls_and_two_values_alone():
    df = pl.DataFrame({"a": [5, 5, None], "b": [1, 2, 1], "c": [9, 9, 9], "s": ["x", "x", "x"]})
    out = one_valued(df)
    assert out.to_dict(as_series=False) == df.to_dict(as_series=False)
    assert out.select("c").estimated_size() < 16
    assert out.select("a").estimated_size() >= 3 * 8 and out.select("b").estimated_size() == 3 * 8


def test_gpu_device_and_stream_fall_back_to_pid_and_tid(tmp_path):
    # the second kernel says no device and no stream: its pid 3 and tid 9 stand for them; the
    # first says device 0 / stream 7 on pid 0 / tid 7
    second = _kernel(40, pid=3, tid=9, corr=2)
    del second["args"]["device"], second["args"]["stream"]
    trace = load(_write(tmp_path, [_kernel(30), second]))
    gpu = trace.gpu.sort("ts_ns")
    assert gpu["device"].to_list() == [0, 3] and gpu["stream"].to_list() == [7, 9]
    # a device arg beside no pid at all is kept (the pid stays unknown)
    no_pid = _kernel(30, device=4)
    del no_pid["pid"]
    trace = load(_write(tmp_path, [no_pid, _kernel(40, device=4, pid=4, corr=2)], "p.json"))
    assert trace.gpu.sort("ts_ns").select("device", "pid").rows() == [(4, None), (4, 4)]
    # a device arg that differs from the pid is kept
    trace = load(_write(tmp_path, [_kernel(30, device=1), _kernel(40, pid=1, device=1)], "d.json"))
    assert trace.gpu.sort("ts_ns")["device"].to_list() == [1, 1]
    assert trace.gpu.sort("ts_ns")["pid"].to_list() == [0, 1]


def test_gpu_kind_is_an_enum_read_as_strings(tmp_path):
    events = [_kernel(30), _kernel(40, cat="gpu_memcpy", corr=2), _kernel(50, cat="gpu_memset", corr=3)]
    trace = load(_write(tmp_path, events))
    assert trace.gpu.schema["kind"] == GPU_ACTIVITY_KINDS
    assert trace.gpu.sort("ts_ns")["kind"].to_list() == ["kernel", "memcpy", "memset"]
    assert trace.gpu.filter(pl.col("kind") == "memcpy")["ts_ns"].to_list() == [40_000]


def test_grid_is_int64_where_a_value_does_not_fit_int32(tmp_path):
    small = load(_write(tmp_path, [_kernel(30, grid=(2**31 - 1, 1, 1))], "s.json"))
    assert small.gpu.schema["grid"] == pl.List(pl.Int32) and small.gpu["grid"].to_list() == [[2**31 - 1, 1, 1]]
    big = load(_write(tmp_path, [_kernel(30, grid=(2**31, 1, 1)), _kernel(40, corr=2)], "b.json"))
    assert big.gpu.schema["grid"] == pl.List(pl.Int64)
    assert big.gpu.sort("ts_ns")["grid"].to_list() == [[2**31, 1, 1], [1, 1, 1]]
    assert big.gpu.schema["block"] == pl.List(pl.Int32)  # each list column on its own values


def test_depth_is_int16(tmp_path):
    # op 0 [0, 100) holds op 1 [10, 30), which holds op 2 [12, 20): depths 0, 1, 2
    trace = load(_write(tmp_path, [_op(0, 100), _op(10, 20), _op(12, 8)]))
    assert trace.ops.schema["depth"] == pl.Int16
    assert trace.ops.sort("ts_ns")["depth"].to_list() == [0, 1, 2]
    assert trace.ops.sort("ts_ns")["parent_id"].to_list()[1:] == [0, 1]


def test_row_ids_and_their_links_are_int32(tmp_path):
    # op 0 [0, 100) holds the launch [15, 16) of kernel k30 (correlation 1)
    trace = load(_write(tmp_path, [_op(0, 100), _op(10, 20), _launch(15, 1), _kernel(30, corr=1)]))
    for table, cols in {"ops": ["op_id", "parent_id"], "runtime": ["runtime_id", "op_id"]}.items():
        assert all(getattr(trace, table).schema[c] == pl.Int32 for c in cols)
    assert all(trace.gpu.schema[c] == pl.Int32 for c in ("gpu_id", "runtime_id", "op_id"))
    assert trace.runtime.select("runtime_id", "op_id").rows() == [(0, 1)]  # inside op 1 [10, 30)
    assert trace.gpu.select("runtime_id", "op_id").rows() == [(0, 1)]


def test_the_gaps_analyses_keep_one_valued_columns_held_once(SHARED_TRACES):
    # a100_multistream_syncs: one process (its ops and runtime calls on one pid) and one GPU. A
    # reader that takes such a column as the table's Series (`trace.gpu["device"]`) would store
    # it in full in the Trace for the rest of the run: the gaps, the verdict and the health
    # checks read them through expressions.
    from traceanalyzer.session import Session

    ses = Session.open(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    trace = ses.trace
    held = {("ops", "pid"), ("runtime", "pid"), ("gpu", "pid"), ("gpu", "device")}
    assert all(getattr(trace, t).select(c).estimated_size() < 16 for t, c in held)
    ses.gaps, ses.verdict, ses.health  # noqa: B018 - computed for their side effects on the Trace
    assert {(t, c) for t, c in held if getattr(trace, t).select(c).estimated_size() < 16} == held
