"""Start-up set apart from the steady state.

The first moments of a process (CUDA context creation, cuDNN and cuBLAS handles, the caching
allocator's first blocks, a module's first kernel launch) leave the GPU idle for reasons that
never recur. A verdict over a trace that holds them would send the engineer after a one-time
cost, so the gaps they cause are reported as start-up and the headline and findings speak of
the steady state after it.

Definition: an *initialisation gap* is one whose cause is one-time in the cause registry
(`causes.ONE_TIME`: `runtime_call`, `slow_launch`), that
lasts at least `startup_gap_us`, and whose pattern happens once: its key (the runtime call it sat
in, or the kernel a slow launch launched) does not recur later. A key recurs when its gaps (of
that cause, at least `startup_gap_us`) fall in two iterations after the first (with two steps or
more), or, without steps, in both halves of the window: allocator churn (cudaMalloc /
hipFree every iteration) and a slow launch in every step are steady costs, never start-up. The
start-up is the longest prefix of the analysis windows that ends with an initialisation gap and
in which initialisation gaps make up at least half of the idle time; it then runs to the first
iteration boundary after that gap (the rest of a warm-up step is warm-up), but never past the
first gap of a recurring pattern that lies after the first iteration (without steps: the first
gap of a recurring pattern), where the steady state shows. With two ProfilerSteps or more, only
gaps of the first step can be initialisation. Without steps, a trace may be start-up almost
whole (a short benchmark that spends seconds creating its CUDA context), and the verdict then
says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import gpu_time
from traceanalyzer.causes import ONE_TIME


@dataclass(frozen=True)
class Startup:
    """Where the start-up ends (None: no start-up found), and its window and busy time."""

    end_ns: int | None
    window_ns: int = 0
    busy_ns: int = 0


def _recurring(p: pl.DataFrame, candidate: pl.Expr, first_step: int | None, half_ns: int) -> pl.Expr:
    """Whether each piece's pattern (cause and key) recurs after the first iteration."""
    later = p.filter(candidate & pl.col("_key").is_not_null())
    if first_step is not None:
        later = later.filter(pl.col("step") != first_step).group_by("cause", "_key").agg(pl.col("step").n_unique())
        rec = later.filter(pl.col("step") >= 2)
    else:
        halves = later.group_by("cause", "_key").agg(
            _first=(pl.col("start_ns") < half_ns).any(), _second=(pl.col("start_ns") >= half_ns).any()
        )
        rec = halves.filter(pl.col("_first") & pl.col("_second"))
    keys = rec.select(_rk=pl.concat_str("cause", pl.lit("\x00"), "_key"))["_rk"].implode()
    return pl.concat_str("cause", pl.lit("\x00"), "_key").is_in(keys).fill_null(False)


def find_startup(
    pieces: pl.DataFrame,
    wins: pl.DataFrame,
    busy: pl.DataFrame,
    startup_gap_us: float,
    first_step: int | None = None,
    boundaries: pl.Series | None = None,
) -> Startup:
    """The start-up of classified idle pieces (start_ns, end_ns, step, cause, and `init_key`: the
    runtime call or kernel behind a runtime_call / slow_launch gap) inside windows `wins` (device,
    step, start_ns, end_ns), with the busy intervals `busy` (device, start_ns, end_ns);
    `first_step` limits initialisation gaps to that step (None: anywhere); `boundaries` are the
    iteration starts (the steps' GPU-extended starts), sorted."""
    if pieces.is_empty() or wins.is_empty():
        return Startup(None)
    d = pl.col("end_ns") - pl.col("start_ns")
    long_init = pl.col("cause").is_in(ONE_TIME) & (d >= int(startup_gap_us * 1000))
    key = pl.col("init_key") if "init_key" in pieces.columns else pl.lit(None, pl.String)
    # five columns, not the wide classified table: sorting copies every column it carries
    p = pieces.select("start_ns", "end_ns", "step", "cause", _key=key).sort("start_ns")
    lo, hi = int(wins["start_ns"].min()), int(wins["end_ns"].max())
    recurring = _recurring(p, long_init, first_step, lo + (hi - lo) // 2)
    p = p.with_columns(_recurring=long_init & recurring)
    init = long_init & ~pl.col("_recurring")
    if first_step is not None:
        init = init & (pl.col("step") == first_step)
    p = p.with_columns(_init=init, _cum_idle=d.cum_sum(), _cum_init=pl.when(init).then(d).otherwise(0).cum_sum())
    cand = p.filter(pl.col("_init") & (pl.col("_cum_init") * 2 >= pl.col("_cum_idle")))
    if cand.is_empty():
        return Startup(None)
    end = int(cand["end_ns"].max())
    # To the next iteration boundary: the rest of a warm-up iteration is warm-up too.
    if boundaries is not None and boundaries.len():
        after = boundaries.filter(boundaries >= end)
        end = int(after.min()) if after.len() else end
    # Never past the point where a recurring pattern shows in the steady state.
    steady_rec = p.filter(pl.col("_recurring"))
    if first_step is not None:
        steady_rec = steady_rec.filter(pl.col("step") != first_step)
    if steady_rec.height:
        end = min(end, int(steady_rec["start_ns"].min()))
    if end <= lo:
        return Startup(None)
    part = wins.with_columns(end_ns=pl.min_horizontal("end_ns", pl.lit(end))).filter(
        pl.col("end_ns") > pl.col("start_ns")
    )
    per = gpu_time.busy_by_window(busy, part)
    return Startup(end, int(per["window_ns"].sum()), int(per["busy_ns"].sum()))
