"""A timeline picture of one window of a trace, readable by someone who did not run the tool.

Lanes, top to bottom: the CPU threads that matter (the launching thread first), then one lane
per GPU stream. CPU lanes show top-level ops (grey), data-loading ranges (orange) and
synchronising calls (red); GPU lanes show kernels, memcpys and memsets by colour. GPU idle
gaps are shaded across the GPU lanes in the colour of their cause, the largest are labelled
with the op and Python line that caused them, and step boundaries are dashed lines.

Events narrower than a pixel are merged before drawing (grouped by pixel column with polars),
so the cost of drawing depends on the picture's width, not on the number of events.
matplotlib is imported here only, lazily, with the Agg backend.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
from traceanalyzer.errors import UsageError
from traceanalyzer.options import DATA_LOADING_PATTERN
from traceanalyzer.redact import scrub_text
from traceanalyzer.trace import STEP_NAME, Trace

# Colours: GPU work kinds, CPU activity kinds and gap causes. A cause shares the colour of the
# CPU activity that explains it (data_loading = DataLoader ranges, sync = sync calls).
KIND_COLORS = {
    "kernel": "#1f5fbf",
    "memcpy": "#2ca02c",
    "memset": "#9467bd",
    "cpu_op": "#a0a0a0",
    "data_loading": "#ff7f0e",
    "sync": "#d62728",
}
KIND_LABELS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "cpu_op": "CPU op (top level)",
    "data_loading": "DataLoader range",
    "sync": "sync call (CPU blocked)",
}
CAUSE_COLORS = {
    "sync": "#d62728",
    "data_loading": "#ff7f0e",
    "cpu_bound": "#8c564b",
    "launch_latency": "#e377c2",
    "gpu_wait": "#bcbd22",
    "untraced": "#7f7f7f",
}
GAP_ALPHA = 0.35
MAX_CPU_LANES = 4
MAX_GPU_LANES = 8
LABELLED_GAPS = 4


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    label: str  # "step 9 (slowest of 6)", "12.0-30.0 ms"
    step: int | None = None


@dataclass(frozen=True)
class Lane:
    key: tuple  # ("cpu", pid, tid) or ("gpu", device, stream)
    label: str
    index: int  # 0 = top


@dataclass(frozen=True)
class Layout:
    """Where things landed in the picture, for tests and for callers that add to it: pixel
    coordinates have their origin at the picture's top-left corner."""

    width_px: int
    height_px: int
    axes_px: tuple[float, float, float, float]  # left, top, right, bottom
    xlim_ms: tuple[float, float]
    lanes: tuple[Lane, ...]
    gpu_lanes_px: tuple[float, float] | None  # top, bottom of the GPU lanes band

    def x_px(self, ms: float) -> float:
        left, _, right, _ = self.axes_px
        a, b = self.xlim_ms
        return left + (ms - a) / (b - a) * (right - left)

    def lane_px(self, key: tuple) -> tuple[float, float]:
        """top, bottom pixel rows of a lane's bar."""
        _, top, _, bottom = self.axes_px
        n = len(self.lanes)
        lane = next(x for x in self.lanes if x.key == key)
        per = (bottom - top) / n
        return top + (lane.index + 0.1) * per, top + (lane.index + 0.9) * per


@dataclass(frozen=True)
class Picture:
    png: bytes
    layout: Layout
    window: Window
    extras: dict[str, Any] = field(default_factory=dict)


# -- data preparation (pure polars) -----------------------------------------------------------


def choose_window(
    trace: Trace, step: int | None = None, start_ms: float | None = None, end_ms: float | None = None
) -> Window:
    """--step N, or --start/--end in ms from the trace start, or by default the slowest step
    (the whole trace when it has no ProfilerStep)."""
    origin = trace.meta.origin_ns
    if start_ms is not None or end_ms is not None:
        a = origin + int(round((start_ms or 0.0) * 1e6))
        b = origin + int(round(end_ms * 1e6)) if end_ms is not None else trace.meta.end_ns
        if b <= a:
            raise UsageError(
                trace.path,
                f"empty window: --end ({(b - origin) / 1e6:g} ms) is not after --start ({(a - origin) / 1e6:g} ms)",
            )
        return Window(a, b, f"{(a - origin) / 1e6:,.1f}–{(b - origin) / 1e6:,.1f} ms")
    steps = trace.steps
    if step is not None:
        row = steps.filter(pl.col("step") == step)
        if row.is_empty():
            have = ", ".join(str(s) for s in steps["step"].to_list()) or "none"
            raise UsageError(trace.path, f"no ProfilerStep#{step} in this trace (steps: {have})")
        r = row.row(0, named=True)
        return Window(r["start_ns"], r["end_ns"], f"step {step}", step)
    if steps.height:
        r = steps.with_columns(_d=pl.col("end_ns") - pl.col("start_ns")).sort("_d", descending=True).row(0, named=True)
        label = f"step {r['step']} (slowest of {steps.height})" if steps.height > 1 else f"step {r['step']}"
        return Window(r["start_ns"], r["end_ns"], label, r["step"])
    if trace.meta.end_ns <= origin:
        return Window(origin, origin + 1_000_000, "empty trace")
    return Window(origin, trace.meta.end_ns, "whole trace (no ProfilerStep)")


def merge_by_pixel(df: pl.DataFrame, by: list[str], lo_ns: int, ns_per_px: float) -> pl.DataFrame:
    """Intervals (by..., ts_ns, end_ns) clipped to [lo_ns, ...) and merged where they touch
    the same or adjacent pixel columns -> (by..., px0, px1) in pixels from lo_ns, each at least
    one pixel wide. Vectorised: O(events) polars, no Python loop."""
    if df.is_empty():
        return pl.DataFrame(schema={**{b: df.schema[b] for b in by}, "px0": pl.Int64, "px1": pl.Int64})
    s = (
        df.select(
            *by,
            px0=((pl.col("ts_ns") - lo_ns) / ns_per_px).floor().cast(pl.Int64),
            px1=((pl.col("end_ns") - lo_ns) / ns_per_px).ceil().cast(pl.Int64),
        )
        .with_columns(px1=pl.max_horizontal("px1", pl.col("px0") + 1))
        .sort([*by, "px0"])
    )
    reach = pl.col("px1").cum_max().shift(1).over(by)
    s = s.with_columns(_new=(reach.is_null() | (pl.col("px0") > reach)).cast(pl.Int64))
    s = s.with_columns(_grp=pl.col("_new").cum_sum().over(by))
    return s.group_by([*by, "_grp"]).agg(pl.col("px0").min(), pl.col("px1").max()).drop("_grp").sort([*by, "px0"])


def _in_window(df: pl.DataFrame, w: Window) -> pl.DataFrame:
    return df.filter((pl.col("end_ns") > w.start_ns) & (pl.col("ts_ns") < w.end_ns))


def _main_thread(trace: Trace) -> tuple[int, int] | None:
    if trace.steps.height:
        r = trace.steps.row(0, named=True)
        return r["pid"], r["tid"]
    g = (
        trace.gpu.filter(pl.col("launch_tid").is_not_null())
        .group_by("launch_pid", "launch_tid")
        .len()
        .sort("len", descending=True)
    )
    if g.height:
        return g["launch_pid"][0], g["launch_tid"][0]
    if trace.ops.height:
        g = trace.ops.group_by("pid", "tid").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
        return g["pid"][0], g["tid"][0]
    return None


def cpu_events(trace: Trace, w: Window, data_pattern: str = DATA_LOADING_PATTERN) -> pl.DataFrame:
    """pid, tid, kind (cpu_op | data_loading | sync), ts_ns, end_ns inside the window."""
    ops = _in_window(trace.ops, w)
    step_ids = trace.steps["op_id"] if trace.steps.height else pl.Series([], dtype=pl.Int64)
    is_step = pl.col("name").str.contains(STEP_NAME)
    top = ops.filter(~is_step & (pl.col("parent_id").is_null() | pl.col("parent_id").is_in(step_ids.implode())))
    data = ops.filter(pl.col("name").str.contains(data_pattern))
    sync = _in_window(blocking_calls(trace), w)
    cols = ["pid", "tid", "kind", "ts_ns", "end_ns"]
    return pl.concat(
        [
            top.with_columns(kind=pl.lit("cpu_op")).select(cols),
            data.with_columns(kind=pl.lit("data_loading")).select(cols),
            sync.with_columns(kind=pl.lit("sync")).select(cols),
        ]
    )


def choose_lanes(trace: Trace, w: Window, cpu: pl.DataFrame, gpu: pl.DataFrame) -> list[Lane]:
    """CPU threads that matter (the launching thread first, then threads with data loading,
    sync calls or launches, by time), then GPU streams by device and stream."""
    main = _main_thread(trace)
    span = max(w.end_ns - w.start_ns, 1)
    clipped = (pl.min_horizontal("end_ns", pl.lit(w.end_ns)) - pl.max_horizontal("ts_ns", pl.lit(w.start_ns))).clip(0)
    score = cpu.group_by("pid", "tid").agg(
        busy=clipped.filter(pl.col("kind") == "cpu_op").sum(),
        special=clipped.filter(pl.col("kind") != "cpu_op").sum(),
    )
    launches = (
        _in_window(trace.runtime, w).group_by("pid", "tid").agg(launches=pl.len())
        if trace.runtime.height
        else pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "launches": pl.UInt32})
    )
    score = score.join(launches, on=["pid", "tid"], how="full", coalesce=True).fill_null(0)
    score = score.filter((pl.col("special") > 0) | (pl.col("busy") > 0.01 * span)).sort(
        ["special", "busy", "launches"], descending=True
    )
    threads = [(r["pid"], r["tid"]) for r in score.iter_rows(named=True)]
    if main is not None:
        threads = [main] + [t for t in threads if t != main]
    threads = threads[:MAX_CPU_LANES]
    lanes: list[Lane] = []
    for pid, tid in threads:
        role = "\n(launching thread)" if main == (pid, tid) else ""
        lanes.append(Lane(("cpu", pid, tid), f"CPU thread {tid}{role}", len(lanes)))
    streams = gpu.group_by("device", "stream").agg(busy=(pl.col("end_ns") - pl.col("ts_ns")).sum())
    streams = streams.sort("busy", descending=True).head(MAX_GPU_LANES).sort("device", "stream")
    for r in streams.iter_rows(named=True):
        lanes.append(Lane(("gpu", r["device"], r["stream"]), f"GPU {r['device']} stream {r['stream']}", len(lanes)))
    return lanes


def _short(s: str | None, n: int = 48) -> str:
    if not s:
        return ""
    s = scrub_text(str(s))
    return s if len(s) <= n else s[: n - 1] + "…"


def _gap_label(r: dict[str, Any]) -> str:
    dur = r["duration_us"]
    head = f"{r['cause']} · {dur / 1000:,.1f} ms" if dur >= 1000 else f"{r['cause']} · {dur:,.0f} µs"
    lines = [head]
    what = r.get("op") or r.get("range")
    if r["cause"] == "gpu_wait" and r.get("waited_on"):
        lines.append(_short("waited on " + r["waited_on"]))
    if r["cause"] == "sync" and r.get("sync_api"):
        lines.append(_short("CPU blocked in " + r["sync_api"]))
    if what:
        lines.append(_short(what))
    if r.get("python_frame"):
        lines.append(_short(r["python_frame"]))
    other = r.get("blocked_thread")
    if isinstance(other, dict) and other.get("api"):
        where = ", ".join(x for x in (other.get("op"), other.get("range")) if x)
        lines.append(
            _short(f"meanwhile CPU {other.get('tid')} blocked in {other['api']}" + (f" ({where})" if where else ""), 60)
        )
    return "\n".join(lines)


# -- drawing ----------------------------------------------------------------------------------


def _figure(width_px: int, height_px: int, dpi: int):
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)


def png_bytes(fig, dpi: int) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _device_name(trace: Trace, devices: list[int]) -> str:
    names = {d.id: d.name for d in trace.meta.devices}
    if not devices:
        return "no GPU work in window"
    return ", ".join(f"GPU {d} {names[d]}" if d in names else f"GPU {d}" for d in devices[:2]) + (
        " …" if len(devices) > 2 else ""
    )


def render_timeline(
    trace: Trace,
    gaps: GapsResult | None = None,
    window: Window | None = None,
    width: int = 1600,
    height: int = 900,
    dpi: int = 100,
    labelled_gaps: int = LABELLED_GAPS,
) -> Picture:
    """The timeline of `window` (default: the slowest step) as a PNG."""
    from matplotlib.patches import Patch, Rectangle

    w = window or choose_window(trace)
    gaps = gaps if gaps is not None else analyse_gaps(trace)
    origin = trace.meta.origin_ns
    # Fixed margins in pixels, so the layout is the same whatever the content.
    left_px, right_px, top_px, bottom_px = 170, 20, 64, 118
    plot_w = max(width - left_px - right_px, 50)
    plot_h = max(height - top_px - bottom_px, 50)
    pad = (w.end_ns - w.start_ns) * 0.01
    lo_ns, hi_ns = w.start_ns - pad, w.end_ns + pad
    ns_per_px = (hi_ns - lo_ns) / plot_w

    gpu = _in_window(trace.gpu.filter(pl.col("device").is_not_null()), w).select(
        "device", "stream", "kind", "ts_ns", "end_ns"
    )
    cpu = cpu_events(trace, w, gaps.options.data_loading_pattern if gaps.options else DATA_LOADING_PATTERN)
    lanes = choose_lanes(trace, w, cpu, gpu)
    n = max(len(lanes), 1)
    index = {lane.key: lane.index for lane in lanes}

    fig = _figure(width, height, dpi)
    ax = fig.add_axes((left_px / width, bottom_px / height, plot_w / width, plot_h / height))
    to_ms = lambda px: (lo_ns + px * ns_per_px - origin) / 1e6  # noqa: E731
    xlim = (to_ms(0), to_ms(plot_w))
    ax.set_xlim(*xlim)
    ax.set_ylim(n, 0)

    # GPU lanes band; gaps shaded across it, under the bars.
    gpu_idx = [lane.index for lane in lanes if lane.key[0] == "gpu"]
    band = (min(gpu_idx), max(gpu_idx) + 1) if gpu_idx else None
    shown_devices = sorted({lane.key[1] for lane in lanes if lane.key[0] == "gpu"})
    gap_rows = pl.DataFrame()
    if band is not None and gaps.has_gpu_work and gaps.all_gaps.height:
        a_us, b_us = (w.start_ns - origin) / 1000, (w.end_ns - origin) / 1000
        min_us = max(2 * ns_per_px / 1000, 0.0)
        gap_rows = gaps.all_gaps.filter(
            pl.col("device").is_in(shown_devices)
            & (pl.col("start_us") < b_us)
            & (pl.col("start_us") + pl.col("duration_us") > a_us)
            & (pl.col("duration_us") >= min_us)
        ).sort("duration_us", descending=True)
        for r in gap_rows.select("start_us", "duration_us", "cause").iter_rows(named=True):
            ax.add_patch(
                Rectangle(
                    (r["start_us"] / 1000, band[0]),
                    r["duration_us"] / 1000,
                    band[1] - band[0],
                    facecolor=CAUSE_COLORS.get(r["cause"], "#7f7f7f"),
                    alpha=GAP_ALPHA,
                    linewidth=0,
                    zorder=1,
                )
            )

    # Bars, merged per pixel column. CPU kinds are drawn in order so sync and data loading
    # sit on top of the ops that contain them.
    draws: list[tuple[tuple, str, pl.DataFrame]] = []
    cpu_bars = merge_by_pixel(cpu, ["pid", "tid", "kind"], int(lo_ns), ns_per_px)
    gpu_bars = merge_by_pixel(gpu, ["device", "stream", "kind"], int(lo_ns), ns_per_px)
    for (pid, tid, kind), part in cpu_bars.partition_by(["pid", "tid", "kind"], as_dict=True).items():
        if ("cpu", pid, tid) in index:
            draws.append((("cpu", pid, tid), kind, part))
    for (dev, stream, kind), part in gpu_bars.partition_by(["device", "stream", "kind"], as_dict=True).items():
        if ("gpu", dev, stream) in index:
            draws.append((("gpu", dev, stream), kind, part))
    order = {"cpu_op": 0, "data_loading": 1, "sync": 2, "kernel": 0, "memset": 1, "memcpy": 2}
    kinds_drawn: set[str] = set()
    for key, kind, part in sorted(draws, key=lambda d: order[d[1]]):
        i = index[key]
        x0 = (part["px0"].cast(pl.Float64) * ns_per_px + lo_ns - origin) / 1e6
        wd = (part["px1"] - part["px0"]).cast(pl.Float64) * ns_per_px / 1e6
        ax.broken_barh(
            list(zip(x0.to_list(), wd.to_list())),
            (i + 0.1, 0.8),
            facecolors=KIND_COLORS[kind],
            linewidth=0,
            zorder=2 + order[kind],
        )
        kinds_drawn.add(kind)

    # Lane separators and labels.
    ax.set_yticks([lane.index + 0.5 for lane in lanes])
    ax.set_yticklabels([lane.label for lane in lanes], fontsize=9)
    ax.tick_params(axis="y", length=0)
    if band is not None and band[0] > 0:
        ax.axhline(band[0], color="black", linewidth=0.8, zorder=6)
    for lane in lanes:
        ax.axhline(lane.index, color="#e0e0e0", linewidth=0.5, zorder=0)

    # Step boundaries.
    steps = trace.steps.filter((pl.col("end_ns") >= lo_ns) & (pl.col("start_ns") <= hi_ns))
    bounds = sorted(set(steps["start_ns"].to_list()) | set(steps["end_ns"].to_list()))
    for b in bounds:
        if lo_ns <= b <= hi_ns:
            ax.axvline((b - origin) / 1e6, color="black", linestyle="--", linewidth=1.0, zorder=7)
    for r in steps.iter_rows(named=True):
        mid = (max(r["start_ns"], lo_ns) + min(r["end_ns"], hi_ns)) / 2
        ax.text(
            (mid - origin) / 1e6,
            1.003,
            f"step {r['step']}  ({(r['end_ns'] - r['start_ns']) / 1e6:,.1f} ms)",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            clip_on=False,
            color="black",
            zorder=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )

    # The largest gaps, labelled with cause, op and Python line.
    # Only gaps that matter at this zoom: at least 3% of the window (and always the largest).
    labelled = gap_rows
    if gap_rows.height:
        big = gap_rows.filter(pl.col("duration_us") >= 0.03 * (w.end_ns - w.start_ns) / 1000)
        labelled = (big if big.height else gap_rows).head(labelled_gaps)
    if band is not None and labelled.height:
        span_rows = band[1] - band[0]
        for k, r in enumerate(labelled.iter_rows(named=True)):
            mid_ms = (r["start_us"] + r["duration_us"] / 2) / 1000
            y = band[0] + span_rows * (0.12 + 0.22 * (k % 4))
            ax.annotate(
                _gap_label(r),
                xy=(mid_ms, y),
                ha="center",
                va="top",
                fontsize=8,
                zorder=9,
                bbox={
                    "facecolor": "white",
                    "edgecolor": CAUSE_COLORS.get(r["cause"], "#7f7f7f"),
                    "alpha": 0.92,
                    "boxstyle": "round,pad=0.3",
                },
            )

    # The longest blocking calls, named on their CPU lane.
    blk = _in_window(blocking_calls(trace), w).with_columns(_d=pl.col("end_ns") - pl.col("ts_ns"))
    blk = blk.filter(pl.col("_d") >= 0.05 * (w.end_ns - w.start_ns)).sort("_d", descending=True).head(3)
    for r in blk.iter_rows(named=True):
        key = ("cpu", r["pid"], r["tid"])
        if key in index:
            a_ns, b_ns = max(r["ts_ns"], lo_ns), min(r["end_ns"], hi_ns)
            ax.text(
                ((a_ns + b_ns) / 2 - origin) / 1e6,
                index[key] + 0.5,
                f"{r['name']} {r['_d'] / 1e6:,.1f} ms",
                ha="center",
                va="center",
                fontsize=8,
                color="white",
                weight="bold",
                zorder=9,
                clip_on=True,
            )

    ax.set_xlabel("time from trace start (ms)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#f0f0f0", zorder=0)

    # Title: file, device, window, and the headline of the window.
    busy_line = ""
    if band is not None and gaps.has_gpu_work:
        a_us, b_us = (w.start_ns - origin) / 1000, (w.end_ns - origin) / 1000
        in_w = gaps.all_gaps.filter(
            pl.col("device").is_in(shown_devices) & (pl.col("start_us") >= a_us - 1e-6) & (pl.col("start_us") < b_us)
        )
        idle_ms = in_w["duration_us"].sum() / 1000 / max(len(shown_devices), 1)
        win_ms = (w.end_ns - w.start_ns) / 1e6
        by = in_w.group_by("cause").agg(pl.col("duration_us").sum()).sort("duration_us", descending=True)
        top = (
            f", mostly {by['cause'][0]} ({by['duration_us'][0] / max(in_w['duration_us'].sum(), 1e-9):.0%})"
            if by.height
            else ""
        )
        busy_line = f"GPU idle {idle_ms:,.1f} of {win_ms:,.1f} ms ({idle_ms / win_ms:.0%}){top}"
    title = f"{os.path.basename(trace.path)}  —  {_device_name(trace, shown_devices)}  —  {w.label}"
    fig.text(0.5, 1 - 12 / height, _short(title, 160), ha="center", va="top", fontsize=12, weight="bold")
    if busy_line:
        fig.text(0.5, 1 - 34 / height, busy_line, ha="center", va="top", fontsize=10)

    # Legend under the axis: what each colour means.
    handles = [Patch(facecolor=KIND_COLORS[k], label=KIND_LABELS[k]) for k in KIND_COLORS if k in kinds_drawn]
    causes = gap_rows["cause"].unique().to_list() if gap_rows.height else []
    handles += [
        Patch(facecolor=CAUSE_COLORS[c], alpha=GAP_ALPHA + 0.15, label=f"GPU idle: {c}")
        for c in CAUSE_COLORS
        if c in causes
    ]
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(len(handles), 6),
            fontsize=9,
            frameon=False,
            bbox_to_anchor=(0.5, 4 / height),
        )

    png = png_bytes(fig, dpi)
    band_px = None
    if band is not None:
        band_px = (top_px + band[0] / n * plot_h, top_px + band[1] / n * plot_h)
    layout = Layout(width, height, (left_px, top_px, left_px + plot_w, top_px + plot_h), xlim, tuple(lanes), band_px)
    return Picture(png, layout, w, {"gaps_shaded": gap_rows.height, "bars": cpu_bars.height + gpu_bars.height})
