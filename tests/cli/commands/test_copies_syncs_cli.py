"""`traceanalyzer copies` and `traceanalyzer syncs` in-process: every shared trace runs without
a traceback, and the JSON carries the documented fields and thresholds."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import SHARED_TRACES_DIR
from traceanalyzer import Session, __version__
from traceanalyzer.cli import cli
from traceanalyzer.cli.commands.copies import copies_report
from traceanalyzer.cli.commands.syncs import syncs_report
from traceanalyzer.load import load
from traceanalyzer.render import RENDERERS

ALL_TRACES = (
    sorted(p for p in SHARED_TRACES_DIR.rglob("*") if p.is_file() and ".json" in p.name)
    if SHARED_TRACES_DIR.is_dir()
    else []
)
COPY_FIELDS = {
    "direction",
    "host_memory",
    "bytes",
    "duration_us",
    "gbps",
    "overlap_fraction",
    "exposed_us",
    "blocked_us",
    "op",
    "python_frame",
    "step",
}
SYNC_FIELDS = {"kind", "api", "op", "python_frame", "blocked_us", "bubble_us", "step"}


def _run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result


SMALL = [p for p in ALL_TRACES if p.stat().st_size < 1_000_000]


@pytest.mark.parametrize("trace", ALL_TRACES, ids=[p.name for p in ALL_TRACES])
def test_runs_on_every_shared_trace(trace):
    """Load once, then what each command does after loading: analyse, build the report, render
    every format (the CLI path below is exercised on the small traces)."""
    ses = Session(load(trace))
    for report in (copies_report(ses, 20), syncs_report(ses, 20)):
        for renderer in RENDERERS.values():
            assert renderer.render(report)
        doc = json.loads(RENDERERS["json"].render(report))
        assert "summary" in doc and "findings" in doc


@pytest.mark.parametrize("command", ["copies", "syncs"])
@pytest.mark.parametrize("trace", SMALL, ids=[p.name for p in SMALL])
def test_cli_on_small_shared_traces(command, trace, tmp_path):
    out = tmp_path / "out.json"
    result = _run(command, str(trace), "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["tool_version"] == __version__ and doc["command"] == command and doc["input"]


def test_copies_json_fields_and_thresholds(SHARED_TRACES):
    result = _run(
        "copies",
        str(SHARED_TRACES / "a100_multistream_syncs.json.gz"),
        "--format",
        "json",
        "--top",
        "3",
        "--small-copy-bytes",
        "1024",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # Every option that changes a number `copies` prints, its own and the shared patterns.
    th = doc["thresholds"]
    assert {k: th[k] for k in ("small_copy_bytes", "many_small_per_step", "copy_min_finding_us")} == {
        "small_copy_bytes": 1024,
        "many_small_per_step": 20,
        "copy_min_finding_us": 100.0,
    }
    assert th["pageable_copy_bytes"] == 1 << 20 and "collective_pattern" in th
    assert len(doc["copies"]) == 3 and COPY_FIELDS <= set(doc["copies"][0])
    first = doc["copies"][0]
    assert (first["bytes"], first["op"], first["range"]) == (704, "aten::to", "## sparse_data_dist ##")
    assert {f["rule"] for f in doc["findings"]} >= {"pageable_copies", "device_to_host_in_step"}
    assert doc["summary"]["copies"] == 1667  # 1,390 memcpys + 277 memsets in the raw JSON


def test_syncs_json_fields_and_thresholds(SHARED_TRACES):
    result = _run(
        "syncs",
        str(SHARED_TRACES / "a100_multistream_syncs.json.gz"),
        "--format",
        "json",
        "--top",
        "0",
        "--min-blocked",
        "1000",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    th = doc["thresholds"]
    assert th["min_blocked_us"] == 1000.0 and th["sync_min_finding_us"] == 100.0 and th["sync_stall_share"] == 0.05
    # the gap classification the bubbles come from is part of what syncs prints
    assert th["launch_latency_us"] == 30.0 and "data_loading_pattern" in th
    assert SYNC_FIELDS <= set(doc["syncs"][0])
    stalls = [s for s in doc["syncs"] if s["kind"] != "gpu_wait"]
    assert stalls and all(s["blocked_us"] >= 1000 for s in stalls)
    by_api = {r["api"]: r["calls"] for r in doc["summary"]["by_api"]}
    assert by_api["cudaStreamSynchronize"] == 75  # counted before --min-blocked filters the list
    assert doc["findings"] and "per step" in doc["findings"][0]["message"]


@pytest.mark.parametrize("fmt", ["table", "csv", "markdown"])
def test_other_formats(fmt, SHARED_TRACES):
    for command in ("copies", "syncs"):
        result = _run(command, str(SHARED_TRACES / "mi250_rocm_minitoy.json.gz"), "--format", fmt)
        assert result.exit_code == 0 and result.output.strip()
    table = _run("syncs", str(SHARED_TRACES / "mi250_rocm_minitoy.json.gz")).output
    assert "hipDeviceSynchronize" in table and "hipMemcpyWithStream" in table
