"""diff: per-step comparison of two traces with a noise-aware verdict."""

from __future__ import annotations

import json

import polars as pl
import pytest

from traceanalyzer import load
from traceanalyzer.jobs.diff import TraceProfile, analyse_diff, compare, spread
from traceanalyzer.options import DiffOptions


@pytest.fixture(scope="module")
def resnet(SHARED_TRACES):
    w0 = load(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")
    w4 = load(SHARED_TRACES / "v100_resnet50_dataloader_workers4.pt.trace.json.gz")
    return w0, w4


def metric(r, name, col):
    return r.summary.filter(pl.col("metric") == name)[col][0]


def test_more_workers_remove_data_loading(resnet):
    w0, w4 = resnet
    r = analyse_diff(w0, w4)
    assert r.stages_source == "stages"
    before = metric(r, "stage_data_loading_us_per_step", "before")
    after = metric(r, "stage_data_loading_us_per_step", "after")
    assert before - after > 50_000 and after < 2_000
    assert r.verdict == "faster" and r.change_pct < 0
    # TensorBoard plugin (README): step avg 177,592 / 141,068 µs, Kernel 98,589 / 99,145 µs
    # per step, same step definition; kernels run on one stream so the sum is the union.
    assert sum(r.before.step_times_us) / 6 == pytest.approx(177_592, abs=1)
    assert sum(r.after.step_times_us) / 6 == pytest.approx(141_068, abs=1)
    assert metric(r, "kernel_us_per_step", "before") == pytest.approx(98_589, abs=1)
    assert metric(r, "kernel_us_per_step", "after") == pytest.approx(99_145, abs=1)
    # The DataLoader iterator changed class: its range vanished and another appeared.
    ops = r.ops.filter(pl.col("name").str.contains("DataLoader"))
    assert set(ops.filter(pl.col("count_per_step_after") == 0)["name"]) == {
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    }
    assert any("data_loading" in f for f in r.findings_resolved)


def test_reverse_is_slower(resnet):
    w0, w4 = resnet
    r = analyse_diff(w4, w0)
    assert r.verdict == "slower" and r.change_pct > 10


def _profile(times_us):
    empty_k = pl.DataFrame(schema={"name": pl.String, "count": pl.UInt32, "duration_ns": pl.Int64})
    empty_o = pl.DataFrame(schema={"name": pl.String, "count": pl.UInt32, "self_ns": pl.Int64})
    times_ns = tuple(round(t * 1000) for t in times_us)  # step times are integer ns
    return TraceProfile("p", len(times_ns), "steps", times_ns, {}, empty_o, empty_k, ())


def test_noise_rules():
    # Spread = MAD × 1.4826: steps 100, 104, 96, 102, 98 -> median 100, |dev| 0,4,4,2,2 -> MAD 2.
    noisy = [100.0, 104.0, 96.0, 102.0, 98.0]
    assert spread(tuple(noisy)) == pytest.approx(2 * 1.4826)
    # +2.5 µs (2.5 %) is below the spread of 2.97 µs: within noise.
    assert compare(_profile(noisy), _profile([t + 2.5 for t in noisy])).verdict == "within noise"
    # +4 µs exceeds both the spread and 2 % of the median: slower.
    assert compare(_profile(noisy), _profile([t + 4 for t in noisy])).verdict == "slower"
    # No spread at all: the min-change floor (2 % by default) decides.
    flat = [100.0] * 4
    assert compare(_profile(flat), _profile([101.0] * 4)).verdict == "within noise"
    assert compare(_profile(flat), _profile([97.0] * 4)).verdict == "faster"
    assert compare(_profile(flat), _profile([101.0] * 4), DiffOptions(min_change_pct=0.5)).verdict == "slower"
    assert compare(_profile([]), _profile(flat)).verdict == "not comparable"


def test_kernels_matched_by_name(tmp_path):
    def trace(kernels, name):
        ev = [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "ProfilerStep#1",
                "pid": 1,
                "tid": 1,
                "ts": 0,
                "dur": 100,
                "args": {},
            }
        ]
        for i, (k, ts, dur) in enumerate(kernels):
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": ts - 2,
                    "dur": 1,
                    "args": {"correlation": i + 1},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": k,
                    "pid": 0,
                    "tid": 7,
                    "ts": ts,
                    "dur": dur,
                    "args": {"device": 0, "stream": 7, "correlation": i + 1},
                }
            )
        p = tmp_path / name
        p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
        return load(p)

    r = analyse_diff(
        trace([("gemm", 10, 20), ("old", 40, 5)], "a.json"), trace([("gemm", 10, 30), ("new", 50, 5)], "b.json")
    )
    k = {row["name"]: row for row in r.kernels.iter_rows(named=True)}
    assert k["gemm"]["delta_us"] == 10
    assert r.kernels_appeared["name"].to_list() == ["new"]
    assert r.kernels_vanished["name"].to_list() == ["old"]
    assert r.verdict == "within noise"  # same 100 µs step
    # Behind the µs-per-step views: integer ns totals over the one step.
    assert r.before.step_times_ns == (100_000,) and r.median_before_ns == 100_000
    totals = dict(zip(r.after.kernels_ns["name"], r.after.kernels_ns["duration_ns"], strict=True))
    assert totals == {"gemm": 30_000, "new": 5_000} and r.after.kernels_ns.schema["duration_ns"] == pl.Int64
