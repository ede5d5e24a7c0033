"""Start-up set apart from the steady state.

The first moments of a process (CUDA context creation, cuDNN and cuBLAS handles, the caching
allocator's first blocks, a module's first kernel launch) leave the GPU idle for reasons that
never recur. A verdict over a trace that holds them would send the engineer after a one-time
cost, so the gaps they cause are reported as start-up and the headline and findings speak of
the steady state after it.

Definition: an *initialisation gap* is one whose cause is `runtime_call` or `slow_launch` and
that lasts at least `startup_gap_us`. The start-up is the longest prefix of the analysis windows
that ends with an initialisation gap and in which initialisation gaps make up at least half of
the idle time. Steady-state allocator churn does not qualify: by the time it recurs, the
prefix's idle is mostly something else. With two ProfilerSteps or more, only gaps of the first
step can be initialisation: the later steps are the steady state by construction (a slow
launch in every step is a steady cost, recompilation say, not start-up). Without steps, a trace
may be start-up almost whole (a short benchmark that spends seconds creating its CUDA context),
and the verdict then says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import gpu_time

INIT_CAUSES = ("runtime_call", "slow_launch")


@dataclass(frozen=True)
class Startup:
    """Where the start-up ends (None: no start-up found), and its window and busy time."""

    end_ns: int | None
    window_ns: int = 0
    busy_ns: int = 0


def find_startup(
    pieces: pl.DataFrame, wins: pl.DataFrame, busy: pl.DataFrame, startup_gap_us: float, first_step: int | None = None
) -> Startup:
    """The start-up of classified idle pieces (start_ns, end_ns, step, cause) inside windows
    `wins` (device, step, start_ns, end_ns), with the busy intervals `busy` (device, start_ns,
    end_ns); `first_step` limits initialisation gaps to that step (None: anywhere)."""
    if pieces.is_empty() or wins.is_empty():
        return Startup(None)
    d = pl.col("end_ns") - pl.col("start_ns")
    init = pl.col("cause").is_in(INIT_CAUSES) & (d >= int(startup_gap_us * 1000))
    if first_step is not None:
        init = init & (pl.col("step") == first_step)
    # four columns, not the wide classified table: sorting copies every column it carries
    p = (
        pieces.select("start_ns", "end_ns", "step", "cause")
        .sort("start_ns")
        .with_columns(_init=init, _cum_idle=d.cum_sum(), _cum_init=pl.when(init).then(d).otherwise(0).cum_sum())
    )
    cand = p.filter(pl.col("_init") & (pl.col("_cum_init") * 2 >= pl.col("_cum_idle")))
    if cand.is_empty():
        return Startup(None)
    end = int(cand["end_ns"].max())
    part = wins.with_columns(end_ns=pl.min_horizontal("end_ns", pl.lit(end))).filter(
        pl.col("end_ns") > pl.col("start_ns")
    )
    per = gpu_time.busy_by_window(busy, part)
    return Startup(end, int(per["window_ns"].sum()), int(per["busy_ns"].sum()))
