"""Findings: each rule fires where it should and stays silent where it should not."""

from __future__ import annotations

import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.findings import RULE_IDS, RULES, Overview, analyse_findings, evaluate
from traceanalyzer.options import FindingOptions


def _rules(trace, options: FindingOptions | None = None) -> dict:
    return {f.rule: f for f in analyse_findings(trace, options)}


def test_rule_ids_are_the_published_names():
    assert RULE_IDS == (
        "data_loading",
        "sync_stalls",
        "pageable_copies",
        "launch_bound",
        "no_tensor_cores",
        "single_tensor_optimizer",
        "low_gpu_utilization",
        "capture_caveats",
    )
    assert tuple(r.id for r in RULES) == RULE_IDS
    fields = set(FindingOptions.__dataclass_fields__)
    assert all(set(r.thresholds) <= fields for r in RULES)


@pytest.fixture(scope="module")
def workers(SHARED_TRACES):
    return {n: load(SHARED_TRACES / f"v100_resnet50_dataloader_{n}.pt.trace.json.gz") for n in ("workers0", "workers4")}


def test_data_loading_fires_on_workers0_only(workers):
    f0 = _rules(workers["workers0"])
    assert "data_loading" in f0
    ev = f0["data_loading"].evidence
    # Pipeline stage share (data-loading ranges take priority over GPU work): 39.0 % of the
    # 177,592 µs step; the TensorBoard plugin's lower-priority DataLoader category is 33.37 %.
    assert ev["step_us"] == pytest.approx(177_592, abs=1) and ev["share"] > 0.3337
    assert f0["data_loading"].severity == "high" and f0["data_loading"].events
    assert "data_loading" not in _rules(workers["workers4"])  # 0.84 % in the plugin


def test_sync_stalls_fire_on_a100_multistream(SHARED_TRACES):
    f = _rules(load(SHARED_TRACES / "a100_multistream_syncs.json.gz"))
    assert "sync_stalls" in f
    ev = f["sync_stalls"].evidence
    # 75 cudaStreamSynchronize + 1 cudaDeviceSynchronize (README: 75 cudaStreamSynchronize).
    assert ev["sync_calls"] == 76 and ev["share"] >= 0.05


def test_silent_on_resnet_workers4_for_syncs(workers):
    assert "sync_stalls" not in _rules(workers["workers4"])


def test_pageable_copies_threshold(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.step(2, 100, 100)
    b.step(3, 200, 100)
    b.memcpy("HtoD (Pageable -> Device)", ts=10, dur=20, nbytes=2 << 20, launch_ts=5, launch_dur=30)
    trace = load(b.write(tmp_path))
    f = _rules(trace)
    assert f["pageable_copies"].evidence["bytes"] == 2 << 20 and f["pageable_copies"].evidence["copies"] == 1
    assert "pageable_copies" not in _rules(trace, FindingOptions(pageable_copy_bytes=4 << 20))


def test_single_tensor_optimizer_and_caveats(tmp_path):
    b = TraceBuilder()
    b.python("torch/optim/adam.py(345): _single_tensor_adam", 0, 50, pid_=1)
    b.op("aten::add_", 5, 10)
    b.kernel("k", ts=20, dur=5, launch_ts=6)
    f = _rules(load(b.write(tmp_path)))
    assert f["single_tensor_optimizer"].evidence == {"events": 1}
    assert f["capture_caveats"].evidence["caveats"] == ["no_steps"] and f["capture_caveats"].severity == "info"


def test_no_tensor_cores_and_low_utilisation(tmp_path):
    b = TraceBuilder()
    for i in range(3):
        b.step(i + 1, 1000 * i, 1000)
        b.op("aten::mm", 1000 * i, 10)
        b.kernel("volta_sgemm_128x64_nn", ts=1000 * i + 100, dur=100, launch_ts=1000 * i + 1)
    f = _rules(load(b.write(tmp_path)))
    assert f["no_tensor_cores"].evidence["share"] == 1.0
    assert f["low_gpu_utilization"].evidence["busy_share"] == pytest.approx(0.1)
    assert f["low_gpu_utilization"].severity == "high"  # 10 % <= half of 60 %
    assert "launch_bound" not in f  # three kernels say nothing about launches


def test_every_rule_runs_on_empty_and_cpu_only_traces(SHARED_TRACES):
    for name in (
        "edge_gb10_no_gpu_events.pt.trace.json.gz",
        "edge_cpu_only.pt.trace.json.gz",
        "edge_large_integer.pt.trace.json.gz",
    ):
        fired = evaluate(Overview(load(SHARED_TRACES / name)))
        assert {f.rule for f in fired} <= {"capture_caveats", "low_gpu_utilization"}
