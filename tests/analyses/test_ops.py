"""Ops (key_averages from the trace): self/total CPU and GPU times by hand for one op chain;
groupings; CUDA-graph replays attributed to the op around each cudaGraphLaunch, counted from
the raw JSON."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import Counter, defaultdict

import polars as pl
import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.ops import analyse_ops, sort_table
from traceanalyzer.errors import UsageError
from traceanalyzer.options import OpsOptions


def _chain(tmp_path):
    b = TraceBuilder()
    b.annotation("nn.Module: Linear_0", 0, 120)
    b.op("aten::linear", 0, 100, **{"Input Dims": [[8, 16], [4, 16]]})
    b.op("aten::matmul", 10, 80)
    b.op("aten::mm", 20, 60, **{"Input Dims": [[8, 16], [16, 4]]})
    b.kernel("gemm", ts=40, dur=50, launch_ts=30)  # launched by aten::mm (call [30, 35])
    b.op("aten::mm", 200, 30, **{"Input Dims": [[2, 2], [2, 2]]})
    b.kernel("gemm", ts=230, dur=10, launch_ts=205)
    return load(b.write(tmp_path))


def test_self_and_total_times_by_hand(tmp_path):
    ops = analyse_ops(_chain(tmp_path))
    rows = {r["name"]: r for r in ops.table_ns.iter_rows(named=True)}
    cols = ("calls", "total_cpu_ns", "self_cpu_ns", "self_gpu_ns", "total_gpu_ns")
    # linear [0, 100] > matmul [10, 90] > mm [20, 80] > cudaLaunchKernel [30, 35] -> gemm 50 µs.
    lin, mat, mm = rows["aten::linear"], rows["aten::matmul"], rows["aten::mm"]
    assert tuple(lin[c] for c in cols) == (1, 100_000, 20_000, 0, 50_000)
    assert tuple(mat[c] for c in cols) == (1, 80_000, 20_000, 0, 50_000)
    # Two aten::mm: [20, 80] (runtime call stays in self) and [200, 230] with a 10 µs kernel.
    assert tuple(mm[c] for c in cols) == (2, 90_000, 90_000, 60_000, 60_000)
    assert (mm["self_gpu_activities"], mm["total_gpu_activities"]) == (2, 2)
    module = rows["nn.Module: Linear_0"]
    assert (module["total_cpu_ns"], module["self_cpu_ns"], module["total_gpu_ns"]) == (120_000, 20_000, 50_000)
    assert ops.table_ns["name"].to_list()[0] == "aten::mm"  # sorted by total GPU (60), then total CPU
    assert ops.table_ns.schema["total_gpu_ns"] == pl.Int64  # integer sums
    # The display view: the same rows in µs, under the names the outputs print.
    shown = {r["name"]: r for r in ops.table.iter_rows(named=True)}["aten::mm"]
    assert (shown["total_cpu_us"], shown["self_cpu_us"], shown["self_gpu_us"], shown["total_gpu_us"]) == (
        90.0,
        90.0,
        60.0,
        60.0,
    )
    assert ops.table.columns == ["name", "calls", "self_cpu_us", "total_cpu_us", "self_gpu_us", "total_gpu_us"] + [
        "self_gpu_activities",
        "total_gpu_activities",
    ]


def test_groupings_and_sort(tmp_path):
    t = _chain(tmp_path)
    shapes = analyse_ops(t, OpsOptions(group_by="shapes")).table.filter(pl.col("name") == "aten::mm")
    assert shapes.height == 2 and set(shapes["calls"]) == {1}
    by_module = analyse_ops(t, OpsOptions(group_by="module")).table
    mods = {(r["module"], r["name"]): r["calls"] for r in by_module.iter_rows(named=True)}
    assert mods[("nn.Module: Linear_0", "aten::mm")] == 1 and mods[("(no module)", "aten::mm")] == 1
    assert sort_table(analyse_ops(t).table, "self_cpu_us")["name"][0] == "aten::mm"
    with pytest.raises(UsageError):
        sort_table(analyse_ops(t).table, "nope")
    with pytest.raises(UsageError):
        analyse_ops(t, OpsOptions(group_by="nope"))


def _innermost_op_names(raw: list[dict], calls: list[dict]) -> list[str | None]:
    """For each call, the name of the latest-starting op on its thread that contains it."""
    by_thread = defaultdict(list)
    for e in raw:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e["name"]))
    for v in by_thread.values():
        v.sort()
    starts = {k: [s for s, _, _ in v] for k, v in by_thread.items()}
    out = []
    for c in calls:
        ts, end = float(c["ts"]), float(c["ts"]) + float(c.get("dur", 0))
        ops = by_thread.get((c["pid"], c["tid"]), [])
        i = bisect.bisect_right(starts.get((c["pid"], c["tid"]), []), ts) - 1
        name = None
        while i >= 0:
            s, e, n = ops[i]
            if e >= end:
                name = n
                break
            i -= 1
        out.append(name)
    return out


def test_graph_replays_counted_for_the_launching_op(SHARED_TRACES):
    path = SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz"
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)["traceEvents"]
    launches = [e for e in raw if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"]
    kernels_per_corr = Counter(e["args"]["correlation"] for e in raw if e.get("cat") == "kernel")
    expected = Counter()
    for call, name in zip(launches, _innermost_op_names(raw, launches)):
        expected[name] += kernels_per_corr[call["args"]["correlation"]]
    assert len(launches) == 650 and sum(expected.values()) == 11_540 and None not in expected

    # Exactly: everything launched (graph or not) by runtime/driver calls whose innermost op
    # has one of those names.
    gpu_per_corr = Counter(
        e["args"].get("correlation") for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    calls = [e for e in raw if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X"]
    direct = Counter()
    seen = set()
    for call, name in zip(calls, _innermost_op_names(raw, calls)):
        corr = call.get("args", {}).get("correlation")
        if name in expected and corr not in seen:
            seen.add(corr)
            direct[name] += gpu_per_corr[corr]

    ops = analyse_ops(load(path))
    rows = {r["name"]: r for r in ops.table_ns.iter_rows(named=True)}
    for name, n in expected.items():
        assert rows[name]["self_gpu_activities"] == direct[name] >= n
