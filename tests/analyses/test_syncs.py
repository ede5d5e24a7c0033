"""syncs: synthetic traces with known bubbles, counts against the raw JSON, and agreement with
`gaps` (a gap whose cause is `sync` is that sync's bubble)."""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from tests.synthetic import write_events, x_event
from traceanalyzer.analyses.gaps import analyse_gaps
from traceanalyzer.analyses.syncs import analyse_syncs
from traceanalyzer.load import load

PID, TID = 100, 100


_write = write_events
_x = x_event


def _k(name: str, ts: float, dur: float, corr: int, stream: int = 7) -> dict:
    return _x("kernel", name, ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _item_trace(tmp_path: Path) -> Path:
    """One step: a kernel 10..1010 µs; `.item()` at train.py(88) copies 4 bytes device-to-
    pageable (1010..1012) and its cudaStreamSynchronize holds the CPU 20..1020; the CPU then
    works 1020..1500 and launches the next kernel at 1500, which starts at 1510.
    GPU idle between 1012 and 1510: a 498 µs bubble after the sync."""
    return _write(
        tmp_path,
        [
            _x("user_annotation", "ProfilerStep#1", 0, 1600),
            _x("python_function", "train.py(88): step", 1, 1590, **{"Python id": 1, "Python parent id": None}),
            _x("cuda_runtime", "cudaLaunchKernel", 5, 4, correlation=1),
            _x("cpu_op", "aten::item", 15, 1010),
            _x("cpu_op", "aten::_local_scalar_dense", 16, 1008),
            _x("cuda_runtime", "cudaMemcpyAsync", 17, 2, correlation=2),
            _x("cuda_runtime", "cudaStreamSynchronize", 20, 1000, correlation=3),
            _x("cpu_op", "aten::item", 1030, 5),  # .item() on a CPU tensor: no runtime call, not a sync
            _x("cpu_op", "aten::mul", 1100, 390),
            _x("cuda_runtime", "cudaLaunchKernel", 1500, 5, correlation=4),
            _x("cuda_runtime", "cudaStreamWaitEvent", 1506, 1, correlation=5),
            _k("gemm", 10, 1000, 1),
            _x(
                "gpu_memcpy",
                "Memcpy DtoH (Device -> Pinned)",
                1010,
                2,
                pid=0,
                tid=7,
                device=0,
                stream=7,
                correlation=2,
                bytes=4,
            ),
            _k("relu", 1510, 80, 4),
        ],
    )


def test_item_sync_followed_by_bubble(tmp_path):
    r = analyse_syncs(load(_item_trace(tmp_path)))
    stalls = r.syncs.filter(pl.col("kind") != "gpu_wait")
    # the pinned DtoH cudaMemcpyAsync does not block; the stream sync does
    assert stalls["api"].to_list() == ["cudaStreamSynchronize"]
    s = stalls.row(0, named=True)
    assert s["kind"] == "implicit" and s["op"] == "aten::item" and s["python_frame"] == "train.py(88): step"
    assert s["blocked_us"] == 1000 and s["bubble_us"] == 498 and s["step"] == 1
    assert s["waited_for"] == "Memcpy DtoH (Device -> Pinned)"
    waits = r.syncs.filter(pl.col("kind") == "gpu_wait")
    assert waits["api"].to_list() == ["cudaStreamWaitEvent"] and waits["bubble_us"].to_list() == [None]
    site = r.summary.row(0, named=True)
    assert (site["op"], site["calls"], site["sync_points"], site["bubble_us"]) == ("aten::item", 1, 1, 498)
    # step window 0..1600 µs (the CPU range; GPU work ends at 1590)
    assert site["bubble_share"] == pytest.approx(498 / 1600)


def test_explicit_sync_and_no_bubble_when_gpu_busy(tmp_path):
    # torch.cuda.synchronize() outside any op, returning while stream 8 still runs: no bubble.
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        _x("cuda_runtime", "cudaLaunchKernel", 6, 5, correlation=2),
        _x("cuda_runtime", "cudaDeviceSynchronize", 12, 100, correlation=3),
        _x("cuda_runtime", "cudaLaunchKernel", 200, 5, correlation=4),
        _k("a", 10, 100, 1),
        _k("b", 10, 300, 2, stream=8),
        _k("c", 320, 10, 4),
    ]
    r = analyse_syncs(load(_write(tmp_path, events)))
    s = r.syncs.row(0, named=True)
    assert (s["kind"], s["api"], s["blocked_us"], s["bubble_us"]) == ("explicit", "cudaDeviceSynchronize", 100, 0)


@pytest.fixture(scope="module")
def a100(SHARED_TRACES):
    path = SHARED_TRACES / "a100_multistream_syncs.json.gz"
    return load(path), _raw(path)


def test_a100_stream_syncs_and_items(a100):
    trace, raw = a100
    r = analyse_syncs(trace)
    raw_syncs = [e for e in raw if e.get("cat") == "cuda_runtime" and e["name"] == "cudaStreamSynchronize"]
    assert len(raw_syncs) == 75
    ours = r.syncs.filter(pl.col("api") == "cudaStreamSynchronize")
    assert ours.height == 75 and set(ours["kind"]) == {"implicit"}
    assert ours["blocked_us"].sum() == pytest.approx(sum(e["dur"] for e in raw_syncs))
    # 945 aten::item, none containing a runtime call: none is a sync
    items = [e for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::item"]
    assert len(items) == 945
    assert r.syncs.filter(pl.col("op_chain").str.contains("aten::item|_local_scalar_dense")).height == 0
    calls = [e for e in raw if e.get("cat") == "cuda_runtime"]
    starts: dict[int, list[float]] = {}
    for c in calls:
        starts.setdefault(c["tid"], []).append(c["ts"])
    for v in starts.values():
        v.sort()
    # any runtime call starting inside an aten::item on its thread?
    inside = sum(
        bisect.bisect_right(starts.get(i["tid"], []), i["ts"] + i["dur"])
        - bisect.bisect_left(starts.get(i["tid"], []), i["ts"])
        for i in items
    )
    assert inside == 0
    # cudaStreamWaitEvent is listed apart as a GPU-side wait
    assert r.syncs.filter(pl.col("kind") == "gpu_wait").height == sum(
        1 for e in calls if e["name"] == "cudaStreamWaitEvent"
    )


def test_a100_three_syncs_by_hand(a100):
    """The three syncs holding the CPU longest, found in the raw JSON by sorting the
    cudaStreamSynchronize / cudaDeviceSynchronize / cudaMemcpyAsync-to-pageable runtime events by
    `dur`: the single cudaDeviceSynchronize (158,183 µs, outside any op, after the last step),
    then two cudaMemcpyAsync calls (146,934 and 146,638 µs) whose correlated `gpu_memcpy` is
    `Memcpy DtoH (Device -> Pageable)` and which lie inside an `aten::to` op on thread 4515."""
    trace, raw = a100
    r = analyse_syncs(trace)
    pageable = {e["args"]["correlation"] for e in raw if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    blocking = sorted(
        (
            e
            for e in raw
            if e.get("cat") == "cuda_runtime"
            and (
                e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize")
                or e["args"].get("correlation") in pageable
            )
        ),
        key=lambda e: -e["dur"],
    )[:3]
    assert [e["dur"] for e in blocking] == [158183, 146934, 146638]
    top = r.syncs.filter(pl.col("kind") != "gpu_wait").head(3)
    assert top["api"].to_list() == [e["name"] for e in blocking]
    assert top["blocked_us"].to_list() == [float(e["dur"]) for e in blocking]
    assert top["kind"].to_list() == ["explicit", "implicit", "implicit"]
    assert top["op"].to_list()[1:] == ["aten::to", "aten::to"]
    ops = [e for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::to"]
    for call in blocking[1:]:
        assert any(
            o["tid"] == call["tid"] and o["ts"] <= call["ts"] and call["ts"] + call["dur"] <= o["ts"] + o["dur"]
            for o in ops
        )
    assert not any(o["tid"] == blocking[0]["tid"] and o["ts"] <= blocking[0]["ts"] <= o["ts"] + o["dur"] for o in ops)


def test_mi250_hip_syncs(SHARED_TRACES):
    path = SHARED_TRACES / "mi250_rocm_minitoy.json.gz"
    raw = _raw(path)
    r = analyse_syncs(load(path))
    expected = sorted(e["name"] for e in raw if e.get("name") in ("hipMemcpyWithStream", "hipDeviceSynchronize"))
    assert expected == ["hipDeviceSynchronize", "hipMemcpyWithStream", "hipMemcpyWithStream"]
    assert sorted(r.syncs["api"]) == expected


def _assert_gaps_agree(trace) -> int:
    """Every gap that `gaps` blames on a sync belongs to a sync with that API holding the CPU
    during the gap: whole as its bubble when the call returned inside the gap, else (the gap
    closed while the call still waited) inside its idle_while_blocked_us."""
    gaps = analyse_gaps(trace).all_gaps.filter(pl.col("cause") == "sync")
    syncs = (
        analyse_syncs(trace)
        .syncs.filter(pl.col("kind") != "gpu_wait")
        .with_columns(end_us=pl.col("start_us") + pl.col("blocked_us"))
    )
    for g in gaps.iter_rows(named=True):
        g_end = g["start_us"] + g["duration_us"]
        holding = syncs.filter(
            (pl.col("api") == g["sync_api"]) & (pl.col("start_us") < g_end) & (pl.col("end_us") > g["start_us"])
        )
        # The gap is charged to one of the calls holding the CPU during it: as its bubble when
        # that call returned inside the gap, else inside its idle_while_blocked_us.
        as_bubble = ((holding["bubble_us"] - g["duration_us"]).abs() < 1e-6).any()
        while_blocked = (holding["idle_while_blocked_us"] >= g["duration_us"] - 1e-6).any()
        assert holding.height >= 1 and (as_bubble or while_blocked), g
    # and nothing else: the idle time charged to syncs is the idle time gaps blames on syncs
    charged = syncs["bubble_us"].sum() + syncs["idle_while_blocked_us"].sum()
    assert charged == pytest.approx(gaps["duration_us"].sum(), abs=1e-3)
    return gaps.height


def test_gaps_agree_synthetic(tmp_path):
    _assert_gaps_agree(load(_item_trace(tmp_path)))
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        _x("cuda_runtime", "cudaMemcpy", 10, 990, correlation=2),  # synchronous: waits for gemm
        _x("cuda_runtime", "cudaLaunchKernel", 1002, 5, correlation=3),
        _k("gemm", 10, 500, 1),
        _x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            510,
            5,
            pid=0,
            tid=7,
            device=0,
            stream=7,
            correlation=2,
            bytes=8,
        ),
        _k("relu", 1010, 10, 3),
    ]
    trace = load(_write(tmp_path, events))
    assert _assert_gaps_agree(trace) == 1
    s = analyse_syncs(trace).syncs.row(0, named=True)
    assert s["bubble_us"] == 1010 - 515 and s["kind"] == "explicit"


def test_gaps_agree_h100(SHARED_TRACES):
    trace = load(SHARED_TRACES / "h100_owlv2_inference.json.gz")
    assert _assert_gaps_agree(trace) >= 10  # the trace has 15-16 sync gaps


def test_sync_tables_list_ties_in_one_order(SHARED_TRACES):
    # h100_owlv2 (raw JSON): 80 cudaStreamSynchronize, each after the cudaMemcpyAsync of an
    # aten::to (80 of the 85 cudaMemcpyAsync): two implicit rows of 80 calls that tie on `calls`
    # and came out in either order from run to run before the sort named a tie-break.
    trace = load(str(SHARED_TRACES / "h100_owlv2_inference.json.gz"))
    first = analyse_syncs(trace)
    rows = first.by_api.select("calls", "kind", "api").rows()
    assert rows == sorted(rows, key=lambda r: (-r[0], r[1], r[2]))
    assert ("implicit", "cudaMemcpyAsync") in [(k, a) for n, k, a in rows if n == 80]
    for _ in range(3):
        again = analyse_syncs(trace)
        assert again.by_api.equals(first.by_api) and again.summary.equals(first.summary)
