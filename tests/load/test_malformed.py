"""One bad event in the middle of a trace (shapes seen in real traces, kineto-notes "Shapes of
trouble") must not cost the events after it, nor be reported as a truncated trace."""

from __future__ import annotations

import json

import pytest

from traceanalyzer.load.loader import load


def _event(i: int, **fields) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} | fields


def _write(tmp_path, bad_event_text: str):
    good = [json.dumps(_event(i)) for i in range(6)]
    text = '{"schemaVersion": 1, "traceEvents": [' + ", ".join(good[:3] + [bad_event_text] + good[3:])
    text += '], "traceName": "after-the-events"}'
    path = tmp_path / "trace.json"
    path.write_bytes(text.encode())
    return path


def _assert_good_events_survive(trace):
    assert {f"op{i}" for i in range(6)} <= set(trace.ops["name"].to_list())
    assert not any("truncated" in w for w in trace.warnings), trace.warnings
    assert trace.meta.raw.get("traceName") == "after-the-events"


@pytest.mark.parametrize(
    "bad",
    [
        json.dumps(_event(99, args={"l": [{"a": 1}, {"b": "}, {"}]})),  # objects inside an event
        json.dumps(_event(99, name=5, tid="stream 3")),  # loose types the normaliser casts
        json.dumps(_event(99, args={"External id": "12", "Sequence number": 2**70})),
        json.dumps(_event(1)),  # a duplicated event
    ],
    ids=["nested-objects", "loose-types", "loose-args", "duplicate"],
)
def test_loose_but_valid_event_keeps_the_rest(tmp_path, bad):
    _assert_good_events_survive(load(_write(tmp_path, bad)))


@pytest.mark.parametrize(
    "bad",
    [
        '{"ph": "X", "cat": "cpu_op", "name": "op99", "pid": 1, "tid": 1, "ts": N/A, "dur": 5}',
        '{"ph": "X", "cat": "cpu_op", "name": "op\x0199", "pid": 1, "tid": 1, "ts": 990, "dur": 5}',
        json.dumps(_event(99, args="not an object")),
        json.dumps(_event(99, args=[1, 2])),
    ],
    ids=["bare-N/A", "control-char", "args-string", "args-list"],
)
def test_bad_event_keeps_the_rest(tmp_path, bad):
    _assert_good_events_survive(load(_write(tmp_path, bad)))


# -- the generated cases: tests/data/malformed/ (scripts/make_malformed.py) --------------------

import os  # noqa: E402
from pathlib import Path  # noqa: E402

from traceanalyzer.cli import main  # noqa: E402
from traceanalyzer.errors import TraceAnalyzerError  # noqa: E402

MALFORMED = Path(__file__).resolve().parents[1] / "data" / "malformed"
MANIFEST = json.loads((MALFORMED / "manifest.json").read_text())


def _case_path(name: str, entry: dict, tmp_path, monkeypatch) -> Path:
    make = entry.get("make")
    if make == "directory":
        d = tmp_path / "no_traces_here"
        d.mkdir()
        (d / "notes.txt").write_text("not a trace")
        return d
    if make == "unreadable":
        p = tmp_path / "secret.json"
        p.write_bytes((MALFORMED / "one_step.json").read_bytes())
        p.chmod(0)
        if os.geteuid() == 0:  # root reads anything: make open() refuse as it would for a user
            import builtins

            from traceanalyzer.load import source

            real_open = builtins.open

            def refusing_open(file, *a, **k):
                if str(file) == str(p):
                    raise PermissionError(13, "Permission denied", str(p))
                return real_open(file, *a, **k)

            monkeypatch.setattr(source, "open", refusing_open, raising=False)
        return p
    return MALFORMED / entry["file"]


def test_every_case_has_its_file():
    listed = {e["file"] for e in MANIFEST.values() if "file" in e}
    on_disk = {p.name for p in MALFORMED.iterdir()} - {"manifest.json"}
    assert listed == on_disk
    assert len(MANIFEST) >= 30


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_malformed_case(name, tmp_path, monkeypatch, capsys):
    entry = MANIFEST[name]
    path = _case_path(name, entry, tmp_path, monkeypatch)
    before = path.read_bytes() if path.is_file() and entry.get("make") != "unreadable" else None
    code = main([*entry.get("args", []), "gaps", str(path), "--format", "table"])
    out, err = capsys.readouterr()
    assert code == entry["exit_code"], (out, err)
    assert "Traceback" not in err
    if entry["warning"]:
        assert entry["warning"] in err, err
    if entry.get("stdout"):
        assert entry["stdout"] in out, out
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("traceanalyzer: error: ") and str(path) in lines[0], err
    else:
        assert out.strip(), "exit 0 must come with a result or an explanation"
    if before is not None:
        assert path.read_bytes() == before  # inputs are never written
    if entry["events"] is not None and not entry.get("args"):
        trace = load(path)
        # every complete entry of traceEvents was read (counted before duplicates are dropped)
        assert sum(trace.event_counts.values()) == entry["events"]
        for table, rows in entry.get("tables", {}).items():
            assert getattr(trace, table).height == rows
    elif code == 2 and not entry.get("args"):
        with pytest.raises(TraceAnalyzerError):
            load(path)


def test_truncation_warning_says_how_much_and_where(capsys):
    entry = MANIFEST["truncated_mid_string"]
    path = MALFORMED / entry["file"]
    assert main(["gaps", str(path)]) == 0
    err = capsys.readouterr().err
    size = path.stat().st_size
    # 7 complete events (by construction), read from the whole file; the 8th starts at the
    # last "{" of the file (Kineto layout: one event over several lines).
    start = path.read_bytes().rindex(b"{")
    assert f"analysed the {entry['events']:,} complete events read from {size:,} bytes" in err
    assert f"at byte {start:,}" in err
    assert f"({size - start:,} bytes after the last complete event were skipped)" in err


def test_crossing_events_are_a_health_note_not_a_load_warning(capsys):
    # By construction (make_malformed): aten::mm runs 10-310 µs into step 0; aten::crossing
    # starts at 200, inside it, and ends at 600, after it: one crossing, on the ops' table.
    path = MALFORMED / MANIFEST["overlap_without_nesting"]["file"]
    assert main(["gaps", str(path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    (h,) = [h for h in json.loads(out)["health"] if h["check"] == "crossing_cpu_events"]
    assert h["severity"] == "info" and h["evidence"]["crossing_events"] == 1 and h["evidence"]["ops"] == 1
    assert h["message"].startswith("1 CPU event overlaps an earlier event on their thread without nesting")
    assert "without nesting" not in err and not load(path).warnings


def test_dur_past_end_is_clipped_to_the_trace_end():
    trace = load(MALFORMED / MANIFEST["dur_past_end"]["file"])
    # By construction (make_malformed.base_events): the other events end at most with the
    # second ProfilerStep, ORIGIN + 1000 + 900 us = 1900 us after ORIGIN (the first step
    # starts at ORIGIN). Clipped, step 0's kernel gemm_0 ends where the trace ends.
    k = trace.gpu.filter(trace.gpu["name"] == "gemm_0").sort("ts_ns").row(0, named=True)
    assert k["end_ns"] - trace.meta.origin_ns == 1_900_000
    assert trace.meta.end_ns - trace.meta.origin_ns == 1_900_000


def test_duplicates_are_dropped_with_a_count():
    trace = load(MALFORMED / MANIFEST["duplicated_events"]["file"])
    assert "dropped 4 exact duplicate events" in trace.warnings


def test_decompression_limit_is_a_clear_error():
    from traceanalyzer.errors import DecompressionLimitError

    with pytest.raises(DecompressionLimitError, match="more than 1,024 bytes"):
        load(MALFORMED / MANIFEST["over_decompression_limit"]["file"], max_decompressed=1024)


def test_control_characters_keep_their_content():
    trace = load(MALFORMED / MANIFEST["control_characters"]["file"])
    assert set(trace.gpu["name"]) >= {"gemm\x01_0\x00", "gemm\n_1\t"}
    # three raw bytes (\x01, newline, tab); the \\u0000 was a proper escape already
    assert any("escaped 3 unescaped control characters" in w for w in trace.warnings), trace.warnings


def test_damaged_events_cost_only_themselves_with_tiny_chunks(tmp_path):
    """The same damage, read in chunks far smaller than the trace."""
    from traceanalyzer.load.loader import read_tables
    from traceanalyzer.load.source import ByteSource

    text = '{"traceEvents": [' + ", ".join(json.dumps(_event(i)) for i in range(200)) + "]}"
    for i in (13, 77, 150):
        text = text.replace(f'"name": "op{i}"', f'"name": "op{i}", @@', 1)
    text = text.replace('"name": "op100"', '"name": "op\x01100"', 1)
    path = tmp_path / "t.json"
    path.write_text(text)
    for chunk in (200, 1000, 1 << 20):
        with ByteSource(path) as src:
            tables, _meta, counts, warnings = read_tables(src, chunk_bytes=chunk)
        assert tables["op"].height == 197, chunk
        assert any("3 damaged regions" in w for w in warnings), (chunk, warnings)
