"""`roofline` from the command line: the JSON other tools read, the picture, the flags, the
finding, the sections in `summary` and the report, bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from traceanalyzer.cli import cli, main

OP_FIELDS = {
    "op",
    "input_dims",
    "dtype",
    "calls",
    "flops_per_call",
    "bytes_per_call",
    "gpu_us",
    "achieved_tflops",
    "achieved_gbps",
    "intensity",
    "bound",
    "peak_share",
}


@pytest.fixture(scope="module")
def h100(SHARED_TRACES):
    return str(SHARED_TRACES / "h100_owlv2_inference.json.gz")


def _json(*args: str) -> dict:
    result = CliRunner().invoke(cli, [*args, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_roofline_json(h100):
    doc = _json("roofline", h100, "--top", "0")
    assert doc["command"] == "roofline"
    assert doc["thresholds"]["far_from_roofline_share"] == 0.3 and doc["thresholds"]["peak_tflops"] == 0.0
    assert doc["device"][0]["part"] == "H100 SXM5" and doc["device"][0]["bf16"] == 989.4
    assert "H100" in doc["device"][0]["source"]
    ops = doc["ops"]
    assert ops and OP_FIELDS <= set(ops[0])
    # input_dims as the ops table writes it (compact JSON text)
    conv = [o for o in ops if o["op"] == "aten::conv2d"]
    assert conv[0]["input_dims"] == "[[1,3,1008,1008],[1024,3,14,14],[],[],[],[],[]]"
    assert conv[0]["flops_per_call"] == 2 * 1024 * 72 * 72 * 3 * 14 * 14 and conv[0]["calls"] == 5
    # the most GPU time below the roof first
    head = [o["gpu_us"] * (1 - o["peak_share"]) for o in ops if o["peak_share"] is not None]
    assert head == sorted(head, reverse=True)
    assert doc["modelled_gpu_us"] == pytest.approx(sum(o["gpu_us"] for o in ops))
    assert {u["reason"] for u in doc["unmodelled"]} >= {"no work model for this op"}


def test_flags_replace_the_peaks(h100):
    doc = _json("roofline", h100, "--peak-tflops", "100", "--peak-gbps", "1000", "--top", "3")
    d = doc["device"][0]
    assert d["bf16"] == 100.0 and d["fp32"] == 100.0 and d["memory_gbps"] == 1000.0
    assert d["source"].startswith("--peak-tflops 100, --peak-gbps 1000")


def test_far_from_roofline_finding_and_its_threshold(h100):
    doc = _json("roofline", h100)
    found = [f for f in doc["findings"] if f["rule"] == "far_from_roofline"]
    assert found and all(f["evidence"]["peak_share"] < 0.3 for f in found)
    assert all(f["evidence"]["gpu_share"] >= 0.05 for f in found)
    # the softmax over [16, 5185, 5185] (memory-bound): advice to fuse
    softmax = [f for f in found if f["evidence"]["op"] == "aten::softmax"]
    assert softmax and "fuse" in softmax[0]["recommendation"]
    none = _json("roofline", h100, "--roofline-share", "0.01")
    assert not [f for f in none["findings"] if f["rule"] == "far_from_roofline"]


def test_plot_and_report_sections(h100, tmp_path):
    png = tmp_path / "r.png"
    assert main(["roofline", h100, "--plot", str(png), "-o", str(tmp_path / "r.json")]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    s = _json("summary", h100)
    assert s["roofline"]["device"][0]["part"] == "H100 SXM5" and s["roofline"]["ops"]
    assert main(["report", h100, "-o", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Roofline" in md and "roofline.png" in md and (tmp_path / "rep" / "roofline.png").exists()


def test_bad_input_is_one_line_exit_2(tmp_path):
    assert main(["roofline", str(tmp_path / "missing.json")]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["roofline", str(bad)]) == 2


def test_a_trace_without_shapes_says_so(SHARED_TRACES):
    doc = _json("roofline", str(SHARED_TRACES / "v100_memory_events.json.gz"))
    assert doc["ops"] == [] and "record_shapes" in doc["note"]
