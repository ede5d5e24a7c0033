"""The arrival-skew heat map of a job: ranks down, matched collectives across (time order), each
cell how long after the first rank that rank reached that collective. A straggler is a bright
row; a slow phase of the job a bright column. matplotlib (Agg) is imported lazily."""

from __future__ import annotations

import io

import polars as pl

MAX_COLUMNS = 400  # beyond this the columns are binned (max lateness per bin): a cell stays visible


def skew_map_png(arrivals: pl.DataFrame, width: int = 1400, height: int = 700, dpi: int = 100) -> bytes | None:
    """PNG bytes of the heat map of `arrivals` (rank, instance, lateness_us); None when empty."""
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
        im = ax.imshow(m, aspect="auto", interpolation="nearest", cmap="magma")
        ax.set_xlabel("collective (time order)" + (f", {n_inst} binned into {bins}" if bins < n_inst else ""))
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # collectives are counted, not measured
        ax.set_ylabel("rank")
        step = max(1, len(ranks) // 32)
        ax.set_yticks(range(0, len(ranks), step), [str(r) for r in ranks[::step]])
        ax.set_title("Arrival skew: µs after the first rank reached each collective")
        fig.colorbar(im, ax=ax, label="µs after the first arrival")
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()
    finally:
        plt.close(fig)
