"""The timeline picture: size, content, and a known gap shaded in its lane at the right place."""

from __future__ import annotations

import io

import polars as pl
import pytest
from PIL import Image

import traceanalyzer as ta
from tests.synthetic import MAIN_TID, PID, TraceBuilder
from traceanalyzer.cli.pictures import by_pixel, timeline_picture
from traceanalyzer.errors import UsageError
from traceanalyzer.render.timeline import CAUSE_COLORS, GAP_ALPHA, TimeAxis, choose_window


def render_timeline(trace, window=None, **kwargs):
    return timeline_picture(ta.Session(trace), window, **kwargs)


# One step of 10 ms. Kernel A runs 0.1-2.0 ms, kernel B 6.0-9.0 ms; between them the main
# thread is inside a DataLoader range (2.1-5.8 ms), so the GPU is idle 2.0-6.0 ms for
# data_loading. Times in µs, as in the JSON.
K1 = (100, 1900)
K2 = (6000, 3000)
DATA = (2100, 3700)


def _gap_trace(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.op("aten::conv2d", 40, 30)
    b.kernel("conv_kernel", K1[0], K1[1], launch_ts=50)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", *DATA)
    b.op("aten::relu", 5880, 40)
    b.kernel("relu_kernel", K2[0], K2[1], launch_ts=5890)
    return b.write(tmp_path), b.document()


def _rgb(png: bytes) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB")


def _blend(hex_color: str, alpha: float) -> tuple[int, int, int]:
    c = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return tuple(round(alpha * v + (1 - alpha) * 255) for v in c)


def _close(p, q, tol=6) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(p, q))


@pytest.fixture(scope="module")
def gap_picture(tmp_path_factory):
    path, doc = _gap_trace(tmp_path_factory.mktemp("tl"))
    trace = ta.load(path)
    return trace, doc, render_timeline(trace, width=1200, height=700, dpi=100)


def test_picture_has_the_asked_size_and_is_not_blank(gap_picture):
    _, _, pic = gap_picture
    img = _rgb(pic.png)
    assert img.size == (1200, 700)
    colours = img.getcolors(maxcolors=1 << 20)
    assert len(colours) > 20  # text, bars, shading
    white = sum(n for n, c in colours if c == (255, 255, 255))
    assert white < 0.9 * 1200 * 700


def test_known_gap_is_shaded_in_the_gpu_lane_at_the_right_x_range(gap_picture):
    trace, doc, pic = gap_picture
    # Independently from the JSON: the trace starts at the earliest event (the step, ts 0);
    # the gap runs from the end of kernel A to the start of kernel B.
    origin_us = min(e["ts"] for e in doc["traceEvents"])
    gap_a_ms, gap_b_ms = (K1[0] + K1[1] - origin_us) / 1000, (K2[0] - origin_us) / 1000
    img = _rgb(pic.png)
    lay = pic.layout
    top, bottom = lay.lane_px(("gpu", 0, 7))
    shade = _blend(CAUSE_COLORS["data_loading"], GAP_ALPHA)
    x0, x1 = int(lay.x_px(gap_a_ms)) + 3, int(lay.x_px(gap_b_ms)) - 3
    assert x1 - x0 > 100
    rows = range(int(top) + 2, int(bottom) - 2)
    for x in range(x0, x1, 5):
        shaded = sum(_close(img.getpixel((x, y)), shade) for y in rows)
        # A label box may cover part of the lane; most of every column is shaded.
        assert shaded > 0.6 * len(rows), (x, shaded, len(rows))
    # Just outside the gap, kernels (blue) and no shading.
    for ms in ((K1[0] + K1[1] / 2) / 1000, (K2[0] + K2[1] / 2) / 1000):
        x = int(lay.x_px(ms))
        mid = int((top + bottom) / 2)
        assert _close(img.getpixel((x, mid)), (0x1F, 0x5F, 0xBF), tol=10)
        assert not any(_close(img.getpixel((x, y)), shade) for y in rows)
    # The CPU lane above shows the DataLoader range in solid orange over the gap.
    ctop, cbottom = lay.lane_px(("cpu", PID, MAIN_TID))
    x = int(lay.x_px((DATA[0] + DATA[1] / 2) / 1000))
    assert _close(img.getpixel((x, int((ctop + cbottom) / 2))), (0xFF, 0x7F, 0x0E))
    assert pic.extras["gaps_shaded"] >= 1


def test_lanes_launching_thread_first_then_streams(gap_picture):
    _, _, pic = gap_picture
    keys = [lane.key for lane in pic.layout.lanes]
    assert keys == [("cpu", PID, MAIN_TID), ("gpu", 0, 7)]


def test_window_choices(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000).step(2, 1000, 3000).step(3, 4000, 500)
    b.kernel("k", 10, 10, launch_ts=5)
    trace = ta.load(b.write(tmp_path))
    # Slowest step: step 2 (3,000 µs, by construction; no GPU work extends it).
    w = choose_window(trace)
    assert w.step == 2 and (w.end_ns - w.start_ns) == 3_000_000
    assert choose_window(trace, step=3).step == 3
    w = choose_window(trace, start_ms=1.5, end_ms=2.0)
    assert (w.start_ns - trace.meta.origin_ns, w.end_ns - trace.meta.origin_ns) == (1_500_000, 2_000_000)
    with pytest.raises(UsageError):
        choose_window(trace, step=99)
    with pytest.raises(UsageError):
        choose_window(trace, start_ms=2, end_ms=1)


def test_by_pixel_merges_subpixel_events_and_keeps_real_gaps():
    # 1,000,000 events of 1 µs every 2 µs over 2 s, then a 100 ms hole, on 1,000 pixels of
    # 4.1 ms each: the events merge into one bar per run, the hole stays.
    n = 1_000_000
    ts = pl.int_range(0, n, eager=True) * 2000
    ts = pl.concat([ts, ts + 2_100_000_000])
    df = pl.DataFrame({"lane": 0, "ts_ns": ts}).with_columns(end_ns=pl.col("ts_ns") + 1000)
    axis = TimeAxis(width=1190, lo_ns=0.0, hi_ns=4.1e9, ns_per_px=4_100_000_000 / 1000, plot_w=1000)
    bars = by_pixel(df, ["lane"], axis)
    assert bars.height == 2
    assert bars["px0"].to_list() == [0, 512]  # 2.1e9 / 4.1e6 = 512.2 -> column 512


def test_render_without_gpu_work(tmp_path):
    b = TraceBuilder()
    b.op("aten::add", 0, 100)
    pic = render_timeline(ta.load(b.write(tmp_path)), width=600, height=400)
    assert _rgb(pic.png).size == (600, 400)
    assert pic.layout.gpu_lanes_px is None


@pytest.fixture(scope="module")
def workers0(SHARED_TRACES):
    return ta.load(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")


def test_real_trace_slowest_step_and_data_loading_gap(workers0):
    # Step 5 is the slowest GPU-extended step (187,948 µs: `traceanalyzer gaps` per-step
    # window, and the TensorBoard definition of a step in shared/traces/README.md).
    pic = render_timeline(workers0)
    assert pic.window.step == 5
    assert (pic.window.end_ns - pic.window.start_ns) == 187_948_000
    img = _rgb(pic.png)
    assert img.size == (1600, 900)
    # The 69 ms DataLoader gap at the start of the step is shaded orange in the GPU lane.
    lay = pic.layout
    top, bottom = lay.lane_px(("gpu", 0, 7))
    x = int(lay.x_px(0.100 + 5.0))  # 5 ms into the gap that starts at 100 µs
    shade = _blend(CAUSE_COLORS["data_loading"], GAP_ALPHA)
    assert _close(img.getpixel((x, int(bottom) - 5)), shade)
