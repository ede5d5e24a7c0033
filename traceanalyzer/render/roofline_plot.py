"""The roofline picture: achieved TFLOP/s against arithmetic intensity (FLOPs per byte), log-log,
one dot per op and shape sized by its GPU time and coloured by op family, under the device's
memory roof (bandwidth x intensity) and its compute roofs (one per precision the dots use).
Copies do no FLOPs and have no place on these axes: the caption counts them. `result` is the
roofline analysis' result (ops, devices, GPU totals), handed in; nothing here computes it. And the table
of op/shapes as screens show it (`roofline_table`). Receives the analysis result only: the
picture reads its ns table (`ops_ns`, GPU time summed as integers), the table its µs view;
matplotlib is imported lazily.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.render.figures import new_figure, png_bytes
from traceanalyzer.units import duration_us

FAMILY_COLORS = {
    "matmul": "#1f5fbf",
    "conv": "#2ca02c",
    "attention": "#9467bd",
    "elementwise": "#ff7f0e",
    "norm": "#d62728",
    "reduction": "#8c564b",
    "copy": "#7f7f7f",
}


def roofline_table(ops: pl.DataFrame) -> pl.DataFrame:
    """The table on screen: the achieved rate at the op's bound in one column, TF/s (TFLOP/s) or
    GB/s (JSON and CSV hold both rates, calls and every other column)."""
    tf = pl.col("achieved_tflops")
    tf_text = pl.when(tf >= 100).then(tf.round(0).cast(pl.Int64).cast(pl.String)).otherwise(tf.round(1).cast(pl.String))
    rate = (
        pl.when(pl.col("bound").is_in(["compute", "fewer_flops"]))
        .then(pl.format("{} TF/s", tf_text))
        .otherwise(pl.format("{} GB/s", pl.col("achieved_gbps").round(0).cast(pl.Int64)))
    )
    return ops.select("op", "input_dims", "dtype", "gpu_us", "bound", "peak_share", achieved=rate)


def roofline_headline(r: Any) -> str:
    """One line: coverage, devices, the op with the most time below its roof."""
    if r.note:
        return r.note
    if not r.gpu_us:
        return "no GPU work in this trace"
    parts = [f"{r.modelled_gpu_us:,.0f} of {r.gpu_us:,.0f} GPU µs modelled ({r.modelled_share:.0%})"]
    known = r.devices.filter(pl.col("part").is_not_null())
    parts.append(
        "peaks: " + ", ".join(sorted(set(known["part"].to_list())))
        if known.height
        else "no peaks known for this device (give --peak-tflops and --peak-gbps)"
    )
    judged = r.ops.filter(pl.col("peak_share").is_not_null())
    if judged.height:
        top = judged.row(0, named=True)
        parts.append(
            f"most time below its roof: {top['op']} {top['input_dims']} at {top['peak_share']:.0%} of its {top['bound']} "
            f"roof ({top['gpu_us']:,.0f} µs)"
        )
    return "; ".join(parts)


def _device(result: Any) -> dict | None:
    """The device the picture shows: the one with the most modelled GPU time."""
    if result.ops_ns.is_empty():
        return None
    dev = result.ops_ns.group_by("device").agg(pl.col("gpu_ns").sum()).sort("gpu_ns", descending=True)["device"][0]
    rows = result.devices.filter(pl.col("device") == dev).to_dicts()
    return rows[0] if rows else {"device": dev}


def _ms(rows: pl.DataFrame) -> str:
    """The GPU time of some rows of the ns table, summed as integers, in ms with one decimal."""
    return f"{duration_us(int(rows['gpu_ns'].sum())) / 1000:,.1f}"


def roofline_png(result: Any, title: str, width: int = 1000, height: int = 600, dpi: int = 100) -> bytes | None:
    """The picture as PNG bytes, or None when no op has FLOPs and GPU time to draw."""
    dev = _device(result)
    if dev is None:
        return None
    ops = result.ops_ns.filter(pl.col("device") == dev["device"])
    dots = ops.filter((pl.col("intensity") > 0) & (pl.col("achieved_tflops") > 0))
    if dots.is_empty():
        return None
    fig = new_figure(width, height, dpi)
    ax = fig.add_axes((0.08, 0.12, 0.6, 0.78))
    scale = 1500.0 / max(float(dots["gpu_ns"].max()), 1e-9)
    fewer = pl.col("bound") == "fewer_flops"
    for fam in [f for f in FAMILY_COLORS if f in set(dots["family"].to_list())]:
        part = dots.filter(pl.col("family") == fam)
        solid, hollow = part.filter(~fewer.fill_null(False)), part.filter(fewer.fill_null(False))
        for sub, face, label in (
            (solid, FAMILY_COLORS[fam], f"{fam} ({part.height} op/shapes, {_ms(part)} ms)"),
            (hollow, "none", f"{fam}, Winograd/FFT: fewer FLOPs ({hollow.height})"),
        ):
            if sub.is_empty():
                continue
            ax.scatter(
                sub["intensity"].to_list(),
                sub["achieved_tflops"].to_list(),
                s=[max(6.0, g * scale) for g in sub["gpu_ns"].to_list()],
                facecolors=face,
                edgecolors=FAMILY_COLORS[fam] if face == "none" else "black",
                alpha=0.55 if face != "none" else 0.9,
                linewidths=0.4 if face != "none" else 1.2,
                label=label,
            )
    lo = float(dots["intensity"].min()) / 3
    hi = float(dots["intensity"].max()) * 3
    bw = dev.get("memory_gbps")
    roofs = sorted(
        {r for r in dots["roof"].drop_nulls().to_list() if r != "memory" and dev.get(r)}, key=lambda r: dev[r]
    )
    top = (
        max(float(dots["achieved_tflops"].max()), *(dev[r] for r in roofs))
        if roofs
        else float(dots["achieved_tflops"].max())
    )
    if bw:
        hi = max(hi, *(dev[r] * 1000 / bw * 3 for r in roofs)) if roofs else hi
        # the memory roof rises until it meets the highest compute roof
        ceiling = dev[roofs[-1]] if roofs else top * 2.5
        knee = ceiling * 1000 / bw
        xs = [lo, knee] if knee < hi else [lo, hi]
        ax.plot(xs, [x * bw / 1000 for x in xs], color="#333333", linewidth=1.2, label=f"memory roof {bw:,.0f} GB/s")
    for r, style in zip(roofs, ("--", ":", "-.", (0, (5, 1)))):
        peak = dev[r]
        start = peak * 1000 / bw if bw else lo
        ax.plot(
            [start, hi],
            [peak, peak],
            color="#555555",
            linestyle=style,
            linewidth=1.1,
            label=f"{r} roof {peak:,g} TFLOP/s",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(bottom=float(dots["achieved_tflops"].min()) / 3, top=top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of device memory, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.grid(True, which="major", color="#e5e5e5", linewidth=0.6)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    for handle in legend.legend_handles:  # one size in the legend: the area is per dot
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([40])
    part = dev.get("part") or "no peaks known"
    copies = ops.filter(pl.col("family") == "copy")
    fig.suptitle(f"Roofline: {title} — device {dev['device']} ({part})", fontsize=11)
    fig.text(
        0.08,
        0.02,
        f"dot area ∝ GPU time; {copies.height} copy op/shapes ({_ms(copies)} ms) have no FLOPs "
        "and are not drawn"
        + ("" if dev.get("part") else "; no roofs: the device is not in the peaks table (--peak-tflops/--peak-gbps)"),
        fontsize=8,
        color="#555555",
    )
    return png_bytes(fig, dpi)
