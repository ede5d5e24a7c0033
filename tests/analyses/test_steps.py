"""Steps: durations, busy shares, outliers and capture caveats, by hand on synthetic traces and
against the published ResNet-50 step averages."""

from __future__ import annotations

import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.steps import analyse_steps, step_caveats
from traceanalyzer.options import StepOptions


def test_durations_busy_outliers_and_warmup(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 300)
    b.step(2, 300, 100)
    b.step(3, 400, 100)
    b.step(4, 500, 100)
    b.kernel("k", ts=310, dur=50, launch_ts=305)  # step 2: 50 of 100 µs busy
    b.memcpy("HtoD (Pinned -> Device)", ts=420, dur=20, nbytes=64, launch_ts=405)  # step 3: a copy, no kernel
    b.kernel("late", ts=590, dur=30, launch_ts=550)  # launched in step 4, ends after it: step 4 runs to 620
    r = analyse_steps(load(b.write(tmp_path)))
    t = r.table
    assert t["step"].to_list() == [1, 2, 3, 4]
    assert t["duration_us"].to_list() == [300, 100, 100, 120]
    assert t["busy_share"].to_list() == [0.0, 0.5, 0.2, 30 / 120]
    assert t["kernel_share"].to_list() == [0.0, 0.5, 0.0, 30 / 120]
    # Median of (300, 100, 100, 120) is 110: only step 1 exceeds 1.5 × 110. It is also a warm-up
    # step (300 > 1.5 × median(100, 100, 120)), left out of the averages: median 100.
    assert t["outlier"].to_list() == [True, False, False, False] and t["warmup"].to_list() == [
        True,
        False,
        False,
        False,
    ]
    assert r.median_us == 100
    kinds = [c.kind for c in r.caveats]
    assert kinds == ["warm_up"]  # 300 > 1.5 × median(100, 100, 120)
    assert r.caveats[0].evidence == {"steps": [1], "duration_us": [300.0], "median_others_us": 100.0}
    assert step_caveats(load(b.write(tmp_path))) == r.caveats  # the same, without GPU busy time


def test_too_few_steps_no_steps_and_loading_outside(tmp_path):
    b = TraceBuilder()
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 40)
    b.step(1, 50, 100)
    b.step(2, 150, 100)
    r = analyse_steps(load(b.write(tmp_path)), StepOptions(min_steps=3))
    kinds = {c.kind: c for c in r.caveats}
    # These synthetic traces hold CPU ops only, which is itself a caveat.
    assert set(kinds) == {"no_gpu_activity", "too_few_steps", "data_loading_outside_steps"}
    assert kinds["data_loading_outside_steps"].evidence == {"ranges": 1, "duration_us": 40.0}
    assert step_caveats(load(b.write(tmp_path)), StepOptions(min_steps=3)) == r.caveats

    empty = TraceBuilder()
    empty.op("aten::mm", 0, 10)
    r = analyse_steps(load(empty.write(tmp_path, "nosteps.json")))
    # Without ProfilerStep the trace counts as one step (step null) over its span, 10 µs here.
    assert r.count == 1 and r.table["step"].to_list() == [None] and r.table["duration_us"].to_list() == [10.0]
    assert r.window_kind == "trace_span" and [c.kind for c in r.caveats] == ["no_gpu_activity", "no_steps"]


def test_resnet_step_average_and_kernel_utilisation(SHARED_TRACES):
    # ../shared/traces/README.md: step average 177,592 µs; GPU utilisation (kernels only, over
    # the GPU-extended steps) 55.51 %.
    r = analyse_steps(load(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"))
    assert r.count == 6 and r.mean_us == pytest.approx(177_592, abs=1)
    t = r.table
    kernel_us = (t["kernel_share"] * t["duration_us"]).sum()
    assert kernel_us / t["duration_us"].sum() == pytest.approx(0.5551, abs=5e-5)
    assert not t["outlier"].any() and r.caveats == ()


def test_health_reads_the_caveats_without_gpu_busy_per_step(SHARED_TRACES, monkeypatch):
    """`gaps` prints health (few_steps, warm_up come from the steps' caveats) but no step's GPU busy
    time: the Session reads the caveats from the durations alone, the same as `steps.caveats`."""
    import importlib

    from traceanalyzer.session import Session

    steps_module = importlib.import_module("traceanalyzer.analyses.steps")
    for name in ("v100_resnet50_dataloader_workers0.pt.trace.json.gz", "a100_multistream_syncs.json.gz"):
        trace = load(SHARED_TRACES / name)
        full = Session(trace)
        expected = full.steps.caveats
        assert full.step_caveats is expected  # computed: its own
        busy = steps_module._busy_per_step

        def forbidden(*args):
            raise AssertionError("GPU busy per step computed")

        with monkeypatch.context() as m:
            m.setattr(steps_module, "_busy_per_step", forbidden)
            light = Session(trace)
            checks = light.health
            assert light.step_caveats == expected and "steps" not in light.__dict__
        assert steps_module._busy_per_step is busy
        assert [h.check for h in checks] == [h.check for h in full.health]
