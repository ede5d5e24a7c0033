"""Kernels: per-name statistics, Tensor Core detection and the short-kernel census, by hand on a
synthetic trace; CUDA-graph replays attributed to the op around the cudaGraphLaunch."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.kernels import analyse_kernels


def test_kernel_table_and_census(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.op("aten::mm", 0, 100)
    for i in range(3):
        b.kernel("volta_sgemm_128x64_nn", ts=100 + 100 * i, dur=80 + 10 * i, launch_ts=10 + i)
    b.op("aten::linear", 400, 10)
    b.kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", ts=500, dur=50, launch_ts=401)
    b.op("aten::add", 600, 100)
    for i in range(10):
        b.kernel("elementwise_add", ts=700 + 10 * i, dur=5, launch_ts=601 + i)
    r = analyse_kernels(load(b.write(tmp_path)))
    rows = {row["kernel"]: row for row in r.table.iter_rows(named=True)}
    sgemm = rows["volta_sgemm_128x64_nn"]
    assert (sgemm["calls"], sgemm["total_us"], sgemm["mean_us"], sgemm["min_us"], sgemm["max_us"]) == (
        3,
        270,
        90,
        80,
        100,
    )
    assert sgemm["share"] == pytest.approx(270 / 370)  # kernel time 270 + 50 + 50
    assert sgemm["matmul_conv"] and not sgemm["tensor_cores"] and sgemm["launched_by"] == "aten::mm (3)"
    assert rows["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn"]["tensor_cores"]
    assert not rows["elementwise_add"]["matmul_conv"]
    assert r.table["kernel"].to_list()[0] == "volta_sgemm_128x64_nn"  # longest total first
    s = r.short
    assert (s.count, s.total, s.time_us) == (10, 14, 50)
    assert s.count_share == pytest.approx(10 / 14) and s.time_share == pytest.approx(50 / 370)
    assert r.matmul_conv_us == 320 and r.matmul_conv_no_tc_us == 270
    assert r.tensor_core_share == pytest.approx(50 / 320)


@pytest.fixture(scope="module")
def gb10(SHARED_TRACES):
    path = SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz"
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)["traceEvents"]
    return load(path), raw


def test_graph_replays_are_attributed_to_the_launching_op(gb10):
    trace, raw = gb10
    launches = [e for e in raw if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"]
    graph_corr = {e["args"]["correlation"] for e in launches}
    replayed = [e for e in raw if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in graph_corr]
    assert (len(launches), len(replayed)) == (650, 11_540)  # ../shared/traces/README.md
    r = analyse_kernels(trace)
    assert r.table["graph_replayed"].sum() == 11_540
    # Every replayed kernel name is launched by an op (not "(no op)").
    names = {e["name"] for e in replayed}
    launched_by = dict(zip(r.table["kernel"], r.table["launched_by"]))
    assert all(launched_by[n] and "(no op)" not in launched_by[n] for n in names)
