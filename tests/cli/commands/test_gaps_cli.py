"""`traceanalyzer gaps` end to end: every shared trace (and the per-rank directory) gives exit 0
and a result or a one-line explanation, never a traceback; the JSON has the documented keys;
the console script and `python -m traceanalyzer` both run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyzer.cli import cli

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "sample_traces" / "cpu_dataloader_workers0.pt.trace.json.gz"


def _shared(name):
    return ROOT.parent / "shared" / "traces" / name


SHARED = (
    sorted(p.name for p in (ROOT.parent / "shared" / "traces").glob("*.json*"))
    if (ROOT.parent / "shared" / "traces").is_dir()
    else []
)


@pytest.mark.parametrize("name", SHARED + ["dlrm_v100_8ranks"])
def test_gaps_runs_on_every_shared_trace(SHARED_TRACES, name):
    result = CliRunner().invoke(cli, ["gaps", str(SHARED_TRACES / name), "--format", "json", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    if name == "dlrm_v100_8ranks":
        return
    doc = json.loads(result.stdout)
    assert {"tool_version", "input", "thresholds", "summary", "gaps"} <= set(doc)
    assert doc["thresholds"]["min_gap_us"] == 100.0
    if doc["summary"] is None:
        assert "no GPU work" in doc["note"]
    else:
        for d in doc["summary"]["devices"]:
            assert {"device", "window_us", "busy_us", "idle_us"} <= set(d)
        for g in doc["gaps"]:
            assert {
                "device",
                "step",
                "start_us",
                "duration_us",
                "cause",
                "op",
                "python_frame",
                "blocked_thread",
            } <= set(g)


def test_thresholds_are_flags_echoed_in_output(SHARED_TRACES):
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    result = CliRunner().invoke(
        cli, ["gaps", str(path), "--min-gap", "5000", "--launch-latency", "10", "--format", "json", "--top", "0"]
    )
    doc = json.loads(result.stdout)
    assert doc["thresholds"]["min_gap_us"] == 5000 and doc["thresholds"]["launch_latency_us"] == 10
    assert doc["gaps"] and all(g["duration_us"] >= 5000 for g in doc["gaps"])


def test_output_file_is_written_and_format_follows_extension(tmp_path):
    out = tmp_path / "gaps.json"
    result = CliRunner().invoke(cli, ["gaps", str(SAMPLE), "-o", str(out)])
    assert result.exit_code == 0
    assert json.loads(out.read_text())["input"].endswith(SAMPLE.name)


def test_console_script_and_python_dash_m():
    exe = shutil.which("traceanalyzer") or str(Path(sys.executable).parent / "traceanalyzer")
    for argv in ([exe, "gaps", str(SAMPLE)], [sys.executable, "-m", "traceanalyzer", "gaps", str(SAMPLE)]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "no GPU work" in done.stdout


def test_missing_file_is_one_line_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "gaps", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "nope.json" in done.stderr and "no such file" in done.stderr


def test_gaps_evaluates_no_rule_unless_fail_on_asks(monkeypatch, tmp_path, SHARED_TRACES):
    """gaps prints no finding: the rules (and their what-if replays of the whole dependency
    graph) run only for --fail-on; a 1 GB trace's gaps went from 1.2 to 4.3 GB RSS without this."""
    from traceanalyzer.session import Session

    calls = []
    real = Session._evaluate

    def counting(self, rules):
        calls.append(rules)
        return real(self, rules)

    monkeypatch.setattr(Session, "_evaluate", counting)
    trace = str(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")
    out = tmp_path / "g.json"
    assert CliRunner().invoke(cli, ["gaps", trace, "--no-cache", "-o", str(out)]).exit_code == 0
    assert calls == []
    result = CliRunner().invoke(cli, ["gaps", trace, "--no-cache", "-o", str(out), "--fail-on", "data_loading"])
    assert result.exit_code == 1 and calls  # data_loading fires on workers0 (77 % of idle)
