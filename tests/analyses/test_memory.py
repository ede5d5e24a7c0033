"""memory: the peak, allocations alive at it and who made them, growth per step.

Real traces are checked against numbers computed here from the raw JSON with the standard
library (file order of the `[memory]` events, address pairing by hand)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from traceanalyzer import load
from traceanalyzer.analyses.memory import analyse_memory
from traceanalyzer.findings import analyse_findings
from traceanalyzer.options import MemoryOptions

MB = 1024 * 1024


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def independent_peak(events: list[dict], device_type: int = 1) -> dict:
    """Peak of `Total Allocated` on the CUDA device, the allocations alive at it (paired by
    address in time order) and the largest of them, earliest first among equals."""
    mem = [e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type]
    mem = sorted(enumerate(mem), key=lambda p: (float(p[1]["ts"]), p[0]))
    peak_i = max(range(len(mem)), key=lambda i: (mem[i][1]["args"]["Total Allocated"], -i))
    live: dict[int, dict] = {}
    for _, e in mem[: peak_i + 1]:
        a = e["args"]
        if a["Bytes"] > 0:
            live[a["Addr"]] = e
        else:
            live.pop(a["Addr"], None)
    largest = sorted(live.values(), key=lambda e: (-e["args"]["Bytes"], float(e["ts"])))[0]
    return {
        "peak": mem[peak_i][1]["args"]["Total Allocated"],
        "largest": largest,
        "live_bytes": sum(e["args"]["Bytes"] for e in live.values()),
    }


def innermost_op(events: list[dict], at: dict) -> str:
    """The shortest cpu_op on the allocating thread whose [ts, ts+dur] holds the event."""
    ts = float(at["ts"])
    around = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "cpu_op"
        and e["tid"] == at["tid"]
        and e["pid"] == at["pid"]
        and float(e["ts"]) <= ts <= float(e["ts"]) + float(e["dur"])
    ]
    return min(around, key=lambda e: float(e["dur"]))["name"]


@pytest.fixture(scope="module")
def h100(SHARED_TRACES):
    path = SHARED_TRACES / "h100_owlv2_inference.json.gz"
    return path, load(path), raw_events(path)


@pytest.fixture(scope="module")
def v100(SHARED_TRACES):
    path = SHARED_TRACES / "v100_memory_events.json.gz"
    return path, load(path), raw_events(path)


@pytest.mark.parametrize("which", ["h100", "v100"])
def test_peak_and_largest_live_allocation_match_raw_events(which, request):
    path, trace, events = request.getfixturevalue(which)
    want = independent_peak(events)
    r = analyse_memory(trace)
    cuda = r.devices.filter(r.devices["device"].str.starts_with("cuda")).row(0, named=True)
    assert round(cuda["peak_allocated_mb"] * MB) == want["peak"]
    assert round(cuda["live_in_trace_mb"] * MB) == want["live_bytes"]
    top = r.live_at_peak.filter(r.live_at_peak["device"].str.starts_with("cuda")).row(0, named=True)
    largest = want["largest"]
    assert top["bytes"] == largest["args"]["Bytes"]
    assert top["at_us"] == pytest.approx((largest["ts"] * 1000 - trace.meta.origin_ns) / 1000, abs=0.002)
    assert top["inner_op"] == innermost_op(events, largest)


def test_h100_peak_attribution_by_hand(h100):
    _, trace, _ = h100
    r = analyse_memory(trace)
    cuda = r.devices.row(0, named=True)
    # The raw events' largest Total Allocated on device 0 (found with zgrep | sort): 2,707,847,680 bytes.
    assert cuda["device"] == "cuda:0" and round(cuda["peak_allocated_mb"] * MB) == 2_707_847_680
    assert cuda["peak_step"] == 6
    assert cuda["capacity_mb"] == pytest.approx(85_018_279_936 / MB)
    top = r.live_at_peak.row(0, named=True)
    # The attention scores of one layer: bmm of [16,5185,64] x [16,64,5185] in half precision,
    # 16*5185*5185*2 = 860,295,200 bytes, rounded up by the allocator to a multiple of 512.
    assert top["bytes"] == 860_295_680 and (16 * 5185 * 5185 * 2 + 511) // 512 * 512 == 860_295_680
    assert top["op"] == "aten::bmm"
    assert top["input_dims"] == "[[16,5185,64],[16,64,5185]]"
    assert top["python_frame"] == "transformers/models/owlv2/modeling_owlv2.py(410): forward"
    # The softmax over those scores is the allocation that makes the peak: same size, alive too.
    second = r.live_at_peak.row(1, named=True)
    assert second["op"] == "aten::softmax" and second["bytes"] == 860_295_680
    assert second["at_us"] == cuda["peak_at_us"]
    # Reserved minus allocated at the peak: 3,600,809,984 − 2,707,847,680 bytes.
    assert round(cuda["cache_at_peak_mb"] * MB) == 3_600_809_984 - 2_707_847_680


def test_v100_memory_steps_do_not_grow(v100):
    _, trace, _ = v100
    r = analyse_memory(trace)
    cuda = r.steps.filter(r.steps["device"] == "cuda:1")
    assert cuda["step"].to_list() == [2, 3, 4, 5, 6]
    assert cuda["growth_mb"].abs().max() == 0
    assert not [f for f in analyse_findings(trace) if f.rule == "memory_growth"]


def test_2021_trace_counts_from_trace_start(SHARED_TRACES):
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    events = [e for e in raw_events(path) if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    running, peak = 0, 0
    for e in sorted(events, key=lambda e: float(e["ts"])):
        running += e["args"]["Bytes"]
        peak = max(peak, running)
    r = analyse_memory(load(path))
    assert not r.has_totals and r.note
    assert round(r.devices.filter(r.devices["device"] == "cuda:0")["peak_allocated_mb"][0] * MB) == peak
    assert r.live_at_peak.is_empty()


def _write(tmp_path, events, name="t.json"):
    meta = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G", "totalGlobalMem": 1000 * MB}]}
    p = tmp_path / name
    p.write_text(json.dumps({**meta, "traceEvents": events}))
    return load(p)


def _mem(ts, addr, nbytes, total, reserved, tid=1):
    return {
        "ph": "i",
        "s": "t",
        "name": "[memory]",
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "args": {
            "Device Type": 1,
            "Device Id": 0,
            "Addr": addr,
            "Bytes": nbytes,
            "Total Allocated": total,
            "Total Reserved": reserved,
        },
    }


def _op(name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_synthetic_leak_capacity_and_dominant_op(tmp_path):
    # Three steps; each allocates 100 MB in aten::leaky (never freed) and 10 MB temporaries
    # in aten::tmp (freed in the step). Reserved reaches 950 of 1000 MB.
    ev, total = [], 0
    for s in range(3):
        base = s * 100
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 1,
                "tid": 1,
                "ts": base,
                "dur": 90,
                "args": {},
            }
        )
        ev.append(_op("aten::leaky", base + 10, 10, **{"Input Dims": [[25, 1024, 1024]]}))
        ev.append(_op("aten::empty", base + 12, 2))
        total += 100 * MB
        ev.append(_mem(base + 13, 1000 + s, 100 * MB, total, 950 * MB))
        ev.append(_op("aten::tmp", base + 30, 10))
        total += 10 * MB
        ev.append(_mem(base + 31, 9, 10 * MB, total, 950 * MB))
        total -= 10 * MB
        ev.append(_mem(base + 35, 9, -10 * MB, total, 950 * MB))
    trace = _write(tmp_path, ev)
    r = analyse_memory(trace, MemoryOptions())
    dev = r.devices.row(0, named=True)
    assert dev["peak_allocated_mb"] == 310 and dev["peak_step"] == 2
    assert dev["never_freed"] == 3 and dev["never_freed_mb"] == 300
    assert r.steps["growth_mb"].to_list() == [100, 100, 100]
    # the leaky allocations are attributed to aten::leaky (the namespaced op around aten::empty)
    assert set(r.never_freed["op"]) == {"aten::leaky"} and set(r.never_freed["inner_op"]) == {"aten::empty"}
    assert r.never_freed["input_dims"][0] == "[[25,1024,1024]]"
    top = r.top_ops.filter(r.top_ops["op"] == "aten::leaky").row(0, named=True)
    assert top["allocs"] == 3 and top["total_alloc_mb"] == 300 and top["self_alloc_mb"] == 0
    tmp = r.top_ops.filter(r.top_ops["op"] == "aten::tmp").row(0, named=True)
    assert tmp["self_alloc_mb"] == 30 and tmp["self_freed_mb"] == 30
    text = " ".join(f.message for f in analyse_findings(trace) if f.rule.startswith("memory_"))
    assert "near the device's capacity" in text and "leak suspect" in text and "aten::leaky" in text


def test_no_memory_events_gives_a_note(tmp_path):
    r = analyse_memory(_write(tmp_path, [_op("aten::add", 0, 5)]))
    assert not r.has_memory and "profile_memory=True" in r.note
