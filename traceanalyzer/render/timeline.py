"""A timeline picture of one window of a trace, readable by someone who did not run the tool.

Lanes, top to bottom: the CPU threads that matter (the main thread first), then one lane per
GPU stream. CPU lanes show top-level ops (grey), data-loading ranges (orange) and
synchronising calls (red); GPU lanes show kernels, memcpys and memsets by colour. GPU idle
gaps are shaded across the GPU lanes in the colour of their cause, the largest are labelled
with the op and Python line that caused them, and step boundaries are dashed lines.

What is drawn is prepared in `timeline_layout`; matplotlib is imported here only, lazily, with
the Agg backend.
"""

from __future__ import annotations

import io
import os

import polars as pl

from traceanalyzer.render.timeline_layout import (  # noqa: F401 - re-exported for the pictures' users
    CAUSE_COLORS,
    GAP_ALPHA,
    KIND_COLORS,
    KIND_LABELS,
    LABELLED_GAPS,
    MAX_CPU_LANES,
    MAX_GPU_LANES,
    Lane,
    Layout,
    Picture,
    TimelineInputs,
    Window,
    choose_lanes,
    choose_window,
    cpu_events,
    gap_label,
    in_window,
    merge_by_pixel,
    short_text,
)
from traceanalyzer.trace import Trace


def new_figure(width_px: int, height_px: int, dpi: int):
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
    inputs: TimelineInputs,
    window: Window | None = None,
    width: int = 1600,
    height: int = 900,
    dpi: int = 100,
    labelled_gaps: int = LABELLED_GAPS,
) -> Picture:
    """The timeline of `window` (default: the slowest step) as a PNG."""
    from matplotlib.patches import Patch, Rectangle

    trace, gaps = inputs.trace, inputs.gaps
    w = window or choose_window(trace)
    origin = trace.meta.origin_ns
    # Fixed margins in pixels, so the layout is the same whatever the content.
    left_px, right_px, top_px, bottom_px = 170, 20, 64, 118
    plot_w = max(width - left_px - right_px, 50)
    plot_h = max(height - top_px - bottom_px, 50)
    pad = (w.end_ns - w.start_ns) * 0.01
    lo_ns, hi_ns = w.start_ns - pad, w.end_ns + pad
    ns_per_px = (hi_ns - lo_ns) / plot_w

    gpu = in_window(trace.gpu.filter(pl.col("device").is_not_null()), w).select(
        "device", "stream", "kind", "ts_ns", "end_ns"
    )
    cpu = cpu_events(inputs, w)
    lanes = choose_lanes(inputs, w, cpu, gpu)
    n = max(len(lanes), 1)
    index = {lane.key: lane.index for lane in lanes}

    fig = new_figure(width, height, dpi)
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
                gap_label(r),
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
    blk = in_window(inputs.blocking, w).with_columns(_d=pl.col("end_ns") - pl.col("ts_ns"))
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
    fig.text(0.5, 1 - 12 / height, short_text(title, 160), ha="center", va="top", fontsize=12, weight="bold")
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
