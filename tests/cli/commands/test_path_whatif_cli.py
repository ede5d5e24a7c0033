"""`path`, `whatif` and the savings in `summary`, in-process: the JSON shapes, the numbers the
analyses tests work out by hand, and bad input as a one-line error with exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli, main


def _json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def sync_bound(tmp_path):
    """The sync-bound case of tests/analyses/test_whatif.py: step 500 µs, a 400 µs kernel on the path."""
    b = TraceBuilder()
    b.step(1, 0, 500)
    b.op("aten::mm", 0, 20)
    b.kernel("gemm", ts=12, dur=400, launch_ts=5)
    b.op("aten::item", 20, 410)
    b.runtime("cudaStreamSynchronize", 25, 395)
    b.op("aten::add", 430, 70)
    return str(b.write(tmp_path))


def test_path_json(sync_bound):
    doc = _json("path", sync_bound)
    (step,) = doc["steps"]
    assert step["step_us"] == 500
    assert sum(s["duration_us"] for s in step["segments"]) == 500
    assert [s["kind"] for s in step["segments"]][-3:] == ["sync", "cpu_op", "cpu_op"]
    kinds = {r["kind"]: r for r in doc["by_kind"]}
    assert kinds["kernel"]["duration_us"] == 400 and kinds["kernel"]["share"] == pytest.approx(0.8)
    assert doc["by_name"][0]["name"] == "gemm" and doc["thresholds"]["thread_wait_us"] == 50.0


def test_path_text_makes_no_step_paths_and_json_lists_each_steps_segments(sync_bound, monkeypatch):
    """Every step's path is JSON's alone: the text (and CSV) print the slowest step's, which they
    read from the segments, so `step_paths` is never called for them (at 311 MB it was +110 MB)."""
    from traceanalyzer.cli.commands import path

    real = path.step_paths
    monkeypatch.setattr(path, "step_paths", lambda *a: pytest.fail("step_paths made for the text"))
    text = CliRunner().invoke(cli, ["path", sync_bound], catch_exceptions=False)
    assert text.exit_code == 0 and "Slowest step (1, 500 µs)" in text.stdout, text.output
    monkeypatch.setattr(path, "step_paths", real)
    (step,) = _json("path", sync_bound)["steps"]
    assert (step["step"], step["index"]) == (1, 0) and set(step["segments"][0]) == {
        "kind", "name", "lane", "start_us", "duration_us"
    }  # fmt: skip


def test_whatif_json(sync_bound):
    doc = _json("whatif", sync_bound, "--speedup", "gemm=2")
    assert doc["median_step_us"] == 500 and doc["replayed_median_step_us"] == 500
    assert doc["predicted_median_step_us"] == 300 and doc["saving_us"] == 200
    assert doc["scenario"]["speedup"] == [{"pattern": "gemm", "factor": 2.0}]
    both = _json("whatif", sync_bound, "--without", "sync", "--drop", "aten::add")
    assert both["predicted_median_step_us"] == 412  # the kernel's end: the CPU part is shorter


def test_whatif_bad_input(sync_bound, capsys):
    assert main(["whatif", sync_bound, "--speedup", "gemm"]) == 2
    assert main(["whatif", sync_bound, "--speedup", "gemm=0"]) == 2
    assert main(["whatif", sync_bound, "--without", "coffee"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all("Traceback" not in line for line in err)


def test_summary_findings_carry_savings(SHARED_TRACES):
    w0 = str(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")
    doc = _json("summary", w0)
    findings = doc["findings"]
    for f in findings:
        assert "saving_us" in f
        assert (f["saving_us"] is not None and f["saving_confidence"] in ("high", "medium", "low")) or (
            f["saving_us"] is None and f["saving_note"]
        )
    estimated = [f for f in findings if f["saving_us"] is not None]
    # firm estimates by saving, then the low-confidence upper bounds by saving, then the rest
    firm = [f["saving_us"] for f in estimated if f["saving_confidence"] != "low"]
    bounds = [f["saving_us"] for f in estimated if f["saving_confidence"] == "low"]
    assert [f["saving_us"] for f in estimated] == sorted(firm, reverse=True) + sorted(bounds, reverse=True)
    assert findings[len(estimated) :] == [f for f in findings if f["saving_us"] is None]
    assert findings[0]["rule"] == "data_loading"  # the fix the workers4 run confirms (177.4 -> 126.7 ms)
    data = next(f for f in findings if f["rule"] == "data_loading")
    # one trace, one story: the whatif command's saving for the same scenario
    whatif = _json("whatif", w0, "--without", "data_loading")
    assert whatif["median_step_us"] == pytest.approx(177_443, abs=1)  # from the raw JSON, TensorBoard's step rule
    assert data["saving_us"] == whatif["saving_us"] and data["saving_confidence"] == "high"
    assert {r["kind"] for r in doc["critical_path"]["by_kind"]} >= {"kernel", "data_loading"}


def test_path_table_collapses_runs_of_a_kind():
    import polars as pl

    from traceanalyzer.cli.commands.path import runs

    seg = pl.DataFrame(
        {
            "kind": ["cpu_op", "cpu_op", "kernel", "cpu_op"],
            "name": ["a", "b", "k", "a"],
            "lane": ["t", "t", "g", "t"],
            "start_us": [0.0, 5.0, 8.0, 10.0],
            "duration_us": [5.0, 3.0, 2.0, 1.0],
        }
    )
    got = runs(seg).select("kind", "start_us", "duration_us", "segments", "mostly").rows()
    assert got == [("cpu_op", 0.0, 8.0, 2, "a"), ("kernel", 8.0, 2.0, 1, "k"), ("cpu_op", 10.0, 1.0, 1, "a")]
