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

import polars as pl

from traceanalyzer.analyses.copies import CopiesResult
from traceanalyzer.analyses.gaps import CAUSES, GapsResult
from traceanalyzer.analyses.memory import MemoryResult
from traceanalyzer.analyses.stages import StagesResult
from traceanalyzer.render.timeline import CAUSE_COLORS, new_figure, png_bytes
from traceanalyzer.trace import Trace

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
MB = 1024 * 1024


def _title(trace: Trace, what: str) -> str:
    return f"{what} — {os.path.basename(trace.path)}"


def _extra_colors(names: list[str]) -> dict[str, str]:
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    return {n: STAGE_COLORS.get(n, matplotlib.colors.to_hex(cmap(i % 20))) for i, n in enumerate(names)}


def stage_times(stages: StagesResult) -> tuple[pl.DataFrame, tuple[str, ...], str]:
    """step, stage, time_us (long form), the stage order, and the view they come from."""
    r = stages
    return r.times.select("step", "stage", "time_us"), tuple(r.stages), f"stages ({r.view} view)"


def stage_bars(
    stages: StagesResult, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100
) -> bytes | None:
    """One stacked bar per step: the step's time by stage."""
    df, order, source = stage_times(stages)
    df = df.with_columns(pl.col("step").cast(pl.Int64))
    # One row per step (null: a trace without steps), one column per stage, in ms.
    wide = (
        df.group_by("step", "stage")
        .agg(pl.col("time_us").sum() / 1000.0)
        .pivot(on="stage", index="step", values="time_us")
        .sort("step", nulls_last=True)
    )
    present = [s for s in order if s in wide.columns and (wide[s].fill_null(0) > 0).any()]
    colors = _extra_colors(present)
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.14, 0.66, 0.76))
    labels = ["all" if s is None else str(s) for s in wide["step"].to_list()] or ["all"]
    bottom = [0.0] * len(labels)
    for stage in present:
        vals = wide[stage].fill_null(0.0).to_list()
        ax.bar(labels, vals, bottom=bottom, color=colors[stage], label=stage, edgecolor="white", linewidth=0.5)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("step")
    ax.set_ylabel("time (ms)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.suptitle(_title(trace, f"Step time by stage ({source})"), fontsize=11)
    return png_bytes(fig, dpi)


def gap_histogram(gaps: GapsResult, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100) -> bytes | None:
    """Idle-gap durations on log bins, stacked by cause: how many, and how much idle time."""
    if not gaps.has_gpu_work or gaps.all_gaps.is_empty():
        return None
    g = gaps.all_gaps.filter(pl.col("duration_us") > 0)
    lo, hi = max(g["duration_us"].min(), 0.1), max(g["duration_us"].max(), 1.0)
    n_bins = 40
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    b = b if b > a else a + 1
    edges = [10 ** (a + (b - a) * i / n_bins) for i in range(n_bins + 1)]
    causes = [c for c in CAUSES if g.filter(pl.col("cause") == c).height]
    fig = new_figure(width, height, dpi)
    values = [g.filter(pl.col("cause") == c)["duration_us"].to_list() for c in causes]
    colors = [CAUSE_COLORS[c] for c in causes]
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
        label=[f"{c}: {len(vs):,} gaps, {sum(vs) / 1000:,.1f} ms" for c, vs in zip(causes, values)],
    )
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("gap duration (µs, log scale)")
    ax1.set_ylabel("number of gaps")
    ax2.set_ylabel("idle time in these gaps (ms)")
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.suptitle(_title(trace, "GPU idle gaps by duration and cause"), fontsize=11)
    return png_bytes(fig, dpi)


def copy_rows(copies: CopiesResult) -> pl.DataFrame:
    """direction, bytes, duration_us, gbps for every memcpy (as analyses.copies reads them)."""
    c = copies.copies
    return c.filter(pl.col("kind") == "memcpy").select("direction", "bytes", "duration_us", "gbps")


def copy_bandwidth(
    copies: CopiesResult, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100
) -> bytes | None:
    """Achieved bandwidth against size, one point per memcpy, by direction."""
    c = copy_rows(copies).filter((pl.col("bytes") > 0) & pl.col("gbps").is_not_null() & (pl.col("gbps") > 0))
    if c.is_empty():
        return None
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.14, 0.7, 0.76))
    for d in sorted(c["direction"].unique().to_list()):
        part = c.filter(pl.col("direction") == d)
        ax.scatter(
            part["bytes"].to_list(),
            part["gbps"].to_list(),
            s=10,
            alpha=0.6,
            color=DIRECTION_COLORS.get(d, "#7f7f7f"),
            label=f"{d} ({part.height:,} copies)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("copy size (bytes, log scale)")
    ax.set_ylabel("achieved bandwidth (GB/s, log scale)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.suptitle(_title(trace, "Copy bandwidth against size"), fontsize=11)
    return png_bytes(fig, dpi)


def memory_timeline(
    memory: MemoryResult, trace: Trace, width: int = 1000, height: int = 500, dpi: int = 100
) -> bytes | None:
    """Allocated and reserved memory per device over time (the memory analysis' timeline), the
    peak marked; step starts dotted."""
    if not memory.has_memory or memory.timeline.is_empty():
        return None
    s = memory.timeline.with_columns(t_ms=pl.col("t_us") / 1000.0)
    has_totals = memory.has_totals
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.14, 0.7, 0.76))
    devices = sorted(s["device"].unique().to_list())
    # The GPU's memory is the story; host memory only when there is nothing else.
    cuda_first = [d for d in devices if d.startswith("cuda")] or devices
    palette = ["#1f5fbf", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
    for i, d in enumerate(cuda_first):
        part = s.filter(pl.col("device") == d)
        col = palette[i % len(palette)]
        label = "allocated" if has_totals else "allocated since trace start (running sum of [memory] Bytes)"
        ax.plot(part["t_ms"].to_list(), part["allocated_mb"].to_list(), color=col, linewidth=1.2, label=f"{d} {label}")
        if part["reserved_mb"].drop_nulls().len():
            ax.plot(
                part["t_ms"].to_list(),
                part["reserved_mb"].to_list(),
                color=col,
                linewidth=1.0,
                linestyle="--",
                label=f"{d} reserved",
            )
        peak = memory.devices.filter(pl.col("device") == d).row(0, named=True)
        peak_ms = peak["peak_at_us"] / 1000.0
        ax.plot([peak_ms], [peak["peak_allocated_mb"]], marker="v", color=col, markersize=8)
        ax.annotate(
            f"peak {peak['peak_allocated_mb']:,.0f} MB",
            (peak_ms, peak["peak_allocated_mb"]),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
            color=col,
        )
    for b in trace.steps["start_ns"].to_list():
        ax.axvline((b - trace.meta.origin_ns) / 1e6, color="#bbbbbb", linestyle=":", linewidth=0.8)
    ax.set_xlabel("time from trace start (ms)")
    ax.set_ylabel("memory (MB)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.suptitle(_title(trace, "Device memory over time"), fontsize=11)
    return png_bytes(fig, dpi)
