"""CLI of `memory` and `diff`: formats, the no-profile_memory message, --fail-if-slower."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from traceanalyzer.cli import cli, main


@pytest.fixture(scope="module")
def traces(SHARED_TRACES):
    return SHARED_TRACES


def test_memory_json(traces):
    res = CliRunner().invoke(
        cli, ["memory", str(traces / "h100_owlv2_inference.json.gz"), "--format", "json", "--top", "3"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["command"] == "memory" and doc["thresholds"]["near_capacity_share"] == 0.9
    cuda = doc["summary"]["devices"][0]
    assert cuda["device"] == "cuda:0" and cuda["peak_allocated_bytes"] == 2_707_847_680
    assert "peak_allocated_mb" not in cuda and isinstance(doc["live_at_peak"][0]["bytes"], int)
    assert doc["live_at_peak"][0]["op"] == "aten::bmm" and len(doc["live_at_peak"]) == 3
    assert doc["timeline"]


def test_memory_without_profile_memory(traces):
    res = CliRunner().invoke(cli, ["memory", str(traces / "edge_cpu_only.pt.trace.json.gz")])
    assert res.exit_code == 0, res.output
    assert "profile_memory=True" in res.stdout


@pytest.mark.parametrize(
    "name",
    ["edge_gb10_no_gpu_events.pt.trace.json.gz", "edge_large_integer.pt.trace.json.gz", "mi250_rocm_minitoy.json.gz"],
)
def test_edge_traces_run(traces, name):
    for args in (
        ["memory", str(traces / name)],
        ["diff", str(traces / name), str(traces / name), "--format", "markdown"],
    ):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0, res.output


def test_diff_reverse_fails_if_slower(traces, capsys):
    w0 = str(traces / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")
    w4 = str(traces / "v100_resnet50_dataloader_workers4.pt.trace.json.gz")
    assert main(["diff", w4, w0, "--fail-if-slower", "10", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["verdict"] == "slower" and doc["thresholds"]["fail_if_slower_pct"] == 10
    assert "grew by" in err and "error:" not in err
