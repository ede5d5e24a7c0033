"""`summary`, `stages`, `ops`, `kernels` and `rules` in-process: the JSON shapes other tools rely
on, `--fail-on` exit codes, and every command on every shared trace without a traceback."""

from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner

from tests.conftest import SHARED_TRACES_DIR
from traceanalyzer.cli import cli, main
from traceanalyzer.cli.commands import common
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.findings import RULE_IDS
from traceanalyzer.load import load

ALL_TRACES = (
    sorted(p for p in SHARED_TRACES_DIR.rglob("*") if p.is_file() and ".json" in p.name)
    if SHARED_TRACES_DIR.is_dir()
    else []
)
COMMANDS = (
    ["summary"],
    ["stages"],
    ["stages", "--view", "tensorboard"],
    ["ops"],
    ["ops", "--group-by", "module"],
    ["kernels"],
)


@functools.cache
def _load(path: str):
    return load(path)


@pytest.fixture
def cached(monkeypatch):
    """Each trace is loaded once for the whole module (loading has its own tests)."""
    monkeypatch.setattr(common, "load_trace", lambda p, *a, **k: _load(str(p)))


def _run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, (SystemExit, RegressionDetected)), result.exc_info
    assert result.exit_code == code, result.output
    return result


def _json(*args: str, code: int = 0) -> dict:
    return json.loads(_run(*args, "--format", "json", code=code).stdout)


@pytest.fixture(scope="module")
def w0(SHARED_TRACES):
    return str(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")


def test_summary_json_findings(cached, w0):
    doc = _json("summary", w0)
    assert doc["command"] == "summary" and doc["tool_version"] and doc["input"] == w0
    assert doc["thresholds"]["data_loading_share"] == 0.1 and doc["thresholds"]["outlier_factor"] == 1.5
    rules = {f["rule"]: f for f in doc["findings"]}
    assert "data_loading" in rules and "sync_stalls" not in rules
    assert set(rules["data_loading"]) >= {"rule", "severity", "message", "evidence"}
    assert doc["steps"]["count"] == 6 and doc["steps"]["mean_us"] == pytest.approx(177_592, abs=1)
    assert doc["stages"]["view"] == "pipeline" and doc["top_ops"] and doc["top_kernels"]


def test_fail_on_exit_codes(cached, w0, tmp_path):
    _run("summary", w0, "--fail-on", "sync_stalls", "--fail-on", "single_tensor_optimizer", code=0)
    result = _run("summary", w0, "--fail-on", "sync_stalls", "--fail-on", "data_loading", code=1)
    assert isinstance(result.exception, RegressionDetected) and "data_loading" in str(result.exception)
    # Through the real entry point: 1 for a fired finding, 2 for bad input or a bad rule id.
    assert main(["summary", w0, "--fail-on", "data_loading", "-o", str(tmp_path / "s.json")]) == 1
    assert main(["summary", str(tmp_path / "missing.json")]) == 2
    assert main(["summary", w0, "--fail-on", "no_such_rule"]) == 2
    # A threshold flag can silence the rule.
    _run("summary", w0, "--fail-on", "data_loading", "--data-loading-share", "0.9", code=0)


def test_stages_json_shape(cached, w0):
    doc = _json("stages", w0, "--view", "tensorboard")
    assert [s["step"] for s in doc["steps"]] == [5, 6, 7, 8, 9, 10]
    first = doc["steps"][0]
    assert set(first) == {"step", "duration_us", "stages"}
    assert list(first["stages"]) == ["Kernel", "Memcpy", "Memset", "Runtime", "DataLoader", "CPU Exec", "Other"]
    assert round(doc["average"]["DataLoader"]) == 59_262  # the TensorBoard plugin's number
    pipe = _json("stages", w0)
    assert list(pipe["average"]) == [
        "data_loading",
        "h2d",
        "forward",
        "backward",
        "optimizer",
        "d2h",
        "sync_wait",
        "other_cpu",
        "gpu_idle",
    ]
    assert sum(pipe["steps"][0]["stages"].values()) == pytest.approx(pipe["steps"][0]["duration_us"])


def test_stages_mapping_option(cached, w0, tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text('[stages]\nload = "DataLoader"\nbackward = "Backward"\n')
    doc = _json("stages", w0, "--stages", str(toml))
    assert doc["stage_order"] == ["load", "backward", "sync_wait", "other_gpu", "other_cpu", "gpu_idle"]
    assert main(["stages", w0, "--stages", str(toml), "--view", "tensorboard"]) == 2


def test_ops_and_kernels_json(cached, w0):
    doc = _json("ops", w0, "--sort", "self_cpu_us", "--top", "3")
    assert len(doc["ops"]) == 3 and doc["sort"] == "self_cpu_us"
    assert doc["ops"][0]["self_cpu_us"] >= doc["ops"][1]["self_cpu_us"]
    assert main(["ops", w0, "--sort", "nope"]) == 2
    k = _json("kernels", w0, "--top", "5")
    assert len(k["kernels"]) == 5 and k["short_kernels"]["threshold_us"] == 10.0
    assert {
        "kernel",
        "calls",
        "total_us",
        "mean_us",
        "min_us",
        "max_us",
        "share",
        "grid",
        "block",
        "tensor_cores",
        "launched_by",
    } <= set(k["kernels"][0])


def test_rules_lists_every_rule():
    doc = _json("rules")
    assert [r["rule"] for r in doc["rules"]] == list(RULE_IDS)
    assert "data_loading_share=0.1" in doc["rules"][0]["thresholds"]
    assert "data_loading" in _run("rules").stdout


@pytest.mark.parametrize("trace", ALL_TRACES, ids=[p.name for p in ALL_TRACES])
def test_every_command_on_every_trace(cached, trace):
    for args in COMMANDS:
        _run(*args, str(trace))
    doc = _json("summary", str(trace))
    assert all(f["rule"] in RULE_IDS for f in doc["findings"])
