"""Steps whatever the trace (ProfilerStep, repeating ranges, a model's top module, optimizer
cycles, explicit specs), warm-up left out of averages, prefill/decode kinds, and modules."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from tests.synthetic import TraceBuilder


def _serving(b: TraceBuilder, n: int = 6, name: str = "execute_context_0(0)_generation_{i}({i})") -> TraceBuilder:
    # n decode iterations of 1 ms, each a record_function range enclosing its launches.
    for i in range(n):
        t0 = 1000 * i
        b.annotation(name.format(i=i + 1), t0, 900)
        b.kernel("attn", ts=t0 + 50, dur=400, launch_ts=t0 + 10)
        b.kernel("mlp", ts=t0 + 460, dur=400, launch_ts=t0 + 20)
    return b


def test_repeating_ranges_are_the_steps_without_profiler_step(tmp_path):
    ses = ta.Session(ta.load(_serving(TraceBuilder()).write(tmp_path)))
    st = ses.steps
    assert ses.step_source == "auto: repeating range 'execute_context_#(#)_generation_#(#)'"
    assert st.count == 6 and st.table["kind"].to_list() == ["decode"] * 6
    assert st.by_kind.row(0, named=True)["steps"] == 6
    # Every analysis counts per step over these: one syncs/copies row per step, windows per step.
    assert ses.gaps.steps.height == 6 and ses.stages.table.height == 6


def test_prefill_and_decode_from_vllm_names(tmp_path):
    b = TraceBuilder()
    for i, name in enumerate(["execute_context_4(4)_generation_0(0)", "execute_context_0(0)_generation_4(4)"] * 2):
        t0 = 1000 * i
        b.annotation(name, t0, 900)
        b.kernel("k", ts=t0 + 50, dur=800, launch_ts=t0 + 10)
    st = ta.Session(ta.load(b.write(tmp_path))).steps
    assert st.table["kind"].to_list() == ["prefill", "decode", "prefill", "decode"]
    assert st.by_kind["kind"].to_list() == ["decode", "prefill"]


def test_explicit_range_and_python_specs(tmp_path):
    b = _serving(TraceBuilder())
    for i in range(6):
        b.python("engine.py(80): execute_model", 1000 * i, 950, pid_=i + 1)
    t = ta.load(b.write(tmp_path))
    ses = ta.Session(t, ta.Options().with_values({"steps": "python:execute_model"}))
    assert ses.step_source == "python:execute_model" and ses.steps.count == 6
    ses = ta.Session(t, ta.Options().with_values({"steps": "range:generation_[135]\\("}))
    assert ses.steps.count == 3
    ses = ta.Session(t, ta.Options().with_values({"steps": "none"}))
    assert ses.steps.count == 1 and ses.steps.table["step"].to_list() == [None]


def test_a_models_top_module_repeats_but_its_layers_do_not_count(tmp_path):
    # Training without prof.step(): the top module's forward once per iteration (4 times), its
    # 12 layers inside each. The layers repeat more often and enclose as many launches; they
    # are parts of one pass, not iterations.
    b = TraceBuilder()
    fid = 0
    for i in range(4):
        t0 = 10_000 * i
        fid += 1
        top = fid
        b.python("nn.Module: GPT_0", t0, 9000, pid_=top)
        for j in range(12):
            fid += 1
            b.python("model.py(22): forward", t0 + 100 + 700 * j, 600, pid_=fid, parent=top)
            b.kernel("k", ts=t0 + 150 + 700 * j, dur=500, launch_ts=t0 + 120 + 700 * j)
    ses = ta.Session(ta.load(b.write(tmp_path)))
    assert ses.step_source == "auto: repeating Python frame 'nn.Module: GPT_0'" and ses.steps.count == 4


def test_optimizer_cycles_without_enclosing_ranges(tmp_path):
    # Forward/backward launches outside any range, then an Optimizer.step range, 4 times: the
    # steps run from one optimizer step's end to the next's.
    b = TraceBuilder()
    for i in range(4):
        t0 = 1000 * i
        b.kernel("fwd", ts=t0 + 20, dur=500, launch_ts=t0 + 5)
        b.annotation("Optimizer.step#SGD.step", t0 + 700, 200)
        b.kernel("sgd", ts=t0 + 720, dur=100, launch_ts=t0 + 710)
    ses = ta.Session(ta.load(b.write(tmp_path)))
    assert ses.step_source == "auto: cycles between optimizer steps" and ses.steps.count == 4
    cpu = ses.trace.steps.sort("step")
    assert cpu["cpu_end_ns"].to_list()[1] - cpu["cpu_start_ns"].to_list()[1] == 1_000_000  # 900 -> 1900 µs


def _training_loop(b: TraceBuilder, iterations: int, zero_grad: str | None) -> TraceBuilder:
    # Each 27 ms iteration: zero_grad at its start (kernels when set_to_none=False, none when
    # True, absent when None), forward/backward, then Optimizer.step at its end (the issue's
    # loop, where a boundary at each annotation gave steps alternating 5 and 22 ms).
    for i in range(iterations):
        t0 = 27_000 * i
        if zero_grad is not None:
            b.annotation("Optimizer.zero_grad#AdamW.zero_grad", t0, 300)
            if zero_grad == "set_to_none=False":
                b.kernel("zero_", ts=t0 + 50, dur=100, launch_ts=t0 + 10)
        b.kernel("fwd_bwd", ts=t0 + 500, dur=20_000, launch_ts=t0 + 400)
        b.annotation("Optimizer.step#AdamW.step", t0 + 22_000, 4_000)
        b.kernel("adam", ts=t0 + 22_100, dur=3_000, launch_ts=t0 + 22_050)
    return b


@pytest.mark.parametrize("zero_grad", ["set_to_none=False", "set_to_none=True", None])
def test_one_optimizer_cycle_per_iteration(tmp_path, zero_grad):
    # 40 iterations holding zero_grad and step (or step only): 40 steps, not 80, each 27 ms
    # from one step's end (27_000 i + 26_000 µs) to the next's.
    ses = ta.Session(ta.load(_training_loop(TraceBuilder(), 40, zero_grad).write(tmp_path)))
    assert ses.step_source == "auto: cycles between optimizer steps" and ses.steps.count == 40
    cpu = ses.trace.steps.sort("step")
    lengths = (cpu["cpu_end_ns"] - cpu["cpu_start_ns"]).to_list()
    assert set(lengths[1:]) == {27_000_000}


def test_zero_grad_alone_marks_the_cycle(tmp_path):
    b = TraceBuilder()
    for i in range(5):
        t0 = 10_000 * i
        b.annotation("Optimizer.zero_grad#SGD.zero_grad", t0, 100)
        b.kernel("fwd_bwd", ts=t0 + 500, dur=8_000, launch_ts=t0 + 400)
    ses = ta.Session(ta.load(b.write(tmp_path)))
    assert ses.step_source == "auto: cycles between optimizer steps" and ses.steps.count == 5


def test_warm_up_steps_are_listed_and_left_out_of_averages(tmp_path):
    b = TraceBuilder()
    durations = [9000, 5000, 1000, 1000, 1100, 1000]
    t0 = 0
    for i, d in enumerate(durations):
        b.step(i + 1, t0, d)
        b.kernel("k", ts=t0 + 10, dur=d - 20, launch_ts=t0 + 1)
        t0 += d
    t = ta.load(b.write(tmp_path))
    st = ta.Session(t).steps
    assert st.table["warmup"].to_list() == [True, True, False, False, False, False]
    assert st.mean_us == pytest.approx(1025.0) and st.median_us == pytest.approx(1000.0)
    cav = {c.kind: c for c in st.caveats}["warm_up"]
    assert cav.evidence["steps"] == [1, 2]
    incl = ta.Session(t, ta.Options().with_values({"warmup_steps": "include"})).steps
    assert incl.mean_us == pytest.approx(sum(durations) / 6)


def test_gb10_ten_steps_from_execute_ranges(SHARED_TRACES):
    # gb10 has no ProfilerStep; its 10 decode iterations are `execute_context_0(0)_generation_N(N)`
    # user_annotation ranges (raw JSON), each with its gpu_user_annotation twin.
    ses = ta.Session.open(SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz")
    assert ses.step_source.startswith("auto: repeating range 'execute_context_")
    assert ses.steps.count == 10 and set(ses.steps.table["kind"]) == {"decode"}


def test_h100_ops_group_by_module_and_a_module_stage_mapping(SHARED_TRACES, tmp_path):
    ses = ta.Session.open(SHARED_TRACES / "h100_owlv2_inference.json.gz", ta.OpsOptions(group_by="module"))
    mods = ses.ops.table_ns.filter(pl.col("module") != "(no module)")
    # 2,345 `nn.Module:` python_function events (with_modules): ops inside them get a module.
    assert mods.height > 100 and mods["module"].str.contains("Owlv2").any()
    toml = tmp_path / "stages.toml"
    toml.write_text('[stages]\npreprocess = "preprocess|tokeniz"\nmodel = "nn\\\\.Module: .*Model|forward"\n')
    from traceanalyzer.analyses.stages import read_mapping

    opts = ta.Options().with_values({"stage_mapping": tuple(read_mapping(str(toml)))})
    st = ta.Session(ses.trace, opts).stages
    assert st.average["model"] > 0.3 * st.average_step_us
