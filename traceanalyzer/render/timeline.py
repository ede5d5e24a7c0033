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

import os

import polars as pl

from traceanalyzer.render.figures import figure_bytes, new_figure, png_bytes  # noqa: F401 - re-exported
from traceanalyzer.render.pixels import idle_pixels, shade_idle, without_idle
from traceanalyzer.render.timeline_layout import (  # noqa: F401 - re-exported for the pictures' users
    BOTTOM_PX,
    CAUSE_COLORS,
    FALLBACK_COLORS,
    GAP_ALPHA,
    KIND_COLORS,
    KIND_LABELS,
    LABELLED_GAPS,
    LEFT_PX,
    MAX_CPU_LANES,
    MAX_GPU_LANES,
    RUN_JOIN_PX,
    TOP_PX,
    Lane,
    Layout,
    Picture,
    TimeAxis,
    TimelineInputs,
    Window,
    cause_color,
    cause_order,
    choose_lanes,
    choose_window,
    gap_label,
    in_window,
    place_labels,
    short_text,
    window_idle,
)
from traceanalyzer.render.timeline_path import PATH_COLOR, PATH_LABEL, draw_path
from traceanalyzer.trace import Trace
from traceanalyzer.units import point_ms, point_us


def _device_name(trace: Trace, devices: list[int]) -> str:
    names = {d.id: d.name for d in trace.meta.devices}
    if not devices:
        return "no GPU work in window"
    return ", ".join(f"GPU {d} {names[d]}" if d in names else f"GPU {d}" for d in devices[:2]) + (
        " …" if len(devices) > 2 else ""
    )


CHAR_PX = 6.2  # average width of a character of the 8-point label font at 100 dpi
LINE_PX = 11.5  # height of one label line at 100 dpi
LABEL_ROWS = 2


def _gap_labels(gap_rows: pl.DataFrame, w: Window, origin: int, labelled_gaps: int) -> pl.DataFrame:
    """The gaps worth a label at this zoom: the visible part at least 3% of the window (and
    always the largest), largest first, with the visible start/duration."""
    if gap_rows.is_empty():
        return gap_rows
    a_us, b_us = point_us(w.start_ns, origin), point_us(w.end_ns, origin)
    vis = window_idle(
        gap_rows.rename({"start_us": "_s", "duration_us": "_d"}).with_columns(
            start_us=pl.col("_s"), duration_us=pl.col("_d")
        ),
        a_us,
        b_us,
    ).sort("duration_us", descending=True)
    big = vis.filter(pl.col("duration_us") >= 0.03 * (b_us - a_us))
    return (big if big.height else vis).head(labelled_gaps)


def _label_text(r: dict) -> str:
    """The gap's label; a gap cut by the window says how long it is in view and in all."""
    full = dict(r, duration_us=r["_d"])
    text = gap_label(full)
    if r["duration_us"] < r["_d"] - 0.5:
        first, _, rest = text.partition("\n")
        v = r["duration_us"]
        shown = f"{v / 1000:,.1f} ms" if v >= 1000 else f"{v:,.0f} µs"
        text = f"{first} ({shown} in view)" + ("\n" + rest if rest else "")
    return text


def render_timeline(
    inputs: TimelineInputs,
    height: int = 900,
    dpi: int = 100,
    labelled_gaps: int = LABELLED_GAPS,
    fmt: str = "png",
) -> Picture:
    """The timeline of the prepared window (`inputs.window`, `inputs.axis.width` pixels wide) as
    png, svg or pdf bytes."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    trace, gaps, w, axis = inputs.trace, inputs.gaps, inputs.window, inputs.axis
    width = axis.width
    origin = trace.meta.origin_ns
    scale = dpi / 100
    a_us, b_us = point_us(w.start_ns, origin), point_us(w.end_ns, origin)

    lanes = choose_lanes(inputs)
    n = max(len(lanes), 1)
    index = {lane.key: lane.index for lane in lanes}
    gpu_idx = [lane.index for lane in lanes if lane.key[0] == "gpu"]
    band = (min(gpu_idx), max(gpu_idx) + 1) if gpu_idx else None
    shown_devices = sorted({lane.key[1] for lane in lanes if lane.key[0] == "gpu"})

    # Fixed margins in pixels; above the lanes, a strip for the gap labels (so no label
    # covers a bar) and a line for the step names.
    left_px, top_px, bottom_px = LEFT_PX, TOP_PX, BOTTOM_PX
    plot_w, lo_ns, hi_ns, ns_per_px = axis.plot_w, axis.lo_ns, axis.hi_ns, axis.ns_per_px

    gap_rows = pl.DataFrame()
    if band is not None and gaps.has_gpu_work and gaps.all_gaps.height:
        min_us = max(2 * ns_per_px / 1000, 0.0)
        gap_rows = gaps.all_gaps.filter(
            pl.col("device").is_in(shown_devices)
            & (pl.col("start_us") < b_us)
            & (pl.col("start_us") + pl.col("duration_us") > a_us)
            & (pl.col("duration_us") >= min_us)
        ).sort("duration_us", descending=True)
    labelled = _gap_labels(gap_rows, w, origin, labelled_gaps) if band is not None else pl.DataFrame()
    texts = [_label_text(r) for r in labelled.iter_rows(named=True)]
    lines = max((t.count("\n") + 1 for t in texts), default=0)
    row_px = (lines * LINE_PX + 12) * scale
    strip_px = LABEL_ROWS * row_px if texts else 0
    step_px = 18 * scale
    plot_h = max(height - top_px - bottom_px - strip_px - step_px, 50)

    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((left_px / width, bottom_px / height, plot_w / width, plot_h / height))
    to_ms = lambda px: point_ms(lo_ns + px * ns_per_px, origin)  # noqa: E731
    xlim = (to_ms(0), to_ms(plot_w))
    ax.set_xlim(*xlim)
    ax.set_ylim(n, 0)

    for r in gap_rows.iter_rows(named=True):
        ax.add_patch(
            Rectangle(
                (r["start_us"] / 1000, band[0]),
                r["duration_us"] / 1000,
                band[1] - band[0],
                facecolor=cause_color(r["cause"]),
                alpha=GAP_ALPHA,
                linewidth=0,
                zorder=1,
            )
        )

    # Bars, merged per pixel column. Memsets go beneath kernels (short and many, they would
    # otherwise paint a busy lane purple); sync and data loading sit on the ops around them.
    draws: list[tuple[tuple, str, pl.DataFrame]] = []
    cpu_bars, gpu_bars = inputs.cpu_bars, inputs.gpu_bars
    # Where the GPU was idle most of a pixel, idle shows (the subtitle's share) and bars give way.
    idle_px = pl.DataFrame()
    if band is not None and gaps.has_gpu_work and gaps.all_gaps_ns.height:
        shown = pl.col("device").is_in(shown_devices)
        idle_px = idle_pixels(gaps.all_gaps_ns.filter(shown), lo_ns, ns_per_px, int(plot_w))
        gpu_bars = without_idle(gpu_bars, idle_px, ["device", "stream", "kind"])
        drawn_ns = gaps.all_gaps_ns.filter(shown & (pl.col("duration_ns") >= 2 * ns_per_px))  # as gap_rows
        shade_idle(ax, idle_px, drawn_ns, band, lo_ns, ns_per_px, origin)
    for (pid, tid, kind), part in cpu_bars.partition_by(["pid", "tid", "kind"], as_dict=True).items():
        if ("cpu", pid, tid) in index:
            draws.append((("cpu", pid, tid), kind, part))
    for (dev, stream, kind), part in gpu_bars.partition_by(["device", "stream", "kind"], as_dict=True).items():
        if ("gpu", dev, stream) in index:
            draws.append((("gpu", dev, stream), kind, part))
    order = {"cpu_op": 0, "data_loading": 1, "sync": 2, "memset": 0, "kernel": 1, "memcpy": 2}
    kinds_drawn: set[str] = set()
    for key, kind, part in sorted(draws, key=lambda d: order[d[1]]):
        i = index[key]
        x0 = point_ms(part["px0"].cast(pl.Float64) * ns_per_px + lo_ns, origin)
        wd = (part["px1"] - part["px0"]).cast(pl.Float64) * ns_per_px / 1e6
        ax.broken_barh(
            list(zip(x0.to_list(), wd.to_list())),
            (i + 0.1, 0.8),
            facecolors=KIND_COLORS[kind],
            linewidth=0,
            zorder=2 + order[kind],
        )
        kinds_drawn.add(kind)

    ax.set_yticks([lane.index + 0.5 for lane in lanes])
    ax.set_yticklabels([lane.label for lane in lanes], fontsize=9)
    ax.tick_params(axis="y", length=0)
    if band is not None and band[0] > 0:
        ax.axhline(band[0], color="black", linewidth=0.8, zorder=6)
    for lane in lanes:
        ax.axhline(lane.index, color="#e0e0e0", linewidth=0.5, zorder=0)

    _draw_steps(ax, trace, lo_ns, hi_ns, origin)
    path_vertices = draw_path(ax, inputs.path, index, w.start_ns, w.end_ns, origin)
    _draw_blocking(ax, inputs, index, origin, scale)

    # Gap labels in the strip above the lanes, each with a line down to its gap.
    if texts:
        lab = fig.add_axes(
            ((left_px) / width, (bottom_px + plot_h + step_px) / height, plot_w / width, strip_px / height)
        )
        lab.set_xlim(*xlim)
        lab.set_ylim(0, LABEL_ROWS)
        lab.axis("off")
        ms_per_px = ns_per_px / 1e6
        spans = [
            (
                (r["start_us"] + r["duration_us"] / 2) / 1000,
                (max(len(x) for x in t.split("\n")) * CHAR_PX * scale + 14) * ms_per_px,
            )
            for r, t in zip(labelled.iter_rows(named=True), texts)
        ]
        for r, t, spot in zip(labelled.iter_rows(named=True), texts, place_labels(spans, *xlim, LABEL_ROWS)):
            if spot is None:
                continue
            centre, row = spot
            color = cause_color(r["cause"])
            lab.text(
                centre,
                row + 0.06,
                t,
                ha="center",
                va="bottom",
                fontsize=8,
                zorder=9,
                clip_on=False,
                bbox={"facecolor": "white", "edgecolor": color, "alpha": 0.95, "boxstyle": "round,pad=0.3"},
            )
            mid = (r["start_us"] + r["duration_us"] / 2) / 1000
            ax.annotate(
                "",
                xy=(mid, band[0]),
                xycoords=ax.transData,
                xytext=(centre, row + 0.06),
                textcoords=lab.transData,
                annotation_clip=False,
                arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.9, "linestyle": ":"},
            )

    ax.set_xlabel("time from trace start (ms)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#f0f0f0", zorder=0)

    # Title: file, device, window; under it what the window holds (the gaps' visible parts).
    busy_line = ""
    if band is not None and gaps.has_gpu_work:
        seen = pl.DataFrame(schema={"cause": pl.String, "duration_us": pl.Float64})
        if gaps.all_gaps.height:
            seen = window_idle(gaps.all_gaps.filter(pl.col("device").is_in(shown_devices)), a_us, b_us)
        total_us = seen["duration_us"].sum() if seen.height else 0.0
        idle_ms = total_us / 1000 / max(len(shown_devices), 1)
        win_ms = (w.end_ns - w.start_ns) / 1e6
        by = seen.group_by("cause").agg(pl.col("duration_us").sum()).sort("duration_us", descending=True)
        top = (
            f", mostly {by['cause'][0]} ({by['duration_us'][0] / 1000:,.1f} ms, "
            f"{by['duration_us'][0] / max(total_us, 1e-9):.0%})"
            if by.height
            else ""
        )
        busy_line = f"GPU idle {idle_ms:,.1f} of {win_ms:,.1f} ms ({idle_ms / win_ms:.0%}){top}"
    title = f"{os.path.basename(trace.path)}  —  {_device_name(trace, shown_devices)}  —  {w.label}"
    fig.text(0.5, 1 - 12 / height, short_text(title, 160), ha="center", va="top", fontsize=12, weight="bold")
    if busy_line:
        fig.text(0.5, 1 - 34 / height, busy_line, ha="center", va="top", fontsize=10)

    handles = [Patch(facecolor=KIND_COLORS[k], label=KIND_LABELS[k]) for k in KIND_COLORS if k in kinds_drawn]
    shaded = set(gap_rows["cause"].to_list()) if gap_rows.height else set()
    shaded |= set(idle_px["cause"].to_list()) if idle_px.height else set()
    causes = cause_order(sorted(shaded))
    handles += [Patch(facecolor=cause_color(c), alpha=GAP_ALPHA + 0.15, label=f"GPU idle: {c}") for c in causes]
    if path_vertices:
        handles.append(Line2D([0], [0], color=PATH_COLOR, linewidth=2, label=PATH_LABEL))
    if handles:
        fig.legend(
            handles=handles,
            loc="lower center",
            ncol=min(len(handles), 6),
            fontsize=9,
            frameon=False,
            bbox_to_anchor=(0.5, 4 / height),
        )

    data = figure_bytes(fig, dpi, fmt)
    axes_top = height - bottom_px - plot_h
    band_px = None
    if band is not None:
        band_px = (axes_top + band[0] / n * plot_h, axes_top + band[1] / n * plot_h)
    layout = Layout(
        width, height, (left_px, axes_top, left_px + plot_w, axes_top + plot_h), xlim, tuple(lanes), band_px
    )
    extras = {
        "gaps_shaded": gap_rows.height,
        "bars": cpu_bars.height + gpu_bars.height,
        "subtitle": busy_line,
        "labels": texts,
        "path_vertices": path_vertices,
    }
    return Picture(data, layout, w, extras, fmt)


def _draw_steps(ax, trace: Trace, lo_ns: float, hi_ns: float, origin: int) -> None:
    """Step boundaries as dashed lines, each step named above the lanes."""
    steps = trace.steps.filter((pl.col("end_ns") >= lo_ns) & (pl.col("start_ns") <= hi_ns))
    bounds = sorted(set(steps["start_ns"].to_list()) | set(steps["end_ns"].to_list()))
    for b in bounds:
        if lo_ns <= b <= hi_ns:
            ax.axvline(point_ms(b, origin), color="black", linestyle="--", linewidth=1.0, zorder=7)
    ns_per_px = (hi_ns - lo_ns) / max(ax.get_window_extent().width, 1)
    for r in steps.iter_rows(named=True):
        a, b = max(r["start_ns"], lo_ns), min(r["end_ns"], hi_ns)
        text = f"step {r['step']}  ({(r['end_ns'] - r['start_ns']) / 1e6:,.1f} ms)"
        if (b - a) / ns_per_px < len(text) * CHAR_PX + 8:  # a sliver of a step: its line is enough
            text = f"step {r['step']}"
            if (b - a) / ns_per_px < len(text) * CHAR_PX + 8:
                continue
        ax.text(
            point_ms((a + b) / 2, origin),
            1.003,
            text,
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=8,
            clip_on=False,
            color="black",
            zorder=8,
        )


def _draw_blocking(ax, inputs: TimelineInputs, index: dict, origin: int, scale: float) -> None:
    """The longest runs of blocking calls, named on their CPU lane: back-to-back calls of the
    same API are one run (`cudaEventSynchronize ×11`, `inputs.call_runs`), and a name is written
    only where it fits inside its bar."""
    w, lo_ns, hi_ns, ns_per_px = inputs.window, inputs.axis.lo_ns, inputs.axis.hi_ns, inputs.axis.ns_per_px
    if inputs.call_runs.is_empty():
        return
    runs = inputs.call_runs.with_columns(_d=pl.col("end_ns") - pl.col("ts_ns"))
    runs = runs.filter(pl.col("_d") >= 0.05 * (w.end_ns - w.start_ns)).sort("_d", descending=True).head(6)
    for r in runs.iter_rows(named=True):
        key = ("cpu", r["pid"], r["tid"])
        if key not in index:
            continue
        a_ns, b_ns = max(r["ts_ns"], lo_ns), min(r["end_ns"], hi_ns)
        times = f" ×{r['calls']}" if r["calls"] > 1 else ""
        text = f"{r['name']}{times} {r['_d'] / 1e6:,.1f} ms"
        if len(text) * CHAR_PX * scale + 8 > (b_ns - a_ns) / ns_per_px:
            text = f"{r['name']}{times}"
            if len(text) * CHAR_PX * scale + 8 > (b_ns - a_ns) / ns_per_px:
                continue
        ax.text(
            point_ms((a_ns + b_ns) / 2, origin),
            index[key] + 0.5,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="white",
            weight="bold",
            zorder=9,
            clip_on=True,
        )
