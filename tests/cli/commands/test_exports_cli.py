"""Exports are complete, named and honest about their format: JSON and CSV hold every row the
analysis has unless --top is given; -o NAME.csv writes one CSV per table; -o chooses the
picture format from its extension; a table to a picture extension (or the reverse) is exit 2
with one line."""

from __future__ import annotations

import csv
import gzip
import json

import pytest

from traceanalyzer.cli import main
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.session import Session

W0 = "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
A100 = "a100_multistream_syncs.json.gz"


@pytest.fixture(scope="module")
def w0(SHARED_TRACES):
    return str(SHARED_TRACES / W0)


@pytest.fixture(scope="module")
def w0_session(w0):
    return Session(load(w0), Options())


def _rows(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_syncs_json_lists_every_sync(SHARED_TRACES, tmp_path):
    path = SHARED_TRACES / A100
    # By hand from the raw JSON: every cudaStreamSynchronize call (the README counts 75).
    raw = json.load(gzip.open(path))["traceEvents"]
    stream_syncs = sum(1 for e in raw if e.get("name") == "cudaStreamSynchronize" and e.get("ph") == "X")
    out = tmp_path / "s.json"
    assert main(["syncs", str(path), "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    ses = Session(load(str(path)), Options())
    assert len(doc["syncs"]) == ses.syncs.syncs.height > 20
    assert sum(1 for s in doc["syncs"] if s["api"] == "cudaStreamSynchronize") == stream_syncs == 75


def test_gaps_csv_one_file_per_table_with_every_row(w0, w0_session, tmp_path):
    out = tmp_path / "gaps.csv"
    assert main(["gaps", w0, "-o", str(out)]) == 0
    g = w0_session.gaps
    assert len(_rows(out)) == g.gaps.height > 20
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "gaps.top_culprits_cause_op_python_frame.csv" in files
    assert len(_rows(tmp_path / "gaps.top_culprits_cause_op_python_frame.csv")) == g.culprits.height
    assert len(files) == 5  # devices, causes, culprits, gaps, per step


def test_explicit_top_limits_exports(w0, tmp_path, capsys):
    assert main(["gaps", w0, "--format", "json", "--top", "5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["gaps"]) == 5 and len(doc["summary"]["culprits"]) == 5


def test_summary_csv_holds_the_findings_in_full(w0, w0_session, tmp_path):
    out = tmp_path / "s.csv"
    assert main(["summary", w0, "-o", str(out)]) in (0, 1)
    rows = _rows(out)
    assert set(rows[0]) == {"rule", "severity", "message", "recommendation"}
    assert len(rows) == len(w0_session.findings)


def test_table_to_a_picture_extension_is_exit_2(w0, tmp_path, capsys):
    for ext in ("png", "svg", "pdf"):
        assert main(["gaps", w0, "-o", str(tmp_path / f"out.{ext}")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "picture" in err
    assert not list(tmp_path.iterdir())
    assert main(["gaps", w0, "--format", "json", "-o", str(tmp_path / "x.csv")]) == 2


def test_timeline_writes_the_format_of_its_extension(w0, tmp_path, capsys):
    for ext, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF")):
        out = tmp_path / f"t.{ext}"
        assert main(["timeline", w0, "-o", str(out)]) == 0
        assert out.read_bytes().startswith(magic)
    assert b"<svg" in (tmp_path / "t.svg").read_bytes()[:2000]
    assert main(["timeline", w0, "-o", str(tmp_path / "t.txt")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("traceanalyzer: error:")
    assert not (tmp_path / "t.txt").exists()


def test_wide_and_columns(w0, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["gaps", w0, "--top", "3"]) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80 and "--wide shows every column" in narrow
    assert main(["gaps", w0, "--top", "3", "--wide"]) == 0
    wide = capsys.readouterr().out
    assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in wide and "blocked_thread" in wide


def test_kernels_grid_and_block_in_csv_json_and_table(SHARED_TRACES, capsys):
    # By hand from the raw JSON of h100_owlv2: all 120 launches of the cutlass
    # s1688gemm_bf16_256x128_tn_align1 kernel run on grid [328, 3, 16], block [256, 1, 1].
    path = str(SHARED_TRACES / "h100_owlv2_inference.json.gz")
    name = "cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1"
    assert main(["kernels", path, "--format", "csv"]) == 0
    rows = [r for r in csv.DictReader(capsys.readouterr().out.splitlines()) if name in r["kernel"]]
    assert [(r["calls"], r["grid"], r["block"]) for r in rows] == [("120", "[328,3,16]", "[256,1,1]")]
    assert main(["kernels", path, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = [r for v in doc.values() if isinstance(v, list) for r in v if name in str(r.get("kernel", ""))]
    assert [(r["grid"], r["block"]) for r in rows] == [([328, 3, 16], [256, 1, 1])]
    assert main(["kernels", path]) == 0
    assert "328x3x16" in capsys.readouterr().out
