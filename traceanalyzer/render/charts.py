"""Charts for incident reports, each a PNG (bytes) or None when the trace cannot show it:

- `stage_bars`: one stacked bar per step, the step's time by stage (analyses.stages);
- `gap_histogram`: idle-gap durations on log bins, stacked by cause;
- `copy_bandwidth`: achieved bandwidth against size, one point per copy, by direction;
- `memory_timeline`: allocated and reserved memory per device, the peak marked. 2021 traces
  carry only each event's size: their curve is the running sum from the trace start.

matplotlib (Agg) is imported lazily inside each function.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Protocol

import polars as pl

from traceanalyzer.render.figures import new_figure, png_bytes
from traceanalyzer.render.timeline import cause_color, cause_order
from traceanalyzer.trace import Trace
from traceanalyzer.units import point_ms
from traceanalyzer.wording import plural


# What each chart reads of a result, as the results hand it (`StagesResult`, `GapsResult`,
# `CopiesResult`, `MemoryResult` fit these): a renderer is handed results, it imports no analysis.
class StageTimes(Protocol):
    """Time per step and stage (`analyses.stages.StagesResult`)."""

    times: pl.DataFrame  # step, stage, time_us
    stages: Sequence[str]  # the stage order
    view: str


class IdleGaps(Protocol):
    """Every idle gap with its cause (`analyses.gaps.GapsResult`)."""

    has_gpu_work: bool
    all_gaps: pl.DataFrame  # duration_us, cause, ...


class Copies(Protocol):
    """Every copy (`analyses.copies.CopiesResult`)."""

    copies: pl.DataFrame  # kind, direction, host_memory, bytes, duration_us, gbps


class MemoryCurves(Protocol):
    """Memory over time per device (`analyses.memory.MemoryResult`)."""

    has_memory: bool
    has_totals: bool
    timeline: pl.DataFrame  # device, t_us, allocated / reserved
    devices: pl.DataFrame  # device, peak


STAGE_COLORS = {
    "data_loading": "#ff7f0e",
    "h2d": "#2ca02c",
    "forward": "#1f5fbf",
    "backward": "#6baed6",
    "optimizer": "#17becf",
    "d2h": "#98df8a",
    "sync_wait": "#d62728",
    "other_cpu": "#a0a0a0",
    "other_gpu": "#9467bd",
    "gpu_idle": "#e0e0e0",
    "Kernel": "#1f5fbf",
    "Memcpy": "#2ca02c",
    "Memset": "#9467bd",
    "Runtime": "#17becf",
    "DataLoader": "#ff7f0e",
    "CPU Exec": "#a0a0a0",
    "Other": "#e0e0e0",
}
DIRECTION_COLORS = {"HtoD": "#2ca02c", "DtoH": "#d62728", "DtoD": "#1f5fbf", "PtoP": "#9467bd"}
MIB = 1024 * 1024
HOST_MARKERS = {"pinned": "o", "pageable": "x"}
# Theoretical peaks (GB/s, one direction) of a device's links, by a part of its name: host link
# (PCIe generation x16), device memory, NVLink. None: not known or not applicable.
LINKS: tuple[tuple[str, str | None, float | None, float | None, float | None], ...] = (
    ("GB10", None, None, 273.0, None),  # unified LPDDR5x, no PCIe between host and GPU memory
    ("B200", "PCIe 5.0 x16", 63.0, 8000.0, 900.0),
    ("H200", "PCIe 5.0 x16", 63.0, 4800.0, 450.0),
    ("H100 PCIe", "PCIe 5.0 x16", 63.0, 2000.0, 300.0),
    ("H100", "PCIe 5.0 x16", 63.0, 3350.0, 450.0),
    ("A100-SXM4-80GB", "PCIe 4.0 x16", 31.5, 2039.0, 300.0),
    ("A100", "PCIe 4.0 x16", 31.5, 1555.0, 300.0),
    ("V100", "PCIe 3.0 x16", 15.75, 900.0, 150.0),
    ("MI300", "PCIe 5.0 x16", 63.0, 5300.0, None),
    ("MI250", "PCIe 4.0 x16", 31.5, 1638.0, None),  # per GCD
)


def _title(trace: Trace, what: str) -> str:
    return f"{what} — {os.path.basename(trace.path)}"


def _extra_colors(names: list[str]) -> dict[str, str]:
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return {n: STAGE_COLORS.get(n, matplotlib.colors.to_hex(cmap(i % 20))) for i, n in enumerate(names)}


def stage_times(stages: StageTimes) -> tuple[pl.DataFrame, tuple[str, ...], str]:
    """step, stage, time_us (long form), the stage order, and the view they come from."""
    r = stages
    return r.times.select("step", "stage", "time_us"), tuple(r.stages), f"{r.view} view"


def _thousands():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 100 or v == int(v) else f"{v:,.1f}")


MIN_SLOTS = 6  # a chart of 1 step keeps the width of 6, so its bar is a bar, not a wall


def stage_bars(
    stages: StageTimes,
    trace: Trace,
    width: int = 1000,
    height: int = 500,
    dpi: int = 100,
    hide: tuple[str, ...] = (),
) -> bytes | None:
    """One stacked bar per step: the step's time by stage. One step draws a bar of ordinary
    width; a step too short to see at this scale is named with its length above its slot; with
    many steps, only some are numbered."""
    df, order, source = stage_times(stages)
    df = df.with_columns(pl.col("step").cast(pl.Int64))
    wide = (
        df.group_by("step", "stage")
        .agg(pl.col("time_us").sum())
        .pivot(on="stage", index="step", values="time_us")
        .sort("step", nulls_last=True)
    )
    present = [s for s in order if s in wide.columns and s not in hide and (wide[s].fill_null(0) > 0).any()]
    if not present:
        return None
    totals = wide.select(pl.sum_horizontal([pl.col(s).fill_null(0) for s in present]))
    top_us = float(totals.to_series().max() or 0)
    unit, div = ("ms", 1000.0) if top_us >= 1000 else ("µs", 1.0)
    colors = _extra_colors(present)
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.14, 0.66, 0.76))
    labels = ["all" if s is None else str(s) for s in wide["step"].to_list()] or ["all"]
    xs = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    for stage in present:
        vals = [v / div for v in wide[stage].fill_null(0.0).to_list()]
        ax.bar(xs, vals, 0.7, bottom=bottom, color=colors[stage], label=stage, edgecolor="white", linewidth=0.3)
        if len(xs) <= 6:  # few bars: each big segment says its time (beside the bar: its stage too)
            beside = len(xs) == 1
            for x, b, v in zip(xs, bottom, vals):
                if v >= 0.05 * top_us / div:
                    ax.text(
                        x + 0.38 if beside else x,
                        b + v / 2,
                        f"{stage} {v:,.3g} {unit}" if beside else f"{v:,.3g}",
                        ha="left" if beside else "center",
                        va="center",
                        fontsize=8,
                        color="black" if beside or stage in ("gpu_idle", "Other", "d2h") else "white",
                    )
        bottom = [b + v for b, v in zip(bottom, vals)]
    slots = max(len(xs), MIN_SLOTS)
    pad = (slots - len(xs)) / 2
    ax.set_xlim(-0.6 - pad, len(xs) - 0.4 + pad)
    every = max(1, math.ceil(len(xs) / 25))
    ax.set_xticks(xs[::every], labels[::every], fontsize=8, rotation=0 if len(xs) <= 25 else 45)
    tiny = top_us / div * 0.01
    for x, total in zip(xs, bottom):
        if total < tiny:  # invisible at this scale: say how long it was
            us = total * div
            ax.annotate(
                f"{us:,.0f} µs" if us < 1000 else f"{us / 1000:,.2f} ms",
                (x, total),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                rotation=90,
            )
    ax.set_xlabel("step" if len(labels) > 1 or labels != ["all"] else "the whole trace (no ProfilerStep)")
    ax.set_ylabel(f"time ({unit})")
    ax.yaxis.set_major_formatter(_thousands())
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    n = len(labels)
    fig.suptitle(_title(trace, f"Step time by stage ({source}, {plural(n, 'step')})"), fontsize=11)
    return png_bytes(fig, dpi)


def gap_histogram(gaps: IdleGaps, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100) -> bytes | None:
    """Idle-gap durations on log bins, stacked by cause: how many, and how much idle time."""
    if not gaps.has_gpu_work or gaps.all_gaps.is_empty():
        return None
    g = gaps.all_gaps.filter(pl.col("duration_us") > 0)
    lo, hi = max(g["duration_us"].min(), 0.1), max(g["duration_us"].max(), 1.0)
    n_bins = 40
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    b = b if b > a else a + 1
    edges = [10 ** (a + (b - a) * i / n_bins) for i in range(n_bins + 1)]
    causes = cause_order(g["cause"].unique().to_list())
    fig = new_figure(width, height, dpi)
    values = [g.filter(pl.col("cause") == c)["duration_us"].to_list() for c in causes]
    colors = [cause_color(c) for c in causes]
    # Left: how many gaps; right: how much idle time they add up to (long gaps are few but
    # usually hold most of the idle time).
    ax1 = fig.add_axes((0.07, 0.14, 0.3, 0.74))
    ax2 = fig.add_axes((0.44, 0.14, 0.3, 0.74))
    ax1.hist(values, bins=edges, stacked=True, color=colors)
    ax2.hist(
        values,
        bins=edges,
        stacked=True,
        color=colors,
        weights=[[v / 1000 for v in vs] for vs in values],
        label=[
            f"{c}: {len(vs):,} gap{'' if len(vs) == 1 else 's'}, {sum(vs) / 1000:,.1f} ms"
            for c, vs in zip(causes, values)
        ],
    )
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("gap duration (µs, log scale)")
    ax1.set_ylabel("number of gaps")
    ax2.set_ylabel("idle time in these gaps (ms)")
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.suptitle(_title(trace, "GPU idle gaps by duration and cause"), fontsize=11)
    return png_bytes(fig, dpi)


def copy_rows(copies: Copies) -> pl.DataFrame:
    """direction, host_memory, bytes, duration_us, gbps for every memcpy (as analyses.copies
    reads them)."""
    c = copies.copies
    host = pl.col("host_memory") if "host_memory" in c.columns else pl.lit(None, pl.String)
    return c.filter(pl.col("kind") == "memcpy").select(
        "direction", host.alias("host_memory"), "bytes", "duration_us", "gbps"
    )


def device_links(trace: Trace) -> tuple[str | None, float | None, float | None, float | None]:
    """(host link name, its GB/s, memory GB/s, NVLink GB/s) of the trace's first named device."""
    for d in trace.meta.devices:
        for key, link, pcie, hbm, nvlink in LINKS:
            if key.lower() in (d.name or "").lower():
                return link, pcie, hbm, nvlink
    return None, None, None, None


def copy_bandwidth(copies: Copies, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100) -> bytes | None:
    """Achieved bandwidth against size, one point per memcpy: colour by direction, marker by
    host memory (pinned o, pageable x); dashed lines at the device's link peaks."""
    c = copy_rows(copies).filter((pl.col("bytes") > 0) & pl.col("gbps").is_not_null() & (pl.col("gbps") > 0))
    if c.is_empty():
        return None
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.14, 0.64, 0.76))
    groups = c.group_by("direction", "host_memory").len().sort("direction", "host_memory", nulls_last=True)
    for d, host, count in groups.iter_rows():
        part = c.filter((pl.col("direction") == d) & pl.col("host_memory").eq_missing(host))
        ax.scatter(
            part["bytes"].to_list(),
            part["gbps"].to_list(),
            s=14,
            alpha=0.7,
            marker=HOST_MARKERS.get(host or "", "o" if d in ("DtoD", "PtoP") else "s"),
            color=DIRECTION_COLORS.get(d, "#7f7f7f"),
            label=f"{d}{', ' + host if host else ''} ({count:,} {'copy' if count == 1 else 'copies'})",
        )
    link, pcie, hbm, nvlink = device_links(trace)
    dirs = set(c["direction"].to_list())
    refs = []
    if pcie and dirs & {"HtoD", "DtoH"}:
        refs.append((pcie, f"{link} peak {pcie:g} GB/s"))
    if hbm and "DtoD" in dirs:
        above = c.filter((pl.col("direction") == "DtoD") & (pl.col("gbps") > hbm)).height
        refs.append(
            (hbm, f"device memory peak {hbm:,.0f} GB/s" + (" (copies above it stayed in cache)" if above else ""))
        )
    if nvlink and "PtoP" in dirs:
        refs.append((nvlink, f"NVLink peak {nvlink:g} GB/s"))
    top = max(c["gbps"].max(), *(r[0] for r in refs)) if refs else c["gbps"].max()
    for gbps, text in refs:
        ax.axhline(gbps, color="#555555", linestyle="--", linewidth=0.9)
        ax.annotate(
            text,
            (0.01, gbps),
            xycoords=("axes fraction", "data"),
            xytext=(0, 3),
            textcoords="offset points",
            fontsize=8,
            color="#333333",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(top=top * 2.5)
    ax.set_xlabel("copy size (bytes, log scale)")
    ax.set_ylabel("achieved bandwidth (GB/s, log scale)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.suptitle(_title(trace, "Copy bandwidth against size"), fontsize=11)
    return png_bytes(fig, dpi)


def memory_timeline(
    memory: MemoryCurves, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100
) -> bytes | None:
    """Allocated and reserved memory per device over time (the memory analysis' timeline), the
    peak marked; step starts dotted."""
    if not memory.has_memory or memory.timeline.is_empty():
        return None
    s = memory.timeline.with_columns(t_ms=pl.col("t_us") / 1000.0)
    has_totals = memory.has_totals
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.09, 0.26, 0.88, 0.64))
    devices = sorted(s["device"].unique().to_list())
    # The GPU's memory is the story; host memory only when there is nothing else.
    cuda_first = [d for d in devices if d.startswith("cuda")] or devices
    palette = ["#1f5fbf", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
    for i, d in enumerate(cuda_first):
        part = s.filter(pl.col("device") == d)
        col = palette[i % len(palette)]
        label = "allocated" if has_totals else "allocated since trace start (running sum of [memory] Bytes)"
        # Steps, not slopes: memory changes at events and holds between them.
        ax.plot(
            part["t_ms"].to_list(),
            part["allocated_mb"].to_list(),
            color=col,
            linewidth=1.2,
            drawstyle="steps-post",
            label=f"{d} {label}",
        )
        if part["reserved_mb"].drop_nulls().len():
            ax.plot(
                part["t_ms"].to_list(),
                part["reserved_mb"].to_list(),
                color=col,
                linewidth=1.0,
                linestyle="--",
                drawstyle="steps-post",
                label=f"{d} reserved",
            )
        peak = memory.devices.filter(pl.col("device") == d).row(0, named=True)
        peak_ms = peak["peak_at_us"] / 1000.0
        ax.plot([peak_ms], [peak["peak_allocated_mb"]], marker="v", color=col, markersize=8)
        ax.annotate(
            f"peak {peak['peak_allocated_mb']:,.0f} MiB",
            (peak_ms, peak["peak_allocated_mb"]),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
            color=col,
        )
    for b in trace.steps["start_ns"].to_list():
        ax.axvline(point_ms(b, trace.meta.origin_ns), color="#bbbbbb", linestyle=":", linewidth=0.8)
    ax.set_xlabel("time from trace start (ms)")
    ax.set_ylabel("memory (MiB)")
    ax.yaxis.set_major_formatter(_thousands())
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=8, frameon=False)
    fig.suptitle(_title(trace, "Device memory over time"), fontsize=11)
    return png_bytes(fig, dpi)
