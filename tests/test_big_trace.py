"""scripts/make_big_trace.py (small sizes only) and the parallel chunk decoder.

The 1 GB benchmark lives in scripts/bench.py, never in the test suite."""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from traceanalyzer import load
from traceanalyzer.load import parallel
from traceanalyzer.load.loader import read_tables
from traceanalyzer.load.source import ByteSource

ROOT = Path(__file__).resolve().parents[1]


def _make_big():
    spec = importlib.util.spec_from_file_location("make_big_trace", ROOT / "scripts" / "make_big_trace.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_big_trace"] = mod  # msgspec resolves the Struct's annotations through it
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def source(SHARED_TRACES: Path) -> Path:
    return SHARED_TRACES / "mi250_rocm_minitoy.json.gz"  # 2 ProfilerSteps, float ns timestamps


@pytest.fixture(scope="module")
def big(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("big") / "big.json"
    with open(out, "wb") as fh:
        stats = _make_big().write_big_trace(source, fh, copies=3)
    assert stats["copies"] == 3
    return out


def test_copies_repeat_every_timed_event_with_new_ids(source, big):
    src = json.load(gzip.open(source))["traceEvents"]
    out = json.load(open(big))["traceEvents"]
    timed = [e for e in src if e.get("ph") != "M" and "ts" in e and e.get("cat") != "Trace"]
    meta = [e for e in src if e.get("ph") == "M" or "ts" not in e]
    assert len(out) == 3 * len(timed) + len(meta) + sum(e.get("cat") == "Trace" for e in src)
    corr = Counter(
        e["args"]["correlation"] for e in out if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation")
    )
    assert corr and max(corr.values()) == 1  # renumbered: no id repeats across copies
    # ProfilerStep#N appears on the CPU and as a gpu_user_annotation: count distinct numbers
    steps = {e["name"] for e in out if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(steps) == 3 * len({e["name"] for e in src if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_copies_follow_each_other_and_keep_nanosecond_digits(source, big):
    t_src, t_big = load(source), load(big)
    assert t_big.gpu.height == 3 * t_src.gpu.height
    assert t_big.steps.height == 3 * t_src.steps.height
    span = t_src.meta.end_ns - t_src.meta.origin_ns
    period_ns = t_big.steps["cpu_start_ns"][t_src.steps.height] - t_src.steps["cpu_start_ns"][0]
    assert period_ns >= span and period_ns % 1000 == 0  # the whole-µs span of all timed events
    # ns digits survive: copy 1's kernels are copy 0's shifted by exactly the period
    k0 = t_big.gpu["ts_ns"][: t_src.gpu.height].to_list()
    k1 = t_big.gpu["ts_ns"][t_src.gpu.height : 2 * t_src.gpu.height].to_list()
    assert [b - a for a, b in zip(k0, k1)] == [period_ns] * len(k0)
    assert k0 == t_src.gpu["ts_ns"].to_list()


def _tables(path, monkeypatch, workers: str):
    monkeypatch.setenv("TRACEANALYZER_WORKERS", workers)
    with ByteSource(path) as s:
        return read_tables(s)


@pytest.mark.parametrize("gz", [False, True])
def test_parallel_decoding_equals_serial(big, tmp_path, monkeypatch, gz, capfd):
    path = big
    if gz:
        path = tmp_path / "big.json.gz"
        path.write_bytes(gzip.compress(big.read_bytes()))
    monkeypatch.setenv("TRACEANALYZER_NATIVE", "0")  # worker processes are the pure path's
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "PARALLEL_CHUNK_BYTES", 64 << 10)  # many chunks
    with ByteSource(path) as s:
        assert parallel.should_use(s) is True or parallel.cpu_count() == 1
        par = parallel.read_tables(s)
    # the workers share this stderr: runpy's "found in sys.modules" warning came from `-m`
    assert "RuntimeWarning" not in capfd.readouterr().err
    ser = _tables(path, monkeypatch, "1")
    assert par[1] == ser[1] and par[2] == ser[2] and par[3] == ser[3]
    for kind in ser[0]:
        assert par[0][kind].equals(ser[0][kind]), kind


def test_parallel_falls_back_to_serial_on_a_truncated_trace(big, tmp_path, monkeypatch):
    cut = tmp_path / "cut.json"
    data = big.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.7)])
    monkeypatch.setenv("TRACEANALYZER_NATIVE", "0")  # worker processes are the pure path's
    monkeypatch.setattr(parallel, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(parallel, "PARALLEL_CHUNK_BYTES", 64 << 10)
    with ByteSource(cut) as s:
        par = parallel.read_tables(s)
    ser = _tables(cut, monkeypatch, "1")
    assert par[3] == ser[3] and ser[3] and "truncated" in ser[3][0]
    for kind in ser[0]:
        assert par[0][kind].equals(ser[0][kind]), kind


def test_file_objects_and_small_files_stay_serial(big):
    with ByteSource(io.BytesIO(big.read_bytes())) as s:
        assert not parallel.should_use(s)
    with ByteSource(big) as s:
        assert not parallel.should_use(s)  # far below MIN_PARALLEL_BYTES
