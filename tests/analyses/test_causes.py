"""The cause taxonomy on the exact cases that used to be misread, and on the real traces where a
wrong cause sent the reader after the wrong fix. Each synthetic trace is built so that the
right answer is known by construction (times in µs)."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from tests.synthetic import TraceBuilder
from traceanalyzer.analyses.verdict import BUSY_ENOUGH

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _session(b: TraceBuilder, tmp_path, options=None) -> ta.Session:
    return ta.Session(ta.load(b.write(tmp_path)), options)


def _gap(ses: ta.Session, start_us: float) -> dict:
    """The gap starting `start_us` after the trace start."""
    g = ses.gaps.all_gaps.filter((pl.col("start_us") - start_us).abs() < 0.5)
    assert g.height == 1, ses.gaps.all_gaps.select("start_us", "duration_us", "cause")
    return g.row(0, named=True)


def test_work_queued_long_before_a_short_gap_is_kernel_spacing(tmp_path):
    # Both kernels launched at 0-5 µs; the GPU runs k1 [100, 200] and k2 from 203: a 3 µs gap
    # before work queued ~200 µs earlier is the device's spacing, not launch latency.
    b = TraceBuilder()
    b.kernel("k1", ts=100, dur=100, launch_ts=0)
    b.kernel("k2", ts=203, dur=100, launch_ts=1)
    b.kernel("k3", ts=600, dur=10, launch_ts=2)  # queued, then a 297 µs gap: it waited on something
    ses = _session(b, tmp_path)
    assert _gap(ses, 200)["cause"] == "kernel_spacing"
    assert _gap(ses, 303)["cause"] == "gpu_wait"
    assert ses.gaps.idle_us("launch_latency") == 0


def test_a_kernel_launched_early_in_a_gap_that_then_waits_is_gpu_wait(tmp_path):
    # Gap [100, 605]: the launch call runs 105-110, the kernel starts 495 µs after it returned.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.kernel("k2", ts=605, dur=10, launch_ts=105)
    ses = _session(b, tmp_path)
    assert _gap(ses, 110)["cause"] == "gpu_wait"  # the trace starts at -10


def test_a_slow_launch_call_is_slow_launch_naming_the_api(tmp_path):
    # Gap [100, 6749]: the thread sits in one cudaLaunchKernel for 6,543 µs (200-6743) and the
    # kernel starts 6 µs after it returns (the mi250 case).
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.op("AccumulateGrad", 150, 6600)
    b.kernel("k2", ts=6749, dur=10, launch_ts=200, launch_dur=6543)
    ses = _session(b, tmp_path)
    g = _gap(ses, 110)
    assert g["cause"] == "slow_launch" and g["call_api"] == "cudaLaunchKernel" and g["call_us"] == 6543


def test_separate_data_loading_then_a_sync_is_data_loading(tmp_path):
    # Gap [100, 540]: data loading 100-330 (230 µs), then a separate sync 330-530 (200 µs), then
    # the launch. 230 > 200: data loading (subtracting as if nested called it sync).
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.annotation(LOADER, 100, 230)
    b.runtime("cudaStreamSynchronize", 330, 200)
    b.kernel("k2", ts=540, dur=10, launch_ts=530, launch_dur=5)
    ses = _session(b, tmp_path)
    assert _gap(ses, 110)["cause"] == "data_loading"


def test_cpu_work_after_loading_that_held_a_sync_is_cpu_bound(tmp_path):
    # Gap [100, 560]: data loading 100-300 holding a sync 125-275, then CPU work 300-550
    # (aten::nonzero, 250 µs), then the launch: 250 µs of CPU > 200 µs of loading.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.annotation(LOADER, 100, 200)
    b.runtime("cudaStreamSynchronize", 125, 150)
    b.op("aten::nonzero", 300, 250)
    b.kernel("k2", ts=560, dur=10, launch_ts=550, launch_dur=5)
    ses = _session(b, tmp_path)
    g = _gap(ses, 110)
    assert g["cause"] == "cpu_bound" and g["op"] == "aten::nonzero"


def test_a_runtime_call_is_named(tmp_path):
    # Gap [100, 1320]: the thread sits in cudaStreamCreateWithFlags for 1,000 µs (110-1110),
    # then runs 200 µs of ops, then launches.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.runtime("cudaStreamCreateWithFlags", 110, 1000)
    b.op("aten::add", 1110, 200)
    b.kernel("k2", ts=1320, dur=10, launch_ts=1310, launch_dur=5)
    ses = _session(b, tmp_path)
    g = _gap(ses, 110)
    assert g["cause"] == "runtime_call" and g["call_api"] == "cudaStreamCreateWithFlags" and g["call_us"] == 1000


def test_python_only_preprocessing_is_cpu_bound_naming_the_frame(tmp_path):
    # Gap [100, 20110]: 20 ms in Python frames (video decode) with no op under them, then a
    # launch. Not `untraced`: the trace has stacks and they say where the time went.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.python("app.py(10): <module>", -20, 30000, pid_=1)
    b.python("app.py(42): decode_video", 100, 20000, pid_=2, parent=1)
    b.kernel("k2", ts=20110, dur=10, launch_ts=20100, launch_dur=5)
    ses = _session(b, tmp_path)
    g = _gap(ses, 120)  # the trace starts at -20
    assert g["cause"] == "cpu_bound" and g["op"] is None and g["python_frame"] == "app.py(42): decode_video"
    assert ses.verdict.top_cause == "cpu_bound" and "with_stack" not in ses.verdict.advice


def test_a_call_in_the_loop_is_one_site_per_step(tmp_path):
    # torch.cuda.synchronize() once per step, directly in the loop: one site at 1 per step, each
    # sync leaving a 200 µs bubble (kernel done at +300, next launch at +500).
    b = TraceBuilder()
    for i in range(6):
        t0 = 1000 * i
        b.step(i + 1, t0, 1000)
        b.kernel("k", ts=t0 + 100, dur=200, launch_ts=t0 + 10)
        b.runtime("cudaDeviceSynchronize", t0 + 20, 290)
        b.kernel("k2", ts=t0 + 510, dur=100, launch_ts=t0 + 500)
    ses = _session(b, tmp_path)
    sites = ses.syncs.summary
    assert sites.height == 1 and sites["points_per_step"][0] == 1.0 and sites["op"][0] is None
    found = [f for f in ses.findings if f.rule == "explicit_sync"]
    assert len(found) == 1 and found[0].evidence["sync_points_per_step"] == 1.0


def test_a_sync_on_a_busy_gpu_is_not_a_finding(tmp_path):
    # The CPU waits 900 µs per step on a GPU busy the whole time: the healthy state.
    b = TraceBuilder()
    for i in range(3):
        t0 = 1000 * i
        b.step(i + 1, t0, 1000)
        b.kernel("k", ts=t0, dur=1000, launch_ts=t0 - 5 if i else 0)
        b.runtime("cudaDeviceSynchronize", t0 + 50, 900)
    ses = _session(b, tmp_path)
    assert ses.syncs.blocked_us == 2700 and ses.syncs.sync_idle_us == 0
    assert not {"explicit_sync", "implicit_sync", "sync_stalls"} & {f.rule for f in ses.findings}


def test_hidden_data_loading_is_not_a_problem(tmp_path):
    # Data loading on the main thread 40 % of every step, while the GPU stays busy 99.5 %.
    b = TraceBuilder()
    for i in range(4):
        t0 = 10_000 * i
        b.step(i + 1, t0, 10_000)
        b.annotation(LOADER, t0 + 100, 4000)
        b.kernel("k", ts=t0 + 50, dur=9950, launch_ts=max(t0 - 20, 0))
    ses = _session(b, tmp_path)
    assert ses.gaps.busy_share >= 0.99
    assert "data_loading" not in {f.rule for f in ses.findings}
    assert ses.pipeline_stages.average["data_loading"] > 3000  # the stage view still shows it


def test_startup_calls_then_a_data_loading_steady_state(tmp_path):
    # No ProfilerStep. First iteration: 300 ms in cudaStreamCreateWithFlags, 200 ms in
    # cudaEventCreateWithFlags, 100 ms in one cudaLaunchKernel. Then 10 iterations of 8 ms of
    # DataLoader and 2 ms of GPU work: steady state 20 % busy, idle all data loading.
    b = TraceBuilder()
    b.kernel("warm", ts=0, dur=10, launch_ts=0)
    b.runtime("cudaStreamCreateWithFlags", 20, 300_000)
    b.kernel("k0", ts=300_030, dur=10, launch_ts=300_021)
    b.runtime("cudaEventCreateWithFlags", 300_050, 200_000)
    b.kernel("k1", ts=500_060, dur=10, launch_ts=500_051)
    b.kernel("k2", ts=600_070, dur=10, launch_ts=500_070, launch_dur=100_000)
    t = 600_080
    for _ in range(10):
        b.annotation(LOADER, t, 8000)
        b.kernel("step", ts=t + 8010, dur=2000, launch_ts=t + 8001)
        t += 10_010
    ses = _session(b, tmp_path)
    g = ses.gaps
    assert g.startup_end_us == pytest.approx(600_070)
    assert set(g.all_gaps.filter(pl.col("phase") == "startup")["cause"]) <= {
        "runtime_call",
        "slow_launch",
        "kernel_spacing",
        "launch_latency",
    }
    assert g.idle_by_cause.row(0, named=True)["cause"] == "runtime_call"  # over the whole trace
    v = ses.verdict
    assert v.top_cause == "data_loading" and v.top_share > 0.95 and v.busy_share == pytest.approx(0.2, abs=0.01)
    assert v.startup_window_us == pytest.approx(600_070, abs=1)
    assert "start-up set aside" in v.sentence("over the GPU span")
    rules = {f.rule: f for f in ses.findings}
    assert rules["low_gpu_utilization"].evidence["startup_set_aside_us"] == pytest.approx(600_070, abs=1)
    assert "launch_bound" not in rules


def test_gpu_busy_enough_gets_no_fusion_advice():
    from traceanalyzer.analyses.verdict import advice_for

    assert "fuse" in advice_for("launch_latency", 0.5, False)
    assert "fuse" not in advice_for("launch_latency", BUSY_ENOUGH, False)


# -- the real traces -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(SHARED_TRACES):
    cache: dict[str, ta.Session] = {}

    def get(name: str) -> ta.Session:
        if name not in cache:
            cache[name] = ta.Session.open(SHARED_TRACES / name)
        return cache[name]

    return get


def test_gb10_graph_replays_are_spacing_not_launch_latency(real):
    # 98.4 % busy, 11,540 of 13,530 kernels replayed from CUDA graphs: the ~12k sub-10 µs gaps
    # between kernels already queued are spacing. No fusion or CUDA-graph advice.
    ses = real("gb10_vllm_cudagraphs.pt.trace.json.gz")
    g = ses.gaps
    assert g.idle_us("launch_latency") < 0.10 * g.idle_us()
    assert g.idle_by_cause.filter(pl.col("cause") == "kernel_spacing")["gaps"][0] > 11_000
    sentence = ses.verdict.sentence("over the GPU span")
    assert "fuse" not in sentence and "CUDA graphs" not in sentence and "kernel_spacing" not in sentence
    assert "launch_bound" not in {f.rule for f in ses.findings}
    from traceanalyzer.cli.incident import build_report
    from traceanalyzer.render import markdown

    summary = markdown.render(build_report(ses, width=400, height=300)).split("## Timeline")[0]
    assert "fuse" not in summary and "CUDA graphs" not in summary


def test_a100_no_launch_latency_gap_holds_work_queued_before_it(real):
    ses = real("a100_multistream_syncs.json.gz")
    # Launch latency means the work was enqueued late: its launch call returned after the GPU
    # ran dry (two calls were already in progress as it did; none had returned).
    p = ses.classified.pieces.filter(pl.col("cause") == "launch_latency")
    assert p.height and (p["launch_end_ns"] > p["start_ns"]).all()
    # The gpu_wait headline says what the GPU waited on and who sat blocked meanwhile: the main
    # thread (4515) in cudaMemcpyAsync, aten::to in ## sparse_data_dist ##, ~146 ms per step.
    v = ses.verdict
    assert v.top_cause == "gpu_wait"
    assert "CUDA graph" in v.detail and "thread 4515 sat in cudaMemcpyAsync" in v.detail
    assert "aten::to in ## sparse_data_dist ##" in v.detail
    per_step = float(v.detail.split("), ")[1].split(" ms")[0])
    assert 140 <= per_step <= 150


def test_mi250_slow_hip_launch(real):
    ses = real("mi250_rocm_minitoy.json.gz")
    g = ses.gaps.all_gaps.sort("duration_us", descending=True).row(0, named=True)
    # The 6.6 ms gap: the thread sat 6,543 µs in one hipLaunchKernel (AccumulateGrad), the
    # kernel started 6 µs after it returned.
    assert g["duration_us"] == pytest.approx(6633.5, abs=1) and g["cause"] == "slow_launch"
    assert g["call_api"] == "hipLaunchKernel" and g["call_us"] == pytest.approx(6543.1, abs=0.1)


def test_workers0_still_leads_with_data_loading(real):
    ses = real("v100_resnet50_dataloader_workers0.pt.trace.json.gz")
    assert ses.verdict.top_cause == "data_loading" and ses.verdict.top_share > 0.7
    assert "data_loading" in {f.rule for f in ses.findings}


def test_workers4_pageable_copy_is_not_a_slow_launch(real):
    # Step 5 opens with a 40 ms pageable cudaMemcpyAsync (aten::to of the batch): a blocking
    # copy, reported by the copy rules and as sync, not as a slow launch.
    ses = real("v100_resnet50_dataloader_workers4.pt.trace.json.gz")
    assert ses.gaps.idle_us("slow_launch") < 10_000  # a few 1-2 ms waits in conv ops, not the 40 ms copy
    assert _gap(ses, ses.gaps.all_gaps.sort("duration_us", descending=True)["start_us"][0])["cause"] == "sync"


def test_startup_in_the_first_profiler_step(tmp_path):
    # Four steps of 10 ms. Step 1 spends 6 ms in cudaEventCreateWithFlags before its work;
    # steps 2-4 spend 6 ms in the DataLoader. Start-up: step 1's initialisation only.
    b = TraceBuilder()
    for i in range(4):
        t0 = 10_000 * i
        b.step(i + 1, t0, 10_000)
        if i == 0:
            b.runtime("cudaEventCreateWithFlags", t0 + 10, 6000)
        else:
            b.annotation(LOADER, t0 + 10, 6000)
        b.kernel("k", ts=t0 + 6020, dur=3900, launch_ts=t0 + 6012)
    ses = _session(b, tmp_path)
    g = ses.gaps
    # It runs to the next iteration boundary (step 2 at 10,000 µs): step 1's 6 ms of
    # initialisation and its last 80 µs idle piece [9920, 10000].
    assert g.startup_end_us == pytest.approx(10_000) and g.all_gaps.filter(pl.col("phase") == "startup").height == 2
    assert ses.verdict.top_cause == "data_loading" and ses.verdict.top_share > 0.95


def test_a_compiled_model_is_told_about_cuda_graphs_not_torch_compile(real):
    ses = real("v100_memory_events.json.gz")  # CompiledFunction ranges: torch.compile is on
    f = next(f for f in ses.findings if f.rule == "launch_bound")
    assert "already compiled" in f.recommendation
    assert "torch.compile" not in f.recommendation and 'mode="reduce-overhead"' in f.recommendation
    assert "torch.compile" not in ses.verdict.advice


def _compiled_region(b: TraceBuilder, t0: float, python_us: float) -> None:
    # Dynamo's wrapper around compiled code: `Torch-Compiled Region` (no op a user calls), the
    # Inductor module's Python `call` inside it, then one triton op that launches a 2 µs kernel.
    b.python("model.py(30): forward", t0, python_us + 100, pid_=int(t0) + 1)
    b.op("Torch-Compiled Region: 0/1", t0 + 5, python_us + 80)
    b.python(
        "torch/_inductor/output_code.py(590): __call__", t0 + 10, python_us + 60, pid_=int(t0) + 2, parent=int(t0) + 1
    )
    b.python(
        "/tmp/torchinductor_root/ab/cab.py(132): call", t0 + 20, python_us + 40, pid_=int(t0) + 3, parent=int(t0) + 2
    )
    b.op("triton_poi_fused_add_0", t0 + python_us + 20, 30)
    b.kernel("triton_poi_fused_add_0", ts=t0 + python_us + 60, dur=2, launch_ts=t0 + python_us + 30, launch_dur=15)


def test_python_in_a_compiled_wrapper_is_cpu_bound_even_when_a_launch_ends_the_gap(tmp_path):
    # Gap [100, 15_160]: 15 ms in the compiled wrapper's Python (the 14-17 ms gaps in a
    # compiled `call`), then a 15 µs launch by a 30 µs triton op. Neither the call nor its op
    # took the time: not slow_launch, not launch_latency; cpu_bound in the user's frame.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    _compiled_region(b, 100, 15_000)
    ses = _session(b, tmp_path)
    g = _gap(ses, 110)  # the trace starts at -10
    assert g["duration_us"] == pytest.approx(15_060) and g["cause"] == "cpu_bound" and g["call_api"] is None
    assert g["op"] is None and g["python_frame"] == "model.py(30): forward"


def test_an_op_that_takes_the_time_before_its_launch_is_slow_launch(tmp_path):
    # Gap [100, 2700]: aten::linear > aten::addmm spends 2.45 ms (cuBLASLt heuristics on a first
    # call, as b200's nvjet gemm) before its 30 µs launch: the op took the time.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.op("aten::linear", 150, 2540)
    b.op("aten::addmm", 200, 2480)
    b.kernel("nvjet_gemm", ts=2700, dur=50, launch_ts=2650, launch_dur=30)
    g = _gap(_session(b, tmp_path), 110)
    assert g["cause"] == "slow_launch" and g["op"] == "aten::linear" and g["call_api"] is None


def test_many_launches_in_a_long_gap_are_launch_latency_not_slow_launch(tmp_path):
    # Gap [100, 1700]: 16 eager ops of 95 µs, each issuing a launch; the last launch ends the
    # gap. 1.6 ms of launching, but no single call or op took the 1 ms of --slow-launch.
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    for i in range(16):
        t = 100 + 100 * i
        b.op("aten::add", t, 95)
        b.runtime("cudaLaunchKernel", t + 80, 10)
    b.kernel("k2", ts=1700, dur=10, launch_ts=1685, launch_dur=10)
    g = _gap(_session(b, tmp_path), 110)
    assert g["cause"] == "launch_latency"


def test_b200_largest_launch_gap_is_python_in_compiled_regions(real):
    # The 873 µs gap at 5,277 µs into execute_context_1(...): of it, 584 µs inside
    # `Torch-Compiled Region: 0/1` (dynamo/AOT/Inductor Python) and the rest vLLM Python; the
    # triton op that ends it lasts 74 µs and its cuLaunchKernel 25 µs. cpu_bound in a frame.
    ses = real("b200_eager_rank0.json.gz")
    gaps = ses.gaps.all_gaps
    g = gaps.filter((pl.col("duration_us") - 872.573).abs() < 0.01).row(0, named=True)
    assert g["cause"] == "cpu_bound" and g["op"] is None and g["python_frame"].startswith("vllm/")
    assert gaps.filter(pl.col("cause") == "launch_latency")["duration_us"].max() < 872


@pytest.mark.parametrize("chunk", [1, 2, 1 << 18])
def test_the_runtime_call_named_is_the_longest_in_any_chunk(tmp_path, monkeypatch, chunk):
    # Gap [100, 1320], launch returns at 1315: calls overlapping it 300 µs (110-410), 600 µs
    # (420-1020) and 250 µs (1030-1280); the other calls' columns are gathered `chunk` rows at
    # a time, and the longest of each chunk's longest is the 600 µs call whatever the chunking.
    from traceanalyzer.analyses import gap_overlaps

    monkeypatch.setattr(gap_overlaps, "OTHER_CALLS_CHUNK", chunk)
    monkeypatch.setattr(gap_overlaps, "MEET_BLOCK", chunk)  # the calls searched a block at a time too
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.runtime("cudaGetDevice", 110, 300)
    b.runtime("cudaStreamCreateWithFlags", 420, 600)
    b.runtime("cudaEventCreate", 1030, 250)
    b.kernel("k2", ts=1320, dur=10, launch_ts=1310, launch_dur=5)
    g = _gap(_session(b, tmp_path), 110)
    assert g["cause"] == "runtime_call" and g["call_api"] == "cudaStreamCreateWithFlags" and g["call_us"] == 600


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_each_runtime_call_gap_names_its_own_call_among_calls_outside_every_gap(tmp_path, monkeypatch, block):
    # Gaps [100, 1320] and [1330, 2550] (kernels at 0-100, 1320-1330, 2550-2560, each launched
    # 5-10 µs before it runs; the trace starts at -10); calls 110-1300 (in the first),
    # 1340-2530 (in the second), and calls that meet neither gap: 1321-1329 between them and
    # 3000-3400 after. The calls that meet no gap's span are left out before the pairs are
    # joined (`_meeting`, searched `block` calls at a time): each gap still names its own call.
    from traceanalyzer.analyses import gap_overlaps

    monkeypatch.setattr(gap_overlaps, "MEET_BLOCK", block)
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.runtime("cudaStreamCreateWithFlags", 110, 1190)
    b.runtime("cudaEventQuery", 1321, 8)
    b.kernel("k2", ts=1320, dur=10, launch_ts=1310, launch_dur=5)
    b.runtime("cudaEventCreate", 1340, 1190)
    b.kernel("k3", ts=2550, dur=10, launch_ts=2540, launch_dur=5)
    b.runtime("cudaFree", 3000, 400)
    ses = _session(b, tmp_path)
    first, second = _gap(ses, 110), _gap(ses, 1340)
    assert first["cause"] == second["cause"] == "runtime_call"
    assert (first["call_api"], first["call_us"]) == ("cudaStreamCreateWithFlags", 1190)
    assert (second["call_api"], second["call_us"]) == ("cudaEventCreate", 1190)


@pytest.mark.parametrize("chunk", [1, 1 << 18])
def test_equal_runtime_calls_name_the_first_in_any_chunk(tmp_path, monkeypatch, chunk):
    # Two calls overlapping the gap [100, 1320] 500 µs each (110-610, 620-1120): the tie goes to
    # the lower runtime id, the earlier call, in one pass or chunk by chunk.
    from traceanalyzer.analyses import gap_overlaps

    monkeypatch.setattr(gap_overlaps, "OTHER_CALLS_CHUNK", chunk)
    monkeypatch.setattr(gap_overlaps, "MEET_BLOCK", chunk)  # the calls searched a block at a time too
    b = TraceBuilder()
    b.kernel("k1", ts=0, dur=100, launch_ts=-10)
    b.runtime("cudaEventCreate", 110, 500)
    b.runtime("cudaStreamCreateWithFlags", 620, 500)
    b.kernel("k2", ts=1320, dur=10, launch_ts=1310, launch_dur=5)
    g = _gap(_session(b, tmp_path), 110)
    assert g["cause"] == "runtime_call" and g["call_api"] == "cudaEventCreate" and g["call_us"] == 500
