"""What a timeline says about its window: the idle time of every gap that overlaps it (cut to
the window), merged runs of one blocking call, labels kept inside and apart, a colour for any
cause."""

from __future__ import annotations

import gzip
import json

import polars as pl

from traceanalyzer.analyses.cpu_activity import call_runs
from traceanalyzer.cli.pictures import steady_steps, timeline_picture, timeline_window
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.render.timeline import choose_window
from traceanalyzer.render.timeline_layout import (
    CAUSE_COLORS,
    KIND_COLORS,
    cause_color,
    place_labels,
    window_idle,
)
from traceanalyzer.session import Session

W0 = "v100_resnet50_dataloader_workers0.pt.trace.json.gz"


def _busy_union(intervals: list[tuple[float, float]], a: float, b: float) -> float:
    """Length of the union of intervals inside [a, b] (plain Python, for the hand count)."""
    total, reach = 0.0, a
    for s, e in sorted(intervals):
        s, e = max(s, reach), min(e, b)
        if e > s:
            total += e - s
            reach = e
    return total


def test_workers0_60_80_ms_says_data_loading(SHARED_TRACES):
    path = SHARED_TRACES / W0
    raw = json.load(gzip.open(path))["traceEvents"]
    timed = [e for e in raw if e.get("ph") == "X" and e.get("cat") != "Trace"]
    origin = min(e["ts"] for e in timed)  # µs; the tool's trace start
    gpu = [(e["ts"] - origin, e["ts"] - origin + e["dur"]) for e in timed if e["cat"] in ("Kernel", "Memcpy", "Memset")]
    a, b = 60_000.0, 80_000.0  # µs; the window lies inside step 5
    idle_ms = (b - a - _busy_union(gpu, a, b)) / 1000
    # The GPU was idle from before the window until its first activity after 60 ms: the data
    # loading gap, whose visible part is that first start minus 60 ms.
    first = min(s for s, e in gpu if s >= a)
    loading_ms = (first - a) / 1000
    assert round(idle_ms, 1) == 10.3 and round(loading_ms, 1) == 9.2  # the numbers in issue #14

    ses = Session(load(str(path)), Options())
    pic = timeline_picture(ses, choose_window(ses.trace, start_ms=60, end_ms=80), width=900, height=500)
    sub = pic.extras["subtitle"]
    assert sub.startswith(f"GPU idle {idle_ms:,.1f} of 20.0 ms")
    assert f"mostly data_loading ({loading_ms:,.1f} ms" in sub
    # The gap began before the window, and still gets its label.
    assert any(t.startswith("data_loading") and "in view" in t for t in pic.extras["labels"])


def test_window_idle_cuts_gaps_to_the_window():
    g = pl.DataFrame({"start_us": [0.0, 50.0, 90.0], "duration_us": [70.0, 10.0, 30.0], "cause": ["a", "b", "c"]})
    w = window_idle(g, 60.0, 100.0)
    assert w["duration_us"].to_list() == [10.0, 10.0]
    assert w["start_us"].to_list() == [60.0, 90.0]


def test_back_to_back_calls_are_one_run():
    # Eleven 1 ms cudaEventSynchronize calls, 10 µs apart, then one alone 5 ms later.
    starts = [i * 1_010_000 for i in range(11)] + [20_000_000]
    calls = pl.DataFrame(
        {
            "pid": [1] * 12,
            "tid": [2] * 12,
            "name": ["cudaEventSynchronize"] * 12,
            "ts_ns": starts,
            "end_ns": [s + 1_000_000 for s in starts],
        }
    )
    runs = call_runs(calls, join_ns=50_000).sort("ts_ns")
    assert runs["calls"].to_list() == [11, 1]
    assert runs["end_ns"][0] == 10 * 1_010_000 + 1_000_000


def test_labels_stay_inside_and_apart():
    spots = place_labels([(0.0, 10.0), (2.0, 10.0), (99.0, 10.0), (50.0, 10.0)], 0.0, 100.0, rows=2)
    assert spots[0] == (5.0, 0)  # pushed right, inside
    assert spots[1] == (5.0, 1)  # overlapped the first: next row
    assert spots[2] == (95.0, 0)  # pushed left, inside
    assert spots[3] == (50.0, 0)


def test_any_cause_has_a_colour_and_untraced_is_not_grey():
    assert cause_color("kernel_spacing") == CAUSE_COLORS["kernel_spacing"]
    assert cause_color("some_new_cause") == cause_color("some_new_cause")
    assert cause_color("untraced") != KIND_COLORS["cpu_op"]


def test_default_window_is_the_slowest_steady_state_step(SHARED_TRACES):
    # a100_multistream_syncs: ProfilerStep#550..#554 in the raw JSON; #550, extended to the end
    # of its GPU work, lasts 371.6 ms against ~216 ms for the others, so the steps analysis
    # calls it a warm-up step and leaves it out of the averages (capture_caveats). The picture
    # drawn by default must be a step the averages count, not the warm-up.
    path = SHARED_TRACES / "a100_multistream_syncs.json.gz"
    raw = json.load(gzip.open(path))["traceEvents"]
    steps = sorted(int(e["name"].split("#")[1]) for e in raw if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [550, 551, 552, 553, 554]
    ses = Session(load(str(path)), Options())
    assert steady_steps(ses) == (551, 552, 553, 554)
    w = timeline_window(ses)
    table = ses.steps.table.filter(pl.col("step") != 550)
    slowest = table.sort("duration_us", descending=True)["step"][0]
    assert w.step == slowest and "steady state" in w.label
    # Asked for, the warm-up step is still drawn.
    assert choose_window(ses.trace, step=550).step == 550


def test_whole_trace_window_draws_idle_where_idle_dominates(SHARED_TRACES):
    """b200_eager_rank0 has no ProfilerStep: the picture is the whole GPU span, 84.5 ms with
    thousands of short kernels; the GPU is idle 86 % of it. A bar at least one pixel wide per
    kernel painted the lane mostly busy; now a pixel column the GPU spent mostly idle is drawn
    idle, so the share of busy columns is near the busy share, not near 1."""
    import io

    from PIL import Image

    path = SHARED_TRACES / "b200_eager_rank0.json.gz"
    raw = json.load(gzip.open(path))["traceEvents"]
    gpu = [
        (e["ts"], e["ts"] + e["dur"])
        for e in raw
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    lo, hi = min(a for a, _ in gpu), max(b for _, b in gpu)
    merged, end = 0.0, lo
    for a, b in sorted(gpu):  # the union of GPU activity, by hand
        if b > end:
            merged += b - max(a, end)
            end = b
    busy_share = merged / (hi - lo)
    assert 0.10 < busy_share < 0.18  # the subtitle's 86 % idle, from the raw events
    ses = Session(load(str(path)), Options())
    pic = timeline_picture(ses)
    assert "(86%)" in pic.extras["subtitle"]
    lay = pic.layout
    (key,) = [lane.key for lane in lay.lanes if lane.key[0] == "gpu"]
    top, bottom = lay.lane_px(key)
    y = int((top + bottom) / 2)
    img = Image.open(io.BytesIO(pic.png)).convert("RGB")
    origin_ms = ses.trace.meta.origin_ns / 1e6
    x0, x1 = int(lay.x_px(lo / 1000 - origin_ms)) + 1, int(lay.x_px(hi / 1000 - origin_ms))

    def is_bar(c):
        return any(
            sum(abs(a - b) for a, b in zip(c, _rgb(KIND_COLORS[k]))) < 60 for k in ("kernel", "memcpy", "memset")
        )

    drawn_busy = sum(is_bar(img.getpixel((x, y))) for x in range(x0, x1)) / (x1 - x0)
    assert drawn_busy < busy_share + 0.05, drawn_busy


def _rgb(h: str) -> tuple[int, int, int]:
    h = h.lstrip("#")
    return tuple(int(h[i : i + 2], 16) for i in (0, 2, 4))
