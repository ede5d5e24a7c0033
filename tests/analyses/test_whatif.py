"""Critical path and what-if on synthetic traces whose answers are worked out by hand (µs), and
the replay of every shared trace.

Each case's docstring gives the timeline; the expected numbers follow from it: the step ends at
the later of its CPU range's end and its last GPU work's end (`trace.extend_steps`)."""

from __future__ import annotations

import glob
from pathlib import Path

import polars as pl
import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer.analyses.whatif import Scenario
from traceanalyzer.load import load
from traceanalyzer.session import Session

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


def _session(b: TraceBuilder, tmp_path: Path) -> Session:
    return Session(load(b.write(tmp_path)))


def _path(ses: Session, step: int | None = None) -> list[tuple[str, float]]:
    seg = ses.critical_path.segments
    if step is not None:
        seg = seg.filter(seg["step"] == step)
    out: list[list] = []  # consecutive segments of one kind together (names differ: op, call)
    for k, d in zip(seg["kind"], seg["duration_ns"], strict=True):
        if out and out[-1][0] == k:
            out[-1][1] += d / 1000
        else:
            out.append([k, d / 1000])
    return [tuple(x) for x in out]


def _predicted(ses: Session, **changes) -> list[float]:
    return ses.whatif(Scenario.parse(**changes)).steps["predicted_us"].to_list()


def test_serial_cpu_bound(tmp_path):
    """prep [0,600] launches nothing; relu [600,650] launches a 20 µs kernel; post [650,1000]."""
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.op("aten::prep", 0, 600)
    b.op("aten::relu", 600, 50)
    b.kernel("relu_kernel", ts=620, dur=20, launch_ts=610)
    b.op("aten::post", 650, 350)
    ses = _session(b, tmp_path)
    assert _path(ses) == [("cpu_op", 600), ("launch", 50), ("cpu_op", 350)]
    assert ses.whatif(Scenario()).replayed_median_step_us == 1000
    assert _predicted(ses, speedup=("aten::prep=2",)) == [700]  # 300 µs less CPU on the path
    assert _predicted(ses, speedup=("relu_kernel=2",)) == [1000]  # off the path: saves nothing


def test_gpu_bound(tmp_path):
    """Three 300 µs kernels launched at 10, 20, 30 run back to back from 15 to 915."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 8, 30)
    for k, t in enumerate((10, 20, 30)):
        b.kernel("gemm", ts=15 + 300 * k, dur=300, launch_ts=t)
    ses = _session(b, tmp_path)
    assert _path(ses) == [("untraced", 8), ("launch", 7), ("kernel", 900)]
    # k1 [15,165], k2 [165,315], k3 [315,465]: each still follows the one before on the stream
    assert _predicted(ses, speedup=("gemm=2",)) == [465]
    assert _predicted(ses, without=("data_loading",)) == [915]


def test_data_bound(tmp_path):
    """DataLoader [0,700], conv [700,720] launches at 705 a kernel [712,912]; step CPU [0,730]."""
    b = TraceBuilder()
    b.step(1, 0, 730)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 700)
    b.op("aten::conv2d", 700, 20)
    b.kernel("conv_kernel", ts=712, dur=200, launch_ts=705)
    ses = _session(b, tmp_path)
    assert _path(ses) == [("data_loading", 700), ("launch", 12), ("kernel", 200)]
    # without the 700 µs of loading: the launch at 5, the kernel 7 µs later [12,212]
    assert _predicted(ses, without=("data_loading",)) == [212]


def test_sync_bound(tmp_path):
    """mm launches at 5 a kernel [12,412]; item [20,430] waits in cudaStreamSynchronize [25,420]
    (8 µs after the kernel ends); add [430,500]."""
    b = TraceBuilder()
    b.step(1, 0, 500)
    b.op("aten::mm", 0, 20)
    b.kernel("gemm", ts=12, dur=400, launch_ts=5)
    b.op("aten::item", 20, 410)
    b.runtime("cudaStreamSynchronize", 25, 395)
    b.op("aten::add", 430, 70)
    ses = _session(b, tmp_path)
    path = _path(ses)
    assert path == [("launch", 12), ("kernel", 400), ("sync", 8), ("cpu_op", 80)]
    # a 2x faster kernel ends at 212; the sync returns 8 µs later; 10 + 70 µs of CPU follow
    assert _predicted(ses, speedup=("gemm=2",)) == [300]
    # no sync: the CPU ends at 105, the kernel still ends at 412
    assert _predicted(ses, without=("sync",)) == [412]
    assert _predicted(ses, drop=("aten::item",)) == [412]
    # the one site of the syncs analysis (aten::item's call) no longer waiting: the same
    (site,) = ses.syncs.sites.filter(ses.syncs.sites["kind"] == "implicit").iter_rows(named=True)
    assert site["op"] == "aten::item"
    assert ses.whatif(Scenario(unsync=(site["sync_id"],))).steps["predicted_us"].to_list() == [412]


def test_backward_on_another_thread(tmp_path):
    """The main thread runs prep [0,100], waits (no event) until 300 while the autograd thread
    runs XBackward [110,290] (it launches a kernel at 150), then post [300,400]."""
    b = TraceBuilder()
    b.step(1, 0, 400)
    b.op("aten::prep", 0, 100)
    b.op("autograd::engine::evaluate_function: XBackward", 110, 180, tid=200)
    b.kernel("bwd_kernel", ts=160, dur=10, launch_ts=150, tid=200)
    b.op("aten::post", 300, 100)
    ses = _session(b, tmp_path)
    assert _path(ses) == [("cpu_op", 100), ("thread_wait", 10), ("launch", 180), ("thread_wait", 10), ("cpu_op", 100)]
    # backward 2x faster: [110,200]; the main thread resumes 10 µs later and runs post to 310
    assert _predicted(ses, speedup=("XBackward=2",)) == [310]
    # no CPU-bound time (prep and post): backward [10,190], the main thread done at 200
    assert _predicted(ses, without=("cpu_bound",)) == [200]


def test_blocking_copy_waits_for_the_copy_it_launched(tmp_path):
    """item [10,150] calls cudaMemcpy [20,140], which launches a DtoH copy [30,130] and returns 10 µs
    after it: the call's start -> its copy -> its return, one chain (no cycle)."""
    b = TraceBuilder()
    b.step(1, 0, 150)
    b.op("aten::item", 10, 140)
    b.memcpy("DtoH (Device -> Pageable)", ts=30, dur=100, nbytes=4, launch_ts=20, launch_dur=120, api="cudaMemcpy")
    ses = _session(b, tmp_path)
    # item launches nothing else: its own time is cpu_op (the blocking call is the sync layer)
    assert _path(ses) == [
        ("untraced", 10),
        ("cpu_op", 10),
        ("launch", 10),
        ("memcpy", 100),
        ("sync", 10),
        ("cpu_op", 10),
    ]
    # a 2x faster copy [30,80]; the call returns at 90, item ends at 100
    assert _predicted(ses, speedup=("Memcpy=2",)) == [100]


def test_two_streams_event_wait(tmp_path):
    """kernel_a on stream 7 [20,320]; stream 8 waits for it (cudaStreamWaitEvent + its marker);
    kernel_b launched at 30 on stream 8 runs [322,422]."""
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel("kernel_a", ts=20, dur=300, launch_ts=10, stream=7)
    b.runtime("cudaEventRecord", 16, 2)
    corr = b.runtime("cudaStreamWaitEvent", 20, 2)
    b.events.append(
        {
            "ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": 8, "ts": 21, "dur": 0,
            "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": 7, "wait_on_cuda_event_id": 1,
                     "stream": 8, "correlation": corr, "device": 0},
        }
    )  # fmt: skip
    b.kernel("kernel_b", ts=322, dur=100, launch_ts=30, stream=8)
    ses = _session(b, tmp_path)
    assert _path(ses) == [("untraced", 10), ("launch", 10), ("kernel", 300), ("gpu_wait", 2), ("kernel", 100)]
    # kernel_a [20,170]; kernel_b waits for it: [172,272]
    assert _predicted(ses, speedup=("kernel_a=2",)) == [272]
    assert _predicted(ses, speedup=("kernel_b=2",)) == [372]


def test_graph_replay(tmp_path):
    """One cudaGraphLaunch [10,20] replays g1 [25,125], g2 [125,225], g3 [225,325]."""
    b = TraceBuilder()
    b.step(1, 0, 50)
    corr = b.runtime("cudaGraphLaunch", 10, 10)
    for k, name in enumerate(("g1", "g2", "g3")):
        b.events.append(
            {
                "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 25 + 100 * k, "dur": 100,
                "args": {"device": 0, "stream": 7, "correlation": corr, "graph id": 1},
            }
        )  # fmt: skip
    ses = _session(b, tmp_path)
    assert _path(ses) == [("untraced", 10), ("launch", 15), ("kernel", 300)]
    assert _predicted(ses, speedup=("g2=2",)) == [275]


def test_collective_waiting_for_peer(tmp_path):
    """The same all-reduce takes 100 µs in step 1 and 600 µs in step 2: 500 µs waiting for peers."""
    b = TraceBuilder()
    for n, t0 in ((1, 0), (2, 1000)):
        b.step(n, t0, 50)
        b.op("c10d::allreduce_", t0 + 5, 20, **{"Input Dims": [[1024]]})
        b.kernel("ncclDevKernel_AllReduce_Sum_f32", ts=t0 + 20, dur=100 if n == 1 else 600, launch_ts=t0 + 10)
    ses = _session(b, tmp_path)
    assert _path(ses, 2) == [("untraced", 5), ("launch", 15), ("peer_wait", 500), ("collective", 100)]
    w = ses.whatif(Scenario.parse(without=("peer_wait",)))
    assert w.steps["step_us"].to_list() == [120, 620]
    assert w.steps["predicted_us"].to_list() == [120, 120]
    assert w.median_step_us == 370 and w.predicted_median_step_us == 120
    # The result holds integer ns (the µs above are its view): 120 µs and 620 µs captured, each
    # replayed exactly, 500 µs saved in step 2; the median of two steps is their mean.
    assert w.steps_ns.schema["saving_ns"] == pl.Int64
    assert w.steps_ns.select("step_ns", "replayed_ns", "predicted_ns", "saving_ns").rows() == [
        (120_000, 120_000, 120_000, 0),
        (620_000, 620_000, 120_000, 500_000),
    ]
    assert (w.median_step_ns, w.replayed_median_step_ns, w.predicted_median_step_ns) == (370_000, 370_000, 120_000)
    assert w.saving_us == 250 and w.model_error == 0


def test_bad_scenarios():
    with pytest.raises(Exception, match="not a cause"):
        Scenario.parse(without=("coffee",))
    with pytest.raises(Exception, match="PATTERN=FACTOR"):
        Scenario.parse(speedup=("gemm",))


SHARED = sorted(glob.glob(str(TRACES / "*.json*")) + glob.glob(str(TRACES / "*" / "*.json*")))


@pytest.mark.parametrize("path", SHARED, ids=lambda p: Path(p).name[:40])
def test_replay_reproduces_every_shared_trace(path):
    """Nothing changed: every step within 2 % of its captured time (the issue's bar; the lags of
    the graph make it exact, and a cycle broken or a dependency lost would show here); the path
    tiles each step."""
    ses = Session(load(path))
    w = ses.whatif(Scenario())
    for captured, replayed in zip(w.steps["step_us"], w.steps["replayed_us"], strict=True):
        assert abs(replayed - captured) <= 0.02 * captured
        assert replayed == captured
    cp = ses.critical_path
    assert cp.segments["duration_ns"].sum() == cp.steps["step_ns"].sum()


def test_workers0_without_data_loading_predicts_workers4():
    """workers0's median step is 177.4 ms; the same training with num_workers=4 measured 126.7 ms
    (median of its 6 ProfilerStep windows). Removing the data-loading CPU time must land within 10 %."""
    ses = Session(load(str(TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")))
    w = ses.whatif(Scenario.parse(without=("data_loading",)))
    assert w.median_step_us == pytest.approx(177_443, abs=1)
    four = Session(load(str(TRACES / "v100_resnet50_dataloader_workers4.pt.trace.json.gz")))
    measured = four.whatif(Scenario()).median_step_us
    assert measured == pytest.approx(126_700, rel=0.001)
    assert abs(w.predicted_median_step_us - measured) <= 0.10 * measured


def test_a_scenario_evaluated_a_slice_of_nodes_at_a_time_is_the_same(monkeypatch):
    """The scenario's durations, own times and drops, evaluated 1,000 nodes at a time (a what-if
    over a million nodes runs on slices), are those of one evaluation over every node, for every
    kind of change, on a trace with data loading, syncs and ops to drop or speed up."""
    import numpy as np

    from traceanalyzer.analyses import whatif

    model = Session(load(str(TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"))).dependency_model
    assert model.graph.nodes.height > 20 * 1000
    ops = model.trace.ops["name"].value_counts().sort("count", descending=True)["name"].head(2).to_list()
    syncs = model.trace.runtime.filter(pl.col("name").str.contains("Synchronize|Memcpy"))["runtime_id"].head(20)
    scenarios = [
        Scenario(without=("data_loading", "sync", "cpu_bound")),
        Scenario(without=("gpu_wait", "peer_wait", "slow_launch")),
        Scenario(drop=(ops[0],), speedup=((ops[1], 2.0), ("gemm", 1.5))),
        Scenario(unsync=tuple(syncs.to_list())),
    ]
    whole = [model._apply(sc) for sc in scenarios]
    monkeypatch.setattr(whatif, "SLICE_ROWS", 1000)
    for sc, (dur, own, lag, cut) in zip(scenarios, whole, strict=True):
        d, o, la, c = model._apply(sc)
        assert np.array_equal(d, dur) and np.array_equal(o, own), sc
        assert (la is None and lag is None) or np.array_equal(la, lag), sc
        assert (c is None and cut is None) or np.array_equal(c, cut), sc
    assert any(not np.array_equal(d, model.graph.nodes["dur_ns"].to_numpy()) for d, *_ in whole)


def _changes_by_expressions(model, sc: Scenario):
    """The scenario's durations, own times (at the syncs) and drops as polars expressions over
    the node table: the rules `whatif.NodeChanges` computes on numpy arrays, as they were written
    before (its reference)."""
    import math

    from traceanalyzer.analyses.scenario import CPU_CAUSES

    g = model.graph
    cpu = pl.col("lane") == "cpu"
    dur, own = pl.col("dur_ns").cast(pl.Float64), pl.col("own_ns").fill_null(0).cast(pl.Float64)
    removed = [layer for c in sc.without for layer in CPU_CAUSES.get(c, ())]
    frame = g.nodes.select("lane", "op_id", "runtime_id", "dur_ns").with_columns(g.column("wait_ns"))
    if sc.unsync:
        frame = frame.with_columns(t_sync=pl.Series(g.layer_ns(["sync"])))
    if removed:
        frame = frame.with_columns(_gone=pl.Series(g.layer_ns(removed)))
        keep = pl.when(cpu & (pl.col("dur_ns") > 0)).then((1 - pl.col("_gone") / pl.col("dur_ns")).clip(0, 1))
        keep = keep.otherwise(1.0)
        dur, own = dur * keep, own * keep
    if "slow_launch" in sc.without:
        rdur = model.trace.runtime["dur_ns"]
        frame = frame.with_columns(_rdur=rdur.gather(frame["runtime_id"]))
        dur = pl.when(cpu & (pl.col("_rdur") >= model.slow_launch_ns).fill_null(False)).then(0.0).otherwise(dur)
    if "peer_wait" in sc.without or "gpu_wait" in sc.without:
        dur = dur - pl.col("wait_ns").fill_null(0)
    if sc.speedup:
        frame = frame.with_columns(name=g.gpu_node_names())
    for pattern, f in sc.speedup:
        scale = 0.0 if math.isinf(f) else 1.0 / f
        on_gpu = ~cpu & pl.col("name").str.contains(pattern)
        on_cpu = cpu & pl.col("op_id").is_in(model._matching_ops(pattern).implode())
        w = pl.col("wait_ns").fill_null(0)
        dur = pl.when(on_gpu).then(w + (dur - w) * scale).when(on_cpu).then(dur * scale).otherwise(dur)
        own = pl.when(on_cpu).then(own * scale).otherwise(own)
    dropped = pl.lit(False)
    for name in sc.drop:
        dropped = dropped | pl.col("op_id").is_in(model._matching_ops(name, exact=True).implode())
    dur, own = pl.when(dropped).then(0.0).otherwise(dur), pl.when(dropped).then(0.0).otherwise(own)
    if sc.unsync:
        unsynced = cpu & pl.col("runtime_id").is_in(list(sc.unsync)) & (pl.col("t_sync") > 0)
        dur = pl.when(unsynced).then((dur - pl.col("t_sync")).clip(0)).otherwise(dur)
        own = pl.when(unsynced).then(0.0).otherwise(own)
        dropped = dropped | unsynced
    syncs = model.prepared.sync_nodes()
    at_syncs = frame[syncs].with_columns(g.column("own_ns").gather(syncs))
    as_ns = lambda e, f: f.select(e.clip(0).round().cast(pl.Int64)).to_series().to_numpy()  # noqa: E731
    drop = frame.select(dropped.fill_null(False)).to_series().to_numpy()
    return as_ns(dur, frame), as_ns(own, at_syncs), drop if sc.drop or sc.unsync else None


@pytest.mark.parametrize(
    "name",
    ["v100_resnet50_dataloader_workers0.pt.trace.json.gz", "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz"],
)
def test_node_changes_on_arrays_are_the_expressions_on_the_node_table(name: str):
    """Every kind of change, alone and together (ops dropped and sped up whose calls are also
    unsynced, speed-ups to nothing, slow launches, waits taken off), gives on numpy arrays the
    durations, own times and drops of the polars expressions they replaced, to the nanosecond."""
    import numpy as np

    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    model = Session(load(str(path))).dependency_model
    ops = model.trace.ops["name"].value_counts().sort("count", descending=True)["name"].head(3).to_list()
    calls = model.trace.runtime.filter(pl.col("name").str.contains("Synchronize|Memcpy|Wait"))["runtime_id"]
    kernel = model.trace.gpu["name"].drop_nulls().head(1).str.slice(0, 6).to_list() or ["gemm"]
    scenarios = [
        Scenario(without=("data_loading", "sync", "cpu_bound")),
        Scenario(without=("gpu_wait", "peer_wait", "slow_launch", "untraced", "launch_latency")),
        Scenario(drop=(ops[0],), speedup=((ops[1], 2.0), (kernel[0], 1.5), (ops[2], float("inf")))),
        Scenario(unsync=tuple(calls.head(50).to_list())),
        Scenario(without=("runtime_call",), drop=(ops[0], ops[1]), unsync=tuple(calls.to_list())),
    ]
    changed = 0
    for sc in scenarios:
        dur, own, _, _ = model._apply(sc)
        want_dur, want_own, want_drop = _changes_by_expressions(model, sc)
        assert np.array_equal(dur, want_dur) and np.array_equal(own, want_own), sc
        got = model._changes(sc).dropped if sc.drop or sc.unsync else None
        assert (got is None and want_drop is None) or np.array_equal(got, want_drop), sc
        changed += int((dur != model.graph.nodes["dur_ns"].to_numpy()).sum())
    assert changed > 1000
