"""Charts: each a PNG of the asked size, or None when the trace cannot show it."""

from __future__ import annotations

import io

import polars as pl
from PIL import Image

import traceanalyzer as ta
from tests.synthetic import MAIN_TID, PID, TraceBuilder
from traceanalyzer.render import charts


def _trace(tmp_path, memory_events):
    b = TraceBuilder()
    b.step(1, 0, 5000).step(2, 5000, 5000)
    for s in (0, 5000):
        b.kernel("k", s + 100, 1000, launch_ts=s + 50)
        b.memcpy("HtoD (Pinned -> Device)", s + 1200, 100, 4 << 20, launch_ts=s + 1150)
        b.kernel("k", s + 3000, 1000, launch_ts=s + 2950)
    b.events += memory_events
    return ta.load(b.write(tmp_path))


def _mem(ts, nbytes, **extra):
    return {
        "ph": "i",
        "cat": "cpu_instant_event",
        "name": "[memory]",
        "pid": PID,
        "tid": MAIN_TID,
        "ts": ts,
        "args": {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, **extra},
    }


def _size(png):
    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert len(img.getcolors(1 << 20)) > 10
    return img.size


def test_every_chart_renders_at_the_asked_size(tmp_path):
    t = _trace(tmp_path, [_mem(10, 1 << 20, **{"Total Allocated": 1 << 20, "Total Reserved": 2 << 20})])
    ses = ta.Session(t)
    for png in (
        charts.stage_bars(ses.stages, t, 800, 400),
        charts.gap_histogram(ses.gaps, t, 800, 400),
        charts.copy_bandwidth(ses.copies, t, 800, 400),
        charts.memory_timeline(ses.memory, t, 800, 400),
    ):
        assert png is not None and _size(png) == (800, 400)


def test_copy_bandwidth_from_the_memcpy_rows(tmp_path):
    t = _trace(tmp_path, [])
    c = charts.copy_rows(ta.Session(t).copies)
    # 4 MiB in 100 µs = 4,194,304 B / 100,000 ns = 41.94 GB/s, by construction.
    assert c.height == 2
    assert all(abs(v - 41.94304) < 1e-3 for v in c["gbps"].to_list())
    assert set(c["direction"]) == {"HtoD"}


def test_memory_timeline_2021_running_sum_and_totals(tmp_path):
    # 2021-style events (Bytes only): +3 MiB, +1 MiB, -2 MiB -> 3, 4, 2 MiB. The chart draws the
    # memory analysis' own timeline (one series for `memory` and the report).
    t = _trace(tmp_path, [_mem(10, 3 << 20), _mem(20, 1 << 20), _mem(30, -(2 << 20))])
    m = ta.Session(t, ta.MemoryOptions(timeline_points=1000)).memory
    assert m.timeline.filter(pl.col("device") == "cuda:0")["allocated_mb"].to_list() == [3.0, 4.0, 2.0]
    assert charts.memory_timeline(m, t) is not None


def test_no_memory_no_copies_give_none(tmp_path):
    b = TraceBuilder()
    b.kernel("k", 0, 10, launch_ts=0)
    t = ta.load(b.write(tmp_path))
    ses = ta.Session(t)
    assert charts.memory_timeline(ses.memory, t) is None
    assert charts.copy_bandwidth(ses.copies, t) is None
