"""`annotate`: original events unchanged (as loaded by our loader and as JSON values), the
added tracks present, metadata secrets redacted."""

from __future__ import annotations

import gzip
import json

from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli

TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
TABLES = ("ops", "python", "runtime", "gpu", "sync_markers", "gpu_annotations", "memory", "flows", "steps")


def _annotate(src, dst, *extra):
    r = CliRunner().invoke(cli, ["annotate", str(src), "-o", str(dst), *extra])
    assert r.exit_code == 0, r.output
    return r


def _read(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _check_roundtrip(src, dst):
    before, after = ta.load(src), ta.load(dst)
    for name in TABLES:
        assert_frame_equal(getattr(before, name), getattr(after, name))
    assert before.meta.origin_ns == after.meta.origin_ns
    orig, ann = _read(src), _read(dst)
    n = len(orig["traceEvents"])
    # Every original event, in order, as the same JSON value; then only ours.
    assert ann["traceEvents"][:n] == orig["traceEvents"]
    added = ann["traceEvents"][n:]
    assert added and all(e.get("cat") == "traceanalyzer" or e.get("ph") == "M" for e in added)
    # Counts per (cat, ph): unchanged except the added X events and their track names.
    xs = sum(1 for e in added if e.get("ph") == "X")
    ms = sum(1 for e in added if e.get("ph") == "M")
    diff = {
        k: after.event_counts.get(k, 0) - before.event_counts.get(k, 0)
        for k in set(before.event_counts) | set(after.event_counts)
    }
    diff = {k: v for k, v in diff.items() if v}
    assert diff == {("traceanalyzer", "X"): xs, (None, "M"): ms}
    return before, after, added


def _gap_trace(tmp_path):
    b = TraceBuilder()
    b.metadata["metadata"] = {"system": {"env": {"HF_TOKEN": TOKEN, "PATH": "/usr/bin"}}, "note": f"token {TOKEN}"}
    b.step(1, 0, 10000)
    b.kernel("a", 100, 1900, launch_ts=50)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 2100, 3700)
    b.runtime("cudaStreamSynchronize", 5850, 30)
    b.kernel("b", 6000, 3000, launch_ts=5890)
    b.memcpy("DtoH (Device -> Pageable)", 9100, 400, 1 << 20, launch_ts=9000, launch_dur=600, api="cudaMemcpyAsync")
    return b.write(tmp_path)


def test_synthetic_roundtrip_tracks_and_redaction(tmp_path):
    src = _gap_trace(tmp_path)
    dst = tmp_path / "out.json.gz"
    _annotate(src, dst, "--min-gap", "1000")
    before, after, added = _check_roundtrip(src, dst)
    raw = gzip.open(dst).read().decode()
    assert TOKEN not in raw
    doc = json.loads(raw)
    assert doc["metadata"]["system"]["env"] == {"HF_TOKEN": "[REDACTED]", "PATH": "[REDACTED]"}
    # The added process and its tracks, as our loader sees them.
    names = after.thread_names.join(before.thread_names, on=["pid", "tid"], how="anti")
    assert set(names["thread_name"]) >= {"GPU 0 idle gaps"}
    gaps = [e for e in added if e.get("ph") == "X" and e["name"].startswith("idle:")]
    # The one gap >= 1 ms: 2.0-6.0 ms (end of kernel a to start of kernel b), data loading.
    assert len(gaps) == 1
    assert gaps[0]["name"] == "idle: data_loading" and gaps[0]["ts"] == 2000 and gaps[0]["dur"] == 4000
    procs = [e for e in added if e.get("name") == "process_name"]
    assert procs[0]["args"]["name"] == "traceanalyzer"
    assert procs[0]["pid"] not in set(before.ops["pid"]) | set(before.gpu["pid"])


def test_plain_json_output_and_nanosecond_timestamps(tmp_path):
    b = TraceBuilder()
    b.step(1, 1712166700123.456, 10000)
    b.kernel("a", 1712166700200.001, 100, launch_ts=1712166700150.5)
    b.kernel("b", 1712166708000.999, 100, launch_ts=1712166707900.25)
    src = b.write(tmp_path)
    dst = tmp_path / "out.json"
    _annotate(src, dst)
    _check_roundtrip(src, dst)
    # The original number texts survive byte for byte.
    assert "1712166700123.456" in dst.read_text() and "1712166708000.999" in dst.read_text()
    # Gap from the end of a (…200.001 + 100) to the start of b, to the nanosecond.
    gap = [e for e in json.loads(dst.read_text())["traceEvents"] if str(e.get("name")).startswith("idle:")][0]
    assert round((gap["ts"] - 1712166700300.001) * 1000) == 0
    assert round(gap["dur"] * 1000) == round((1712166708000.999 - 1712166700300.001) * 1000)


def test_real_trace_roundtrip(SHARED_TRACES, tmp_path):
    src = SHARED_TRACES / "mi250_rocm_minitoy.json.gz"
    dst = tmp_path / "mi250.json.gz"
    _annotate(src, dst, "--min-gap", "10")
    _, after, added = _check_roundtrip(src, dst)
    assert any(e.get("ph") == "X" and e["name"].startswith("idle:") for e in added)


def test_truncated_trace_is_refused_with_a_message(tmp_path):
    src = _gap_trace(tmp_path)
    cut = tmp_path / "cut.json"
    cut.write_text(src.read_text()[:-200])
    r = CliRunner().invoke(cli, ["annotate", str(cut), "-o", str(tmp_path / "x.json")])
    assert r.exit_code != 0
    assert not (tmp_path / "x.json").exists()
