"""Stages: the TensorBoard plugin's published step breakdown reproduced on the two ResNet-50
traces, and the pipeline / mapping views checked by hand on synthetic traces."""

from __future__ import annotations

import polars as pl
import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.stages import PIPELINE_STAGES, TENSORBOARD_STAGES, analyse_stages, read_mapping
from traceanalyzer.errors import UsageError

# ../shared/traces/README.md, "TensorBoard profiler plugin, ResNet-50 step breakdown", µs per
# step averaged over the 6 steps. Definition (reproduced by `--view tensorboard`): each moment
# of a GPU-extended step goes to the first of Kernel > Memcpy > Memset > Runtime > DataLoader
# (ops named enumerate(DataLoader)#…__next__) > CPU Exec (every other CPU op or annotation but
# the ProfilerStep ranges); Other is the rest.
PUBLISHED = {
    "v100_resnet50_dataloader_workers0.pt.trace.json.gz": (
        177_592,
        {
            "Kernel": 98_589,
            "Memcpy": 1_915,
            "Memset": 89,
            "Runtime": 2_908,
            "DataLoader": 59_262,
            "CPU Exec": 13_674,
            "Other": 1_156,
        },
    ),
    "v100_resnet50_dataloader_workers4.pt.trace.json.gz": (
        141_068,
        {
            "Kernel": 99_145,
            "Memcpy": 3_160,
            "Memset": 98,
            "Runtime": 10_564,
            "DataLoader": 1_186,
            "CPU Exec": 22_665,
            "Other": 4_251,
        },
    ),
}


@pytest.fixture(params=["numpy", "no numpy"])
def numpy_or_not(request, monkeypatch):
    """Each test twice: with numpy imported (the breakdown on its arrays, as `summary` runs it)
    and without (the Series calls, as `stages` alone runs it)."""
    import sys

    if request.param == "numpy":
        import numpy  # noqa: F401 - the numpy steps run where it is imported
    else:
        monkeypatch.delitem(sys.modules, "numpy", raising=False)
    return request.param


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_tensorboard_view_reproduces_the_plugin(SHARED_TRACES, name, numpy_or_not):
    step_us, published = PUBLISHED[name]
    r = analyse_stages(load(SHARED_TRACES / name), view="tensorboard")
    assert r.stages == TENSORBOARD_STAGES and r.table.height == 6
    assert r.average_step_us == pytest.approx(step_us, abs=1)
    for category, us in published.items():
        # Required: within 2 % of the step time; the definition is the plugin's, so in fact
        # every category matches to the microsecond after rounding.
        assert abs(r.average[category] - us) <= 0.02 * step_us, category
        assert round(r.average[category]) == us, category
    # Every moment of every step is given to exactly one category.
    for row in r.table.iter_rows(named=True):
        assert sum(row[c] for c in TENSORBOARD_STAGES) == pytest.approx(row["duration_us"])
    # ...exactly, in the integer ns the result holds.
    for row in r.table_ns.iter_rows(named=True):
        assert sum(row[c] for c in TENSORBOARD_STAGES) == row["duration_ns"]


def _pipeline_trace() -> TraceBuilder:
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 200)
    b.memcpy("HtoD (Pinned -> Device)", ts=210, dur=40, nbytes=1 << 20, launch_ts=202)  # call [202, 207] in no op
    b.op("aten::conv2d", 260, 40)
    b.kernel("fwd", ts=300, dur=100, launch_ts=265)
    b.op("autograd::engine::evaluate_function: ConvolutionBackward0", 400, 20, tid=200)
    b.kernel("bwd", ts=420, dur=100, launch_ts=405, tid=200)
    b.annotation("Optimizer.step#SGD.step", 520, 40)
    b.op("aten::add_", 525, 15)
    b.kernel("opt", ts=560, dur=40, launch_ts=530)
    b.op("aten::item", 600, 100)
    b.memcpy("DtoH (Device -> Pinned)", ts=650, dur=10, nbytes=4, launch_ts=601, launch_dur=3)
    b.runtime("cudaStreamSynchronize", 605, 90)
    b.annotation("## log ##", 700, 50)
    return b


def test_pipeline_stages_by_hand(tmp_path, numpy_or_not):
    r = analyse_stages(load(_pipeline_trace().write(tmp_path)))
    assert r.stages == PIPELINE_STAGES
    row = r.table.row(0, named=True)
    expected = {
        "data_loading": 200,  # the DataLoader range [0, 200]
        "h2d": 40,  # the copy [210, 250]
        "forward": 150,  # CPU conv2d [260, 300] + its kernel [300, 400] + aten::item outside the sync [600, 605] + [695, 700]
        "backward": 120,  # CPU [400, 420] + kernel [420, 520]
        "optimizer": 80,  # CPU range [520, 560] + kernel [560, 600]
        "d2h": 10,  # the copy [650, 660], inside the sync
        "sync_wait": 80,  # cudaStreamSynchronize [605, 695] less the copy
        "other_cpu": 55,  # the copy's runtime call outside any op [202, 207] + "## log ##" [700, 750]
        "gpu_idle": 265,  # [200, 202] + [207, 210] + [250, 260] + [750, 1000]
    }
    assert row["duration_us"] == 1000
    assert {s: row[s] for s in PIPELINE_STAGES} == expected
    # The result holds the same times as integer ns (the µs above are its display view); they
    # tile the step exactly, and the long form says the same per (step, stage).
    ns = r.table_ns.row(0, named=True)
    assert ns["duration_ns"] == 1_000_000 and {s: ns[s] for s in PIPELINE_STAGES} == {
        s: us * 1000 for s, us in expected.items()
    }
    assert r.table_ns.schema["forward"] == pl.Int64 and sum(ns[s] for s in PIPELINE_STAGES) == ns["duration_ns"]
    assert dict(r.times_ns.select("stage", "time_ns").iter_rows()) == {s: us * 1000 for s, us in expected.items()}
    assert r.total_ns["gpu_idle"] == 265_000 and r.step_total_ns == 1_000_000 and r.average_step_us == 1000


def test_mapping_file(tmp_path, numpy_or_not):
    b = TraceBuilder()
    b.step(1, 0, 600)
    b.annotation("preprocess", 0, 100)
    b.op("aten::resize_", 10, 10)
    b.kernel("resize", ts=100, dur=50, launch_ts=12)
    b.annotation("model", 150, 50)
    b.op("aten::mm", 155, 5)
    b.kernel("gemm", ts=200, dur=200, launch_ts=156, launch_dur=2)
    b.annotation("postprocess", 400, 50)
    b.op("aten::item", 405, 40)
    b.runtime("cudaStreamSynchronize", 410, 30)
    b.kernel("stray", ts=470, dur=30, launch_ts=460)  # launched outside every op
    toml = tmp_path / "stages.toml"
    toml.write_text('[stages]\npreprocess = "preprocess"\nmodel = "model"\npostprocess = "postprocess"\n')
    mapping = read_mapping(str(toml))
    assert mapping == [("preprocess", "preprocess"), ("model", "model"), ("postprocess", "postprocess")]
    r = analyse_stages(load(b.write(tmp_path)), mapping=mapping)
    assert r.view == "mapping"
    row = r.table.row(0, named=True)
    assert {s: row[s] for s in r.stages} == {
        "preprocess": 150,  # CPU [0, 100] + kernel [100, 150]
        "model": 250,  # CPU [150, 200] + kernel [200, 400]
        "sync_wait": 30,  # [410, 440]
        "postprocess": 20,  # CPU [400, 450] less the sync
        "other_gpu": 30,  # the stray kernel [470, 500]
        "other_cpu": 5,  # its launch call [460, 465]
        "gpu_idle": 115,  # [450, 460] + [465, 470] + [500, 600]
    }


def test_bad_mapping_files(tmp_path):
    bad = tmp_path / "bad.toml"
    for text in ('[stages]\nx = "("\n', "stages = 3\n", '[stages]\nother_cpu = "a"\n', "not toml ["):
        bad.write_text(text)
        with pytest.raises(UsageError):
            read_mapping(str(bad))
    with pytest.raises(UsageError):
        read_mapping(str(tmp_path / "missing.toml"))


def test_without_steps_one_window_over_the_gpu_span(tmp_path):
    # Without ProfilerStep the trace is one step spanning its GPU work (analyses.windows): the
    # kernel's [10, 100] µs; the CPU op at [0, 10] lies before it.
    b = TraceBuilder()
    b.op("aten::mm", 0, 10)
    b.kernel("gemm", ts=10, dur=90, launch_ts=2)
    r = analyse_stages(load(b.write(tmp_path)))
    assert r.window_kind == "gpu_span" and r.table["step"].to_list() == [None]
    row = r.table.row(0, named=True)
    assert row["duration_us"] == 90 and row["forward"] == 90


def test_without_steps_or_gpu_work_one_window_over_the_trace(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 10)
    b.op("aten::add", 20, 10)
    r = analyse_stages(load(b.write(tmp_path)))
    assert r.window_kind == "trace_span" and r.table["duration_us"].to_list() == [30]
    assert r.average["forward"] == 20 and r.average["gpu_idle"] == 10


@pytest.mark.parametrize(
    ("name", "by_levels"),
    [
        ("h100_owlv2_inference.json.gz", False),
        ("h100_owlv2_inference.json.gz", True),
        # ProfilerStep ranges nested under ops: one chain ends at several depths of the tree
        ("v100_resnet50_dataloader_workers0.pt.trace.json.gz", True),
    ],
)
def test_distinct_chains_give_every_op_its_op_context_chain(SHARED_TRACES, monkeypatch, name, by_levels):
    """The stage patterns match each distinct chain once: through its chain id, every op gets
    the very string `op_context` makes for it, and ops share an id only when their chains are
    equal; numbered from the lists of ancestors (small traces) or level by level of the op
    tree (large ones, forced here)."""
    from traceanalyzer.analyses import attribution
    from traceanalyzer.analyses.attribution import distinct_chains, op_context

    if by_levels:
        monkeypatch.setattr(attribution, "LEVEL_CHAIN_OPS", 0)
    trace = load(str(SHARED_TRACES / name))
    assert attribution._chain_ids(trace) is not None  # the Trace's depths are those of parent_id
    per_op, chains = distinct_chains(trace, trace.ops["op_id"])
    got = per_op.join(chains, on="chain", how="left").select("op_id", "op_chain").sort("op_id")
    want = op_context(trace, trace.ops["op_id"]).select("op_id", "op_chain").sort("op_id")
    assert got.height == want.height > 10_000
    assert got.equals(want)
    assert chains.height < per_op.height / 10  # far fewer chains than ops
    assert chains["op_chain"].n_unique() == chains.height  # one id per distinct chain


def test_named_ops_by_chain_are_op_contexts_op(SHARED_TRACES, monkeypatch):
    """The kernels' launching op, made once per distinct chain (forced here, as on a large
    trace), is `op_context`'s `op` of every op."""
    from traceanalyzer.analyses import attribution

    monkeypatch.setattr(attribution, "LEVEL_CHAIN_OPS", 0)
    trace = load(str(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"))
    ids = trace.gpu["op_id"]
    got = attribution.named_ops(trace, ids).sort("op_id")
    want = attribution.op_context(trace, ids).select("op_id", "op").sort("op_id")
    assert got.height == want.height > 1000 and got.equals(want)


@pytest.mark.parametrize("numpy_imported", [True, False])
def test_priority_breakdown_by_hand(numpy_imported, monkeypatch):
    """Layers a [0,10) [20,30), b [5,25), then a again [35,38); steps [0,15) and [15,40).
    a: 10 and 10, +3 in step 2 from its second layer; b adds [10,15) and [15,20) to the union, 5
    each; the rest is the remainder: none of step 1, 25 - 10 - 5 - 3 = 7 of step 2. The same
    numbers on numpy's arrays and in Series calls."""
    import sys

    import numpy  # noqa: F401 - the numpy path is taken where numpy is imported

    from traceanalyzer.analyses.stages import _breakdown_numpy, priority_breakdown

    if not numpy_imported:
        monkeypatch.delitem(sys.modules, "numpy")

    def iv(*pairs):
        return pl.DataFrame({"start_ns": [p[0] for p in pairs], "end_ns": [p[1] for p in pairs]})

    layers = [("a", iv((20, 30), (0, 10))), ("b", iv((5, 25))), ("a", iv((35, 38)))]
    wins = pl.DataFrame({"step": [1, 2], "start_ns": [0, 15], "end_ns": [15, 40]})
    got = priority_breakdown(layers, wins, "rest")
    assert (_breakdown_numpy(layers, wins, "rest") is not None) == numpy_imported
    assert got.rows() == [(1, "a", 10), (2, "a", 13), (1, "b", 5), (2, "b", 5), (1, "rest", 0), (2, "rest", 7)]
