"""Trace health: one synthetic trace per check, built so the damage is known; the shared traces
raise no error, and every warning they raise is justified from the raw JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import traceanalyzer as ta
from tests.conftest import SHARED_TRACES_DIR
from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli


def _checks(b: TraceBuilder, tmp_path, name: str = "t.json") -> dict:
    ses = ta.Session(ta.load(b.write(tmp_path, name)))
    return {h.check: h for h in ses.health}


def _base(b: TraceBuilder, n: int = 4) -> TraceBuilder:
    for i in range(n):
        b.step(i + 1, 1000 * i, 1000)
        b.kernel("k", ts=1000 * i + 100, dur=500, launch_ts=1000 * i + 10)
    return b


def test_a_healthy_trace_is_quiet(tmp_path):
    assert _checks(_base(TraceBuilder()), tmp_path) == {}


def test_launches_without_gpu_activity(tmp_path):
    # Launch calls recorded, not one kernel: the GPU side is missing (an error, not "idle").
    b = TraceBuilder()
    for i in range(4):
        b.step(i + 1, 1000 * i, 1000)
        b.runtime("cudaLaunchKernel", 1000 * i + 10, 5)
    h = _checks(b, tmp_path)["missing_gpu_events"]
    assert h.severity == "error" and h.evidence["without_gpu_activity"] == 4 and "busy_share" in h.unreliable


def test_clock_skew(tmp_path):
    # A kernel that starts 100 s before its own launch call: the clocks disagree.
    b = _base(TraceBuilder())
    b.kernel("skewed", ts=-100_000_000, dur=5, launch_ts=3500)
    h = _checks(b, tmp_path)["clock_skew"]
    assert h.severity == "error" and h.evidence["before_launch"] == 1 and h.evidence["before_cpu_start"] == 1
    assert h.evidence["max_lead_us"] == 100_003_500


def test_queue_drain_after_the_cpu_stops_is_not_skew(tmp_path):
    # 489 kernels 1.3-4.2 ms after the last CPU event, each launched before it ran (the issue's
    # case): the queue drained after the profiler stopped recording the CPU. An info line only.
    b = _base(TraceBuilder())
    cpu_end = 4000  # _base's last CPU event ends at 4000 µs (the step-4 range)
    for i in range(489):
        b.kernel("drain", ts=cpu_end + 1300 + i * 6, dur=5, launch_ts=3900 + i * 0.1, launch_dur=0.05)
    checks = _checks(b, tmp_path)
    assert "clock_skew" not in checks
    h = checks["queue_drain"]
    assert h.severity == "info" and h.unreliable == () and h.evidence["after_cpu_end"] == 489


def test_first_kernel_9us_after_its_launch_is_not_skew(tmp_path):
    # A serving trace whose first kernel starts 9 µs after its launch: normal.
    b = _base(TraceBuilder())
    b.kernel("first", ts=3509, dur=5, launch_ts=3500)
    assert "clock_skew" not in _checks(b, tmp_path)


def test_kernels_overlapping_on_one_stream(tmp_path):
    b = _base(TraceBuilder())
    b.kernel("pdl", ts=3300, dur=100, launch_ts=3005)  # inside the step-4 kernel [3100, 3600] on stream 7
    h = _checks(b, tmp_path)["stream_overlap"]
    assert h.severity == "warning" and h.evidence == {"overlapping_kernels": 1, "kernels": 5}


def test_gpu_work_linked_to_no_launch(tmp_path):
    # Two of six kernels carry correlation id 0 (AMD traces do): no launch to link to.
    b = _base(TraceBuilder())
    for ts in (200, 1200):
        b.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k0",
                "pid": 0,
                "tid": 9,
                "ts": ts,
                "dur": 10,
                "args": {"device": 0, "stream": 9, "correlation": 0},
            }
        )
    h = _checks(b, tmp_path)["unlinked_gpu_work"]
    assert h.evidence == {"unlinked": 2, "gpu_activities": 6, "correlation_zero": 2}


def test_overflowing_duration(tmp_path):
    # A kernel lasting 10^9 µs in a 4 ms trace (an overflowed ROCm duration): the loader cuts it
    # at the trace's end, and the numbers near that end are approximate.
    b = _base(TraceBuilder())
    b.kernel("forever", ts=3700, dur=1_000_000_000, launch_ts=3690)
    h = _checks(b, tmp_path)["overflowing_durations"]
    assert h.severity == "warning" and "clipped 1 events" in h.message


def test_cpu_events_crossing_on_their_thread(tmp_path):
    # On the main thread: aten::mm 100-400 µs; aten::crossing starts inside it (200) and ends
    # after it (600): one crossing. aten::inner (250-300) nests inside both; aten::after
    # (650-700) overlaps nothing. On thread 2, a runtime call 210-500 starts inside another
    # (200-450) and ends after it: a second crossing, on its own thread (not against aten::mm).
    # On thread 3, aten::c (200-400) crosses aten::a (100-300) though the op just before it,
    # aten::b (120-140), nests: the furthest end so far (300) witnesses it, a third.
    b = _base(TraceBuilder(), 1)
    b.op("aten::mm", 100, 300).op("aten::crossing", 200, 400).op("aten::inner", 250, 50).op("aten::after", 650, 50)
    b.runtime("cudaMalloc", 200, 250, tid=2)
    b.runtime("cudaFree", 210, 290, tid=2)
    b.op("aten::a", 100, 200, tid=3).op("aten::b", 120, 20, tid=3).op("aten::c", 200, 200, tid=3)
    h = _checks(b, tmp_path)["crossing_cpu_events"]
    assert h.severity == "info" and h.unreliable == ()
    assert h.evidence == {"crossing_events": 3, "ops": 2, "python_frames": 0, "runtime_calls": 1}
    assert h.message.startswith("3 CPU events overlap an earlier event on their thread without nesting inside it")
    # Nested and disjoint events cross nothing: the base trace alone is quiet.
    assert "crossing_cpu_events" not in _checks(_base(TraceBuilder(), 1), tmp_path, "quiet.json")


def test_truncated_file(tmp_path):
    path = _base(TraceBuilder()).write(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) - 300])  # cut inside the last events
    ses = ta.Session.open(path)
    h = {x.check: x for x in ses.health}["truncated"]
    assert h.severity == "warning" and "truncated" in h.message


def test_down_sampled_trace(tmp_path):
    # 1,200 CPU ops whose external ids step by 100 (density 1 %), kernels whose correlation ids
    # step by 200, and no event-record or stream-wait call: what was left out explains the "gaps".
    b = TraceBuilder()
    for i in range(1200):
        b.op("aten::add", 10 * i, 5, **{"External id": 100 * i})
    for i in range(40):
        corr = b.runtime("cudaLaunchKernel", 300 * i, 3, correlation=200 * i + 7)
        b.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 300 * i + 50,
                "dur": 20,
                "args": {"device": 0, "stream": 7, "correlation": corr},
            }
        )
    h = _checks(b, tmp_path)["sampled"]
    assert h.severity == "error" and h.evidence["external_id_density"] == pytest.approx(1200 / 119_901)


def test_few_steps_and_warm_up(tmp_path):
    # Four steps, the first 5x the others: a warm-up step; four is under min_steps=5.
    b = TraceBuilder()
    t0 = 0
    for i, d in enumerate((5000, 1000, 1000, 1000)):
        b.step(i + 1, t0, d)
        b.kernel("k", ts=t0 + 100, dur=500, launch_ts=t0 + 10)
        t0 += d
    ses = ta.Session(ta.load(b.write(tmp_path)), ta.StepOptions(min_steps=5))
    checks = {h.check: h for h in ses.health}
    assert checks["few_steps"].severity == "info" and checks["warm_up"].severity == "info"


def test_a_health_error_replaces_the_confident_verdict(tmp_path):
    b = TraceBuilder()
    for i in range(4):
        b.step(i + 1, 1000 * i, 1000)
        b.runtime("cudaLaunchKernel", 1000 * i + 10, 5)
    b.kernel("lonely", ts=100, dur=10, launch_ts=None)
    path = b.write(tmp_path)
    out = CliRunner().invoke(cli, ["summary", str(path), "--format", "json"])
    doc = json.loads(out.stdout)
    assert doc["health"][0]["check"] == "missing_gpu_events" and doc["health"][0]["severity"] == "error"
    text = CliRunner().invoke(cli, ["gaps", str(path), "--wide"]).stdout
    head = " ".join(text.split("\n\n")[0].split())  # the headline, however the terminal wraps it
    assert head.startswith("trace health error (missing_gpu_events)") and "unreliable: busy_share, gap_causes" in head
    md = CliRunner().invoke(cli, ["gaps", str(path), "--format", "markdown"]).stdout
    assert "Trace health" in md.split("GPU time per device")[0]


SHARED_GPU = [
    p
    for p in (sorted(SHARED_TRACES_DIR.rglob("*.json*")) if SHARED_TRACES_DIR.is_dir() else [])
    if not p.name.startswith("edge_")
]


@pytest.mark.parametrize("path", SHARED_GPU, ids=[p.name for p in SHARED_GPU])
def test_shared_traces_raise_no_health_error(path):
    checks = {h.check: h for h in ta.Session.open(path).health}
    assert not [h for h in checks.values() if h.severity == "error"]
    warnings = {c for c, h in checks.items() if h.severity == "warning"}
    # b200 (B200) and gb10 (GB10) launch kernels with programmatic dependent launch: in the raw
    # JSON, 74 of b200's 768 kernels and 3,111 of gb10's 13,530 start before the previous kernel
    # on their stream ends. No other shared trace gets a warning.
    expected = {
        "b200_eager_rank0.json.gz": {"stream_overlap"},
        "gb10_vllm_cudagraphs.pt.trace.json.gz": {"stream_overlap"},
    }
    assert warnings == expected.get(path.name, set())
