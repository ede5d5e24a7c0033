"""The critical path drawn on a timeline: one line that runs along each lane while the path is
on that thread or stream and steps between lanes where the path does (a launch, a sync, a wait).
The segments come from `analyses.critical_path`; nothing is computed here but pixels."""

from __future__ import annotations

from typing import Any

import polars as pl

PATH_COLOR = "#000000"  # black: red is the sync call, the other colours are kinds and causes
PATH_LABEL = "critical path"
PATH_Y = 0.28  # the line's height in its lane (0 top, 1 bottom): above the middle, where bars carry labels


def path_points(segments: pl.DataFrame, index: dict[tuple, int], lo_ns: float, hi_ns: float, origin: int) -> list:
    """(x_ms, y) vertices of the path through the lanes shown (`index`: lane key -> row), in
    time order; a segment on a lane not shown is left out and the line joins across it."""
    seg = segments.filter((pl.col("end_ns") > lo_ns) & (pl.col("start_ns") < hi_ns) & (pl.col("lane_node") >= 0))
    pts: list[tuple[float, float]] = []
    for r in seg.sort("start_ns", "order").iter_rows(named=True):
        key = ("gpu", r["device"], r["stream"]) if r["device"] is not None else ("cpu", r["pid"], r["tid"])
        if key not in index:
            continue
        y = index[key] + PATH_Y
        a = (max(r["start_ns"], lo_ns) - origin) / 1e6
        b = (min(r["end_ns"], hi_ns) - origin) / 1e6
        if pts and pts[-1][1] == y and abs(pts[-1][0] - a) < 1e-12:
            pts[-1] = (b, y)  # still on the same lane: extend
            continue
        pts += [(a, y), (b, y)]
    return pts


def draw_path(ax: Any, segments: pl.DataFrame | None, index: dict, lo_ns: float, hi_ns: float, origin: int) -> int:
    """Draw the path's line on `ax`; the number of vertices drawn (0 when there is no path)."""
    if segments is None or segments.is_empty():
        return 0
    pts = path_points(segments, index, lo_ns, hi_ns, origin)
    if len(pts) < 2:
        return 0
    xs, ys = zip(*pts, strict=True)
    ax.plot(xs, ys, color=PATH_COLOR, linewidth=1.6, alpha=0.9, zorder=8, solid_joinstyle="miter", label=PATH_LABEL)
    return len(pts)
