"""copies: synthetic traces with known answers, and counts checked against the raw JSON."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.synthetic import write_events, x_event
from traceanalyzer.analyses.copies import analyse_copies
from traceanalyzer.findings import analyse_findings
from traceanalyzer.load import load

PID, TID = 100, 100


_write = write_events
_x = x_event


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_pageable_blocking_htod_copy(tmp_path):
    # aten::to issues a 1,000,000-byte pageable HtoD copy; its cudaMemcpyAsync holds the CPU
    # 500 µs while the copy itself takes 100 µs on the GPU: 1e6 B / 100,000 ns = 10 GB/s.
    events = [
        _x("user_annotation", "ProfilerStep#3", 0, 2000),
        _x("cpu_op", "aten::to", 100, 700),
        _x("cpu_op", "aten::copy_", 110, 650),
        _x("cuda_runtime", "cudaMemcpyAsync", 120, 500, correlation=1),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            400,
            100,
            pid=0,
            tid=7,
            device=0,
            stream=7,
            correlation=1,
            bytes=1_000_000,
        ),
    ]
    r = analyse_copies(load(_write(tmp_path, events)))
    c = r.copies.row(0, named=True)
    assert (c["direction"], c["host_memory"], c["bytes"]) == ("HtoD", "pageable", 1_000_000)
    assert c["duration_us"] == 100 and c["gbps"] == pytest.approx(10.0)
    assert c["blocked_us"] == 500 and c["op"] == "aten::to" and c["step"] == 3 and c["api"] == "cudaMemcpyAsync"
    # no compute at all: the copy is fully exposed
    assert c["overlap_fraction"] == 0 and c["exposed_us"] == 100
    found = analyse_findings(load(_write(tmp_path, events)))
    assert [f.rule for f in found if f.rule in ("pageable_copies", "device_to_host_in_step")] == ["pageable_copies"]
    assert found[[f.rule for f in found].index("pageable_copies")].evidence["blocked_us"] == 500


def test_pinned_copy_hidden_under_compute_on_side_stream(tmp_path):
    # A kernel on stream 7 runs 0..1000 µs; a pinned HtoD copy on side stream 20 runs 100..300:
    # wholly covered. A kernel on the copy's own stream (20) at 400..900 does not count.
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        _x("cuda_runtime", "cudaMemcpyAsync", 10, 5, correlation=2),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=3),
        _x("kernel", "gemm", 0, 1000, pid=0, tid=7, device=0, stream=7, correlation=1),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            100,
            200,
            pid=0,
            tid=20,
            device=0,
            stream=20,
            correlation=2,
            bytes=4_000_000,
        ),
        _x("kernel", "side", 400, 500, pid=0, tid=20, device=0, stream=20, correlation=3),
        _x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pinned)",
            1100,
            100,
            pid=0,
            tid=20,
            device=0,
            stream=20,
            correlation=4,
            bytes=100,
        ),
    ]
    r = analyse_copies(load(_write(tmp_path, events)))
    by = {row["direction"]: row for row in r.copies.iter_rows(named=True)}
    hidden = by["HtoD"]
    assert hidden["host_memory"] == "pinned" and hidden["overlap_fraction"] == 1.0 and hidden["exposed_us"] == 0
    assert hidden["blocked_us"] == 0 and hidden["gbps"] == pytest.approx(4_000_000 / 200_000)
    # after the stream-7 kernel ended nothing hides the DtoH copy (launch not traced: blocked unknown)
    assert by["DtoH"]["overlap_fraction"] == 0 and by["DtoH"]["exposed_us"] == 100 and by["DtoH"]["blocked_us"] is None


@pytest.mark.parametrize("numpy_imported", [True, False])
def test_each_copy_stream_against_the_kernels_of_the_others(tmp_path, numpy_imported, monkeypatch):
    # Kernels on streams 7 [0, 100), 20 [50, 150) and 30 [200, 300) µs of device 0. A copy on
    # stream 20 over [60, 260) is hidden by 7 over [60, 100) and 30 over [200, 260): 100 of 200;
    # one on stream 7 over [80, 220) by 20 over [80, 150) and 30 over [200, 220): 90 of 140; one
    # on stream 30 over [0, 50) by 7 throughout (stream 20 starts at 50): 50 of 50.
    kernels = [(7, 0, 100), (20, 50, 100), (30, 200, 100)]
    copies = [(20, 60, 200), (7, 80, 140), (30, 0, 50)]
    events = [
        _x("kernel", f"k{s}", ts, dur, pid=0, tid=s, device=0, stream=s, correlation=i + 1)
        for i, (s, ts, dur) in enumerate(kernels)
    ] + [
        _x("gpu_memcpy", "Memcpy DtoD (Device -> Device)", ts, dur, pid=0, tid=s, device=0, stream=s,
           correlation=10 + i, bytes=1000)
        for i, (s, ts, dur) in enumerate(copies)
    ]  # fmt: skip
    trace = load(_write(tmp_path, events))
    if not numpy_imported:  # the frame version (`_overlap_by_arrays` declines)
        monkeypatch.delitem(sys.modules, "numpy", raising=False)
    r = analyse_copies(trace)
    got = {
        (row["stream"], row["start_us"]): (row["overlap_fraction"], row["exposed_us"]) for row in r.copies.to_dicts()
    }
    assert got[(20, 60)] == (pytest.approx(0.5), 100)
    assert got[(7, 80)] == (pytest.approx(90 / 140), 50)
    assert got[(30, 0)] == (pytest.approx(1.0), 0)


def test_unknown_host_memory_and_memsets(tmp_path):
    events = [
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Host -> Device)",
            0,
            10,
            pid=0,
            tid=7,
            device=0,
            stream=7,
            correlation=1,
            bytes=10,
        ),
        _x("gpu_memset", "Memset (Device)", 20, 10, pid=0, tid=7, device=0, stream=7, correlation=2, bytes=10),
        _x(
            "gpu_memcpy",
            "Memcpy DtoD (Device -> Device)",
            40,
            10,
            pid=0,
            tid=7,
            device=0,
            stream=7,
            correlation=3,
            bytes=10,
        ),
    ]
    r = analyse_copies(load(_write(tmp_path, events)))
    got = {(row["direction"], row["host_memory"]) for row in r.copies.iter_rows(named=True)}
    assert got == {("HtoD", "unknown"), ("memset", None), ("DtoD", None)}


def test_no_copies(tmp_path):
    r = analyse_copies(load(_write(tmp_path, [_x("cpu_op", "aten::add", 0, 10)])))
    assert r.copies.is_empty() and r.note


@pytest.fixture(scope="module")
def a100(SHARED_TRACES):
    path = SHARED_TRACES / "a100_multistream_syncs.json.gz"
    return path, load(path), _raw(path)


def test_a100_counts_match_raw(a100):
    path, trace, raw = a100
    r = analyse_copies(trace)
    raw_memcpy = sum(1 for e in raw if e.get("cat") == "gpu_memcpy")
    raw_memset = sum(1 for e in raw if e.get("cat") == "gpu_memset")
    assert raw_memcpy == 1390  # the README's count
    assert r.copies.filter(pl.col("kind") == "memcpy").height == raw_memcpy
    assert r.copies.filter(pl.col("kind") == "memset").height == raw_memset


def test_a100_longest_blocking_copy_per_step(a100):
    """In each of steps 551-554 the copy holding the CPU longest is a 704-byte device-to-pageable
    copy from aten::to inside `## sparse_data_dist ##`, its cudaMemcpyAsync lasting ~146 ms.

    Checked in the raw JSON: each `Memcpy DtoH (Device -> Pageable)` event's `args.correlation`
    names the `cudaMemcpyAsync` (cat cuda_runtime) with the same correlation; its `dur` is the
    blocked time, the memcpy's `args.bytes` and `dur` give bytes and GB/s."""
    path, trace, raw = a100
    r = analyse_copies(trace)
    calls = {
        e["args"]["correlation"]: e
        for e in raw
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaMemcpyAsync"
    }
    raw_copies = [
        (calls[e["args"]["correlation"]]["dur"], e["args"]["bytes"], e["dur"], e["ts"])
        for e in raw
        if e.get("cat") == "gpu_memcpy" and e["name"] == "Memcpy DtoH (Device -> Pageable)"
    ]
    steps = {
        int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"])
        for e in raw
        if str(e.get("name", "")).startswith("ProfilerStep#")
    }
    checked = 0
    for step in (551, 552, 553, 554):
        ours = (
            r.copies.filter(pl.col("step") == step)
            .sort("blocked_us", descending=True, nulls_last=True)
            .row(0, named=True)
        )
        assert ours["bytes"] == 704 and ours["direction"] == "DtoH" and ours["host_memory"] == "pageable"
        assert (
            ours["op"] == "aten::to" and ours["range"] == "## sparse_data_dist ##" and ours["api"] == "cudaMemcpyAsync"
        )
        assert 145_000 < ours["blocked_us"] < 148_000
        # the same copy in the raw JSON: the longest-held call among those issued inside the step
        # (the copy itself runs on the GPU after its call starts, inside the step's range)
        lo, hi = steps[step]
        call_dur, nbytes, dur, ts = max(
            c for c in raw_copies if lo <= c[3] < hi + 200_000 and c[0] == pytest.approx(ours["blocked_us"], abs=0.01)
        )
        assert nbytes == 704 and ours["duration_us"] == pytest.approx(dur)
        assert ours["gbps"] == pytest.approx(nbytes / (dur * 1000))
        checked += 1
    assert checked == 4
    # first by blocked time over the whole trace: one of these copies
    top = r.copies.row(0, named=True)
    assert top["bytes"] == 704 and top["blocked_us"] == pytest.approx(max(c[0] for c in raw_copies))


def test_v100_ns_timestamps_memcpy_count(SHARED_TRACES):
    path = SHARED_TRACES / "v100_ns_timestamps.pt.trace.json.gz"
    raw = _raw(path)
    expected = sum(1 for e in raw if e.get("cat") == "gpu_memcpy")
    assert expected == 1600
    r = analyse_copies(load(path))
    memcpy = r.copies.filter(pl.col("kind") == "memcpy")
    assert memcpy.height == 1600
    # bytes agree in total with the raw events
    assert memcpy["bytes"].sum() == sum(e["args"]["bytes"] for e in raw if e.get("cat") == "gpu_memcpy")


def test_mi250_hip_copies(SHARED_TRACES):
    path = SHARED_TRACES / "mi250_rocm_minitoy.json.gz"
    raw = _raw(path)
    hip_calls = [e for e in raw if e.get("name") == "hipMemcpyWithStream"]
    r = analyse_copies(load(path))
    assert r.copies.height == 2 == len(hip_calls)
    assert set(r.copies["api"]) == {"hipMemcpyWithStream"}
    # ROCm names do not say pageable or pinned; hipMemcpyWithStream is synchronous, so it blocks
    assert set(r.copies["host_memory"]) == {"unknown"}
    assert sorted(r.copies["blocked_us"]) == sorted(float(e["dur"]) for e in hip_calls)


def test_blocked_ns_by_row_and_by_join():
    # runtime calls 0..3 last 10, 20, 30, 40 ns; calls 1 and 3 block. Per copy: its call's time
    # when the call blocks, 0 when it returns at once, null without a call (the loader's row ids
    # gathered by row; other ids joined, an unknown call counting 0).
    from types import SimpleNamespace

    from traceanalyzer.analyses.copies import _blocked_ns

    rt = pl.DataFrame({"runtime_id": [0, 1, 2, 3], "dur_ns": [10, 20, 30, 40]})
    ids = pl.Series("runtime_id", [3, None, 0, 1, 2], dtype=pl.Int32)
    blocking = pl.DataFrame({"runtime_id": [1, 3]})
    assert _blocked_ns(SimpleNamespace(runtime=rt), ids, blocking).to_list() == [40, None, 0, 20, 0]
    shifted = SimpleNamespace(runtime=rt.with_columns(pl.col("runtime_id") + 10))
    assert _blocked_ns(shifted, ids + 10, blocking + 10).to_list() == [40, None, 0, 20, 0]
    assert _blocked_ns(SimpleNamespace(runtime=rt), pl.Series("runtime_id", [99, 1]), blocking).to_list() == [0, 20]


@pytest.mark.parametrize("seed", range(5))
def test_overlap_by_row_on_numpy_is_covered(seed):
    """`_covered_by_row` (each copy's search alone, no sort) gives each copy the overlap `covered`
    gives it (random kernels merged per key, copies with ties and zero lengths)."""
    import numpy as np

    from traceanalyzer.analyses.copies import _covered_by_row
    from traceanalyzer.analyses.intervals import coverage_index, covered, merge

    rng = np.random.default_rng(seed)
    keys = ["device", "_cstream"]
    n, m = 30, 40
    kern = pl.DataFrame(
        {"device": rng.integers(0, 2, m), "_cstream": rng.integers(0, 2, m), "ts": rng.integers(0, 300, m)}
    )
    kern = kern.with_columns(te=pl.col("ts") + pl.Series(rng.integers(0, 40, m)))
    index = coverage_index(merge(kern, keys, "ts", "te"), keys, presorted=True)
    q = pl.DataFrame(
        {"device": rng.integers(0, 2, n), "_cstream": rng.integers(0, 3, n), "ts_ns": rng.integers(0, 300, n)}
    )
    q = q.with_columns(end_ns=pl.col("ts_ns") + pl.Series(rng.integers(0, 50, n))).with_row_index("_r")
    fast = _covered_by_row(q, index, keys)
    slow = covered(q, index, keys, "ts_ns", "end_ns", "overlap_ns").select("_r", "overlap_ns").sort("_r")
    assert fast is not None and fast.equals(slow)
    assert fast["overlap_ns"].sum() > 0


@pytest.mark.parametrize("seed", range(4))
def test_overlap_on_arrays_is_the_frame_version(seed, monkeypatch):
    """`_overlap_with_compute` on numpy's arrays (`_overlap_by_arrays`) and by frames: the same
    overlap per copy, in the same row order (random kernels and copies on three streams of two
    devices, ties and zero lengths)."""
    import numpy as np

    from traceanalyzer.analyses.copies import _overlap_by_arrays, _overlap_with_compute

    rng = np.random.default_rng(seed)
    m, n = 60, 25
    ts = rng.integers(0, 400, m)
    kernels = pl.DataFrame(
        {
            "device": rng.integers(0, 2, m),
            "_kstream": rng.integers(7, 10, m),
            "ts_ns": ts,
            "end_ns": ts + rng.integers(0, 40, m),
        }
    )
    cs = rng.integers(0, 400, n)
    copies = pl.DataFrame(
        {"gpu_id": np.arange(n), "device": rng.integers(0, 2, n), "stream": rng.integers(7, 10, n), "ts_ns": cs,
         "end_ns": cs + rng.integers(0, 60, n)}
    )  # fmt: skip
    streams = copies.select("device", _cstream="stream").unique()
    fast = _overlap_by_arrays(copies, kernels, streams)
    assert fast is not None and fast["overlap_ns"].sum() > 0
    monkeypatch.delitem(sys.modules, "numpy")
    assert fast.equals(_overlap_with_compute(copies, kernels))
