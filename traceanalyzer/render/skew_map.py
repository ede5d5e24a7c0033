"""The arrival-skew heat map of a job: ranks down, matched collectives across (time order), each
cell how long after the first rank that rank reached that collective. A straggler is a bright
row; a slow phase of the job a bright column. The colour scale is logarithmic (symmetric-log:
linear below 1 µs, so the first rank's 0 has a colour): lateness spans 1 µs to seconds, and a
linear scale left every collective but the worst black. A small map writes each cell's value.
matplotlib (Agg) is imported lazily."""

from __future__ import annotations

import io

import polars as pl

MAX_COLUMNS = 400  # beyond this the columns are binned (max lateness per bin): a cell stays visible


LABELLED_CELLS = 24 * 32  # up to this many cells (collectives x ranks), each cell says its value


def skew_norm(top_us: float):
    """The colour scale: symmetric-log from 0 to `top_us` (linear below 1 µs)."""
    from matplotlib.colors import SymLogNorm

    return SymLogNorm(linthresh=1.0, linscale=0.3, vmin=0.0, vmax=max(top_us, 10.0), base=10)


def skew_map_png(
    arrivals: pl.DataFrame, width: int = 1400, height: int = 700, dpi: int = 100, job: str = ""
) -> bytes | None:
    """PNG bytes of the heat map of `arrivals` (rank, instance, lateness_us), titled with the
    job's name; None when empty."""
    if arrivals.is_empty():
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    n_inst = int(arrivals["instance"].max()) + 1
    bins = min(n_inst, MAX_COLUMNS)
    a = arrivals.with_columns(col=(pl.col("instance") * bins // n_inst).cast(pl.Int64))
    grid = a.group_by("rank", "col").agg(pl.col("lateness_us").max())
    ranks = sorted(grid["rank"].unique().to_list())
    row = {r: i for i, r in enumerate(ranks)}
    m = np.full((len(ranks), bins), np.nan)
    for r, c, v in grid.iter_rows():
        m[row[r], c] = v
    fig, ax = plt.subplots(figsize=(width / dpi, height / dpi), dpi=dpi)
    try:
        norm = skew_norm(float(np.nanmax(m)) if np.isfinite(m).any() else 1.0)
        im = ax.imshow(m, aspect="auto", interpolation="nearest", cmap="magma", norm=norm)
        if m.size <= LABELLED_CELLS:
            for (i, j), v in np.ndenumerate(m):
                if np.isfinite(v):
                    text = f"{v / 1000:,.1f} ms" if v >= 1000 else f"{v:,.0f}"
                    light = norm(v) < 0.6  # dark cell: white text
                    ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if light else "black")
        ax.set_xlabel("collective (time order)" + (f", {n_inst} binned into {bins}" if bins < n_inst else ""))
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # collectives are counted, not measured
        ax.set_ylabel("rank")
        step = max(1, len(ranks) // 32)
        ax.set_yticks(range(0, len(ranks), step), [str(r) for r in ranks[::step]])
        where = f"{job}: " if job else ""
        ax.set_title(f"{where}arrival skew, µs after the first rank reached each collective (log scale)")
        fig.colorbar(im, ax=ax, label="µs after the first arrival (log scale)")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()
    finally:
        plt.close(fig)
