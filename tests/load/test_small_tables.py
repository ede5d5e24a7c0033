"""A small table is checked by Series calls, a large one by frame queries (`build.SMALL_ROWS`,
`sanitize.SMALL_ROWS`, `trace.SMALL_TABLE_ROWS`): both paths must build the same Trace. Each
trace is loaded twice, once with the thresholds at zero (every table "large")."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from traceanalyzer.load.loader import load

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
TABLES = ("ops", "python", "runtime", "gpu", "sync_markers", "gpu_annotations", "memory", "flows", "steps")

build = importlib.import_module("traceanalyzer.load.build")
sanitize = importlib.import_module("traceanalyzer.load.sanitize")
trace_mod = importlib.import_module("traceanalyzer.trace")


def _both(path: str, monkeypatch: pytest.MonkeyPatch):
    small = load(path)
    with monkeypatch.context() as m:
        m.setattr(build, "SMALL_ROWS", 0)
        m.setattr(sanitize, "SMALL_ROWS", 0)
        m.setattr(trace_mod, "SMALL_TABLE_ROWS", -1)
        large = load(path)
    return small, large


def _assert_same(small, large) -> None:
    for name in TABLES:
        a, b = getattr(small, name), getattr(large, name)
        assert a.schema == b.schema, name
        assert a.equals(b, null_equal=True), name
    assert small.warnings == large.warnings


@pytest.mark.parametrize(
    "name",
    ["a100_simple_add_syncs.json.gz", "mi250_rocm_minitoy.json.gz", "edge_large_integer.pt.trace.json.gz"],
)
def test_real_traces_same_either_way(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    _assert_same(*_both(str(path), monkeypatch))


def test_damaged_events_same_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    events = [
        {**op, "name": "a", "ts": 0, "dur": 10},
        {**op, "name": "a", "ts": 0, "dur": 10},  # an exact duplicate
        {**op, "name": "neg", "ts": 2, "dur": -3},  # negative dur: given zero
        {**op, "name": "nodur", "ts": 5},  # no dur: zero
        {**op, "name": "wild", "ts": 5 * 10**15, "dur": 1},  # 5e18 ns >= 2^62: not a time
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 2,
         "args": {"correlation": 7, "device": 0, "stream": 7}},
    ]  # fmt: skip
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps({"traceEvents": events}))
    small, large = _both(str(path), monkeypatch)
    _assert_same(small, large)
    # by hand: 5 op rows decoded, the duplicate dropped, the wild ts dropped -> a, neg, nodur
    assert sorted(small.ops["name"].to_list()) == ["a", "neg", "nodur"]
    assert small.ops.filter(name="neg")["end_ns"].item() == 2_000  # ts 2 us, dur clamped to 0
    assert small.gpu["launch_ts_ns"].item() == 1_000
    text = " | ".join(small.warnings)
    assert "1 events have a ts too large" in text
    assert "1 CPU op events without a readable ts were ignored" in text
    assert "dropped 1 exact duplicate events" in text
    assert "1 events without dur were given zero duration" in text
    assert "1 CPU op events with a negative dur were given zero duration" in text
