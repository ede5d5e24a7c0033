"""Per pixel column, whether the GPU was mostly idle, so a zoomed-out timeline draws what its
subtitle says: where idle time dominates a pixel, the idle shading shows there and the busy
bars (each at least one pixel wide, which would otherwise paint a lane of thousands of short
kernels solid) give way. Pure polars, bounded by the events plus the picture's width: each
interval is spread over the pixel columns it touches, and the gaps of a device, like the
merged bars of a lane, do not overlap."""

from __future__ import annotations

import polars as pl

IDLE_DOMINATES = 0.5  # a pixel is drawn idle when the GPU was idle at least this share of it


def spread(df: pl.DataFrame, by: list[str], lo_ns: float, ns_per_px: float) -> pl.DataFrame:
    """Intervals (by..., ts_ns, end_ns, extra columns) -> (by..., px, ns): the time each spends
    in each pixel column it touches (pixel p covers [lo + p·w, lo + (p+1)·w))."""
    if df.is_empty():
        return pl.DataFrame(schema={**{b: df.schema[b] for b in by}, "px": pl.Int64, "ns": pl.Float64})
    s = df.with_columns(
        _p0=((pl.col("ts_ns") - lo_ns) / ns_per_px).floor().cast(pl.Int64),
        _p1=((pl.col("end_ns") - lo_ns) / ns_per_px).ceil().cast(pl.Int64) - 1,
    ).with_columns(px=pl.int_ranges("_p0", pl.max_horizontal("_p0", "_p1") + 1))
    s = s.explode("px")
    left = pl.col("px").cast(pl.Float64) * ns_per_px + lo_ns
    ns = pl.min_horizontal(pl.col("end_ns"), left + ns_per_px) - pl.max_horizontal(pl.col("ts_ns"), left)
    return s.select(*by, "px", ns=ns.clip(lower_bound=0.0))


def idle_pixels(gaps: pl.DataFrame, origin_ns: int, lo_ns: float, ns_per_px: float, width_px: int) -> pl.DataFrame:
    """device, px, cause, idle_share: the pixel columns where a device was idle at least
    `IDLE_DOMINATES` of the time, with the cause that held most of it."""
    schema = {"device": pl.Int64, "px": pl.Int64, "cause": pl.String, "idle_share": pl.Float64}
    if gaps.is_empty():
        return pl.DataFrame(schema=schema)
    g = gaps.select(
        "device",
        "cause",
        ts_ns=origin_ns + pl.col("start_us") * 1000.0,
        end_ns=origin_ns + (pl.col("start_us") + pl.col("duration_us")) * 1000.0,
    )
    per = spread(g, ["device", "cause"], lo_ns, ns_per_px).filter((pl.col("px") >= 0) & (pl.col("px") < width_px))
    by_cause = per.group_by("device", "px", "cause").agg(pl.col("ns").sum())
    return (
        by_cause.group_by("device", "px")
        .agg(
            cause=pl.col("cause").sort_by("ns", descending=True).first(),
            idle_share=(pl.col("ns").sum() / ns_per_px).clip(upper_bound=1.0),
        )
        .filter(pl.col("idle_share") >= IDLE_DOMINATES)
        .select(list(schema))
        .cast(schema)
    )


def runs(px: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Pixel columns (by..., px) -> runs of consecutive columns (by..., px0, px1), px1 exclusive."""
    if px.is_empty():
        return pl.DataFrame(schema={**{b: px.schema[b] for b in by}, "px0": pl.Int64, "px1": pl.Int64})
    s = px.select(*by, "px").unique().sort([*by, "px"])
    s = s.with_columns(_g=(pl.col("px") - pl.col("px").shift(1).over(by) != 1).fill_null(True).cum_sum().over(by))
    return s.group_by([*by, "_g"]).agg(px0=pl.col("px").min(), px1=pl.col("px").max() + 1).drop("_g").sort([*by, "px0"])


def without_idle(bars: pl.DataFrame, idle: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Bars (device, stream, kind, px0, px1) less the pixel columns where their device was mostly idle."""
    if bars.is_empty() or idle.is_empty():
        return bars
    cols = bars.with_columns(px=pl.int_ranges("px0", "px1")).explode("px").drop("px0", "px1")
    kept = cols.join(idle.select("device", "px"), on=["device", "px"], how="anti")
    return runs(kept, by)


def shade_idle(ax, idle_px, drawn, band, lo_ns, ns_per_px, origin) -> None:
    """Shade the idle-dominated pixel columns that no drawn gap covers (gaps under two pixels)."""
    from matplotlib.patches import Rectangle

    from traceanalyzer.render.timeline_layout import GAP_ALPHA, cause_color

    if idle_px.is_empty():
        return
    if drawn.height:  # pixels a shaded gap already covers stay as they are (no double shade)
        covered = spread(
            drawn.select(
                "device",
                ts_ns=origin + pl.col("start_us") * 1000.0,
                end_ns=origin + (pl.col("start_us") + pl.col("duration_us")) * 1000.0,
            ),
            ["device"],
            lo_ns,
            ns_per_px,
        ).filter(pl.col("ns") >= 0.5 * ns_per_px)
        idle_px = idle_px.join(covered.select("device", "px").unique(), on=["device", "px"], how="anti")
    for r in runs(idle_px, ["cause"]).iter_rows(named=True):
        x0 = (lo_ns + r["px0"] * ns_per_px - origin) / 1e6
        ax.add_patch(
            Rectangle(
                (x0, band[0]),
                (r["px1"] - r["px0"]) * ns_per_px / 1e6,
                band[1] - band[0],
                facecolor=cause_color(r["cause"]),
                alpha=GAP_ALPHA,
                linewidth=0,
                zorder=1,
            )
        )
