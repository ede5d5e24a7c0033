"""No false alarm, no false finding: the rules issue 23 added or changed (allocator churn,
device-to-device copy storms, exposed communication on one trace, the materiality floor and the
order of findings), each on a synthetic trace whose answer is known by construction (µs)."""

from __future__ import annotations

import pytest

import traceanalyzer as ta
from tests.synthetic import TraceBuilder
from traceanalyzer.options import Options


def _session(b: TraceBuilder, tmp_path, **values) -> ta.Session:
    return ta.Session(ta.load(b.write(tmp_path)), Options().with_values(values) if values else None)


def _churn(b: TraceBuilder, steps: int, profiler_steps: bool, hip: bool = False) -> TraceBuilder:
    # Each 80 ms iteration: 30 ms in cudaFree then 40 ms in cudaMalloc (the caching allocator
    # off: tensors freed and allocated again every iteration), then 10 ms of GPU work.
    malloc, free = ("hipMalloc", "hipFree") if hip else ("cudaMalloc", "cudaFree")
    for i in range(steps):
        t0 = 80_000 * i
        if profiler_steps:
            b.step(i + 1, t0, 80_000)
        b.runtime(free, t0 + 10, 30_000)
        b.runtime(malloc, t0 + 30_020, 40_000)
        b.kernel("k", ts=t0 + 70_040, dur=9_900, launch_ts=t0 + 70_030)
    return b


@pytest.mark.parametrize("profiler_steps", [True, False])
def test_allocator_churn_is_steady_state_not_startup(tmp_path, profiler_steps):
    # 6 iterations, each with one cudaFree and one cudaMalloc: the pattern recurs, so nothing is
    # set aside as start-up (the job had 98.6 % of its window called start-up).
    ses = _session(_churn(TraceBuilder(), 6, profiler_steps), tmp_path)
    g = ses.gaps
    assert g.startup_window_us == 0 and g.startup_end_us is None
    assert ses.verdict.top_cause == "runtime_call"
    f = {x.rule: x for x in ses.findings}["allocator_churn"]
    ev = f.evidence
    assert ev["calls"] == 12 and ev["by_api"] == {"cudaFree": 6, "cudaMalloc": 6}
    assert ev["call_us"] == 6 * 70_000
    # idle per iteration: from the previous kernel's end (or the trace start) to 70,040 µs
    assert ev["share_of_idle"] > 0.99 and f.severity == "high"
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" in f.recommendation and "expandable_segments" in f.recommendation
    if profiler_steps:
        assert "2 device malloc/free calls per step" in f.message


def test_one_time_allocation_at_start_is_startup_and_no_churn(tmp_path):
    # Step 1 allocates (40 ms in cudaMalloc) once; steps 2-6 launch at once: start-up, no churn.
    b = TraceBuilder()
    for i in range(6):
        t0 = 80_000 * i
        b.step(i + 1, t0, 80_000)
        if i == 0:
            b.runtime("cudaMalloc", t0 + 10, 40_000)
        b.kernel("k", ts=t0 + 40_100, dur=39_000, launch_ts=t0 + 40_020)
    ses = _session(b, tmp_path)
    assert ses.gaps.startup_end_us == pytest.approx(80_000)  # to the next iteration boundary
    assert "allocator_churn" not in {f.rule for f in ses.findings}


def _allreduce_bound(b: TraceBuilder, steps: int = 4) -> TraceBuilder:
    # Each 10 ms step: 3.5 ms of compute, then 6.3 ms of RCCL all-reduce on its own stream with
    # no compute beside it (the DDP trace: 61-64 % of every step). GPU busy 98 %.
    for i in range(steps):
        t0 = 10_000 * i
        b.step(i + 1, t0, 10_000)
        b.kernel("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", ts=t0 + 100, dur=3_500, launch_ts=t0 + 10)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts=t0 + 3_600, dur=6_300, launch_ts=t0 + 20, stream=20)
    return b


def test_exposed_communication_on_one_trace_and_a_communication_bound_headline(tmp_path):
    ses = _session(_allreduce_bound(TraceBuilder()), tmp_path)
    f = {x.rule: x for x in ses.findings}["exposed_communication"]
    assert f.evidence["exposed_us"] == 4 * 6_300 and f.evidence["window_us"] == 40_000
    assert f.evidence["share"] == pytest.approx(0.63) and f.severity == "high"
    assert f.at_stake_us == 25_200 and "6.3 ms per step over 4 steps" in f.message
    # The communication result holds integer ns per step (its µs view is what the JSON prints).
    comm = ses.communication
    assert comm.per_step_ns.select("step", "comm_ns", "exposed_ns").rows() == [
        (i, 6_300_000, 6_300_000) for i in range(1, 5)
    ]
    assert comm.exposed_ns == comm.comm_ns == 25_200_000 and comm.per_step["exposed_us"].to_list() == [6_300.0] * 4
    assert comm.per_step["overlap_share"].to_list() == [0.0] * 4
    v = ses.verdict
    assert v.busy_share == pytest.approx(0.98) and v.communication_bound
    assert "communication-bound: 25.2 ms of the 40.0 ms analysed" in v.sentence("over the profiled steps")


def test_hidden_communication_is_no_finding(tmp_path):
    # The same all-reduce under a compute kernel that runs beside it: nothing exposed.
    b = TraceBuilder()
    for i in range(4):
        t0 = 10_000 * i
        b.step(i + 1, t0, 10_000)
        b.kernel("gemm_bf16", ts=t0 + 100, dur=9_800, launch_ts=t0 + 10)
        b.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts=t0 + 3_600, dur=6_300, launch_ts=t0 + 20, stream=20)
    ses = _session(b, tmp_path)
    assert "exposed_communication" not in {f.rule for f in ses.findings}
    assert not ses.verdict.communication_bound


def _dtod_storm(b: TraceBuilder) -> TraceBuilder:
    # 3 steps of 10 ms: 6 ms of compute and 40 device-to-device copies of 50 µs (2 ms, 25 % of
    # the 8 ms busy per step) from a compiled region's copy-in.
    for i in range(3):
        t0 = 10_000 * i
        b.step(i + 1, t0, 10_000)
        b.op("Torch-Compiled Region: 0/0", t0 + 5, 500)
        for j in range(40):
            b.memcpy(
                "DtoD (Device -> Device)",
                ts=t0 + 100 + 50 * j,
                dur=50,
                nbytes=1 << 20,
                launch_ts=t0 + 10 + j * 10,
                launch_dur=5,
            )
        b.kernel("gemm_bf16", ts=t0 + 2_100, dur=6_000, launch_ts=t0 + 450)
    return b


def test_a_device_to_device_copy_storm_is_a_finding(tmp_path):
    ses = _session(_dtod_storm(TraceBuilder()), tmp_path)
    f = {x.rule: x for x in ses.findings}["dtod_copies"]
    ev = f.evidence
    assert ev["copies"] == 120 and ev["duration_us"] == 6_000 and ev["gpu_busy_us"] == 24_000
    assert (
        ev["share_of_busy"] == pytest.approx(0.25) and f.severity == "high"
    )  # at stake 6 ms: 20 % of the 30 ms window
    assert ev["bytes"] == 120 << 20 and "120 device-to-device copies ran 6.0 ms" in f.message


def test_materiality_floor_severity_from_gpu_time_and_order(tmp_path):
    # A sync site whose calls block the CPU 50 ms per step while the GPU is busy, leaving 0.3 ms
    # of GPU idle per step (0.3 % of the window): below the 1 % floor, so not shown; shown with
    # --min-finding-share 0, and medium (not high) whatever its blocked time.
    b = TraceBuilder()
    for i in range(4):
        t0 = 100_000 * i
        b.step(i + 1, t0, 100_000)
        b.kernel("gemm_bf16", ts=t0 + 100, dur=99_500, launch_ts=t0 + 10)
        b.op("aten::item", t0 + 40_000, 59_620)
        b.runtime("cudaStreamSynchronize", t0 + 40_010, 59_600)  # returns at t0 + 99_610
        b.kernel("small", ts=t0 + 99_900, dur=50, launch_ts=t0 + 99_620)  # GPU idle 99_600 -> 99_900
    quiet = _session(b, tmp_path)
    assert "implicit_sync" not in {f.rule for f in quiet.findings}
    every = _session(b, tmp_path, min_finding_share=0.0)
    f = next(x for x in every.findings if x.rule == "implicit_sync")
    assert f.at_stake_us == pytest.approx(4 * 300) and f.at_stake_share == pytest.approx(1200 / 400_000)
    assert f.severity == "medium"
    sev = ["high", "medium", "info"]
    keys = [(sev.index(x.severity), -(x.at_stake_us or 0)) for x in every.findings]
    assert keys == sorted(keys)


def test_every_share_names_its_window_and_cpu_sums_get_none(tmp_path):
    # Two threads sit in cudaStreamSynchronize for most of the same 10 ms step: 19.2 ms of CPU
    # time blocked, summed over threads, in a 10 ms window (gb10's "blocked_us 105.1 %"). That
    # sum gets no share; the GPU busy share names its window.
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    b = TraceBuilder()
    b.step(1, 0, 10_000)
    b.kernel("gemm_bf16", ts=100, dur=9_800, launch_ts=10)
    b.runtime("cudaStreamSynchronize", 200, 9_600)
    b.runtime("cudaStreamSynchronize", 200, 9_600, tid=200)
    res = CliRunner().invoke(cli, ["summary", str(b.write(tmp_path))], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    blocked = next(line for line in res.output.splitlines() if line.startswith("blocked_us"))
    assert "19,200" in blocked and "%" not in blocked
    head = " ".join(res.output.split("\n\n")[0].split())
    assert "GPU busy 98.0% of 10.0 ms (the profiled steps)" in head


# -- the shared traces ---------------------------------------------------------------------------


def test_gb10_busy_gpu_raises_no_copy_finding(SHARED_TRACES):
    # 98.4 % busy; 170 host-device copies leave 134 µs unhidden: 0.02 % of the 773.9 ms window.
    ses = ta.Session.open(SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz")
    assert "copies_not_overlapped" not in {f.rule for f in ses.findings}
    every = ta.Session(ses.trace, Options().with_values({"min_finding_share": 0.0})).findings
    f = next(f for f in every if f.rule == "copies_not_overlapped")
    assert f.at_stake_us == pytest.approx(134.238, abs=0.01) and f.at_stake_share < 0.001


def test_h100_implicit_sync_on_a_busy_gpu_is_not_high(SHARED_TRACES):
    # box_predictor's 5 syncs hold the CPU 358.6 ms while the GPU is busy and leave it idle
    # 0.94 ms (0.08 % of the 1,211 ms window): not high, and under the floor.
    ses = ta.Session.open(SHARED_TRACES / "h100_owlv2_inference.json.gz")
    assert all(f.severity != "high" for f in ses.findings if f.rule == "implicit_sync")
    every = ta.Session(ses.trace, Options().with_values({"min_finding_share": 0.0})).findings
    box = next(f for f in every if f.rule == "implicit_sync" and "box_predictor" in f.message)
    assert box.severity == "medium" and box.at_stake_us == pytest.approx(942.04, abs=0.01)


def test_v100_ddp_rank_exposed_allreduce(SHARED_TRACES):
    # Raw JSON: 2,020 ncclKernel_AllReduce_RING_LL_Sum_float kernels on device 1 stream 14,
    # 357,343 µs in all, and no compute kernel (stream 7) overlaps any of them: all exposed,
    # 20.6 % of the 1,737.7 ms of steps.
    ses = ta.Session.open(SHARED_TRACES / "v100_memory_events.json.gz")
    f = next(f for f in ses.findings if f.rule == "exposed_communication")
    assert f.evidence["exposed_us"] == f.evidence["comm_us"] == pytest.approx(357_343)
    assert f.evidence["share"] == pytest.approx(357_343 / 1_737_720, rel=1e-6) and f.severity == "high"
