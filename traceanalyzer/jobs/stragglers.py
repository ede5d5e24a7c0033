"""Across ranks: who arrived last at the collectives, why, who waited for them, and how much of
each rank's communication compute did not hide.

Definitions (on the aligned clock, see `multirank`):
- straggler: the rank that arrived last at the most matched collectives. `late_by`: its arrival
  minus the median arrival of that collective. Its cause comes from its own trace: over each
  interval where a peer was already waiting for it (first arrival to its arrival), the GPU idle
  time on that rank by cause (as `gaps` classifies it); the rest it was busy (`gpu_busy`).
- victims: per rank, the time its collective kernels spent waiting for the last rank
  (min(last arrival - own arrival, kernel time)), and the rank it waited for most.
- exposed communication per rank and step: collective time (union of collective kernels) and
  its exposed part (no compute kernel on the device overlapped it), split into `wait` (exposed
  time while the rank waited for peers: arrival skew) and `transfer` (the rest: the data moving);
  `overlap_share` = 1 - exposed / collective time.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import collectives, intervals
from traceanalyzer.units import Shown, display_us, us_expr


@dataclass(frozen=True)
class CollectiveResult:
    """The cross-rank collective tables of one job.

    Its own tables hold int64 ns (`*_ns`, sums as integers; a mean lateness is a float of ns);
    `arrivals`, `stragglers`, `straggler_cause`, `victims` and `exposed` are their µs display
    views. `instances` and `by_group` are `analyses.collectives`' tables as it gives them."""

    match_note: str
    instances: pl.DataFrame  # one row per matched collective, see collectives.instances
    by_group: pl.DataFrame  # per process group and collective type
    arrivals_ns: pl.DataFrame  # rank, instance (0..), lateness_ns after the first rank (heat map)
    stragglers_ns: pl.DataFrame  # rank, times_last, share_last, mean_late_by_ns, max_late_by_ns, caused_wait_ns
    straggler_cause_ns: pl.DataFrame  # cause, time_ns, share (of the straggler's late intervals)
    victims_ns: pl.DataFrame  # rank, waited_ns, collectives, waited_most_for
    exposed_ns: pl.DataFrame  # rank, step, comm_ns, exposed_ns, exposed_wait_ns, exposed_transfer_ns, overlap_share
    origin_ns: int = 0  # no table here holds a time point: durations only

    # the µs display views of the ns tables (units.Shown)
    arrivals = Shown("arrivals_ns")
    stragglers = Shown("stragglers_ns")
    victims = Shown("victims_ns")
    exposed = Shown("exposed_ns")

    @property
    def straggler_cause(self) -> pl.DataFrame:
        """cause, us, share: the display view of `straggler_cause_ns` (its time column is `us`)."""
        df = self.straggler_cause_ns
        if "time_ns" not in df.columns:
            return df
        return df.select("cause", us_expr("time_ns", self.origin_ns).alias("us"), "share")


def _empty() -> CollectiveResult:
    e = pl.DataFrame()
    return CollectiveResult("no collective seen on two ranks or more", e, e, e, e, e, e, e)


def _cause(idle: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Idle by cause over the windows (start_ns, end_ns, own clock); the rest is gpu_busy."""
    total = int((windows["end_ns"] - windows["start_ns"]).sum())
    if total <= 0:
        return pl.DataFrame(schema={"cause": pl.String, "time_ns": pl.Int64, "share": pl.Float64})
    w = windows.select(a="start_ns", b="end_ns")
    ov = (
        idle.join_where(w, pl.col("start_ns") < pl.col("b"), pl.col("end_ns") > pl.col("a"))
        .with_columns(ns=pl.min_horizontal("end_ns", "b") - pl.max_horizontal("start_ns", "a"))
        .group_by("cause")
        .agg(ns=pl.col("ns").sum())
    )
    busy = total - int(ov["ns"].sum() if ov.height else 0)
    out = pl.concat([ov, pl.DataFrame({"cause": ["gpu_busy"], "ns": [busy]})], how="vertical_relaxed")
    return (
        out.filter(pl.col("ns") > 0)
        .select("cause", time_ns="ns", share=pl.col("ns") / total)
        .sort("time_ns", descending=True)
    )


def _exposed(results, per_rank: pl.DataFrame, rank_of: dict[int, int]) -> pl.DataFrame:
    """Per rank and step: collective time, exposed time, its wait / transfer split (integer ns).

    Every rank at once (`_i` a key of each step): a rank's pieces meet only its own step windows
    (an equi-join on `_i`, the size of pieces x that rank's steps), and one union per rank, kind
    and step: a fixed number of queries whatever the rank count (64 ranks of ~1 MB: a loop per rank
    was 0.6 CPU-s, polars' per-query overhead)."""
    with_coll = [(i, r) for i, r in enumerate(results) if not r.collectives.is_empty()]
    if not with_coll:
        return pl.DataFrame()

    def tagged(frames) -> pl.DataFrame:
        return pl.concat([df.with_columns(_i=pl.lit(i, pl.Int64)) for i, df in frames], how="vertical_relaxed")

    coll = per_rank.select("_i", "cidx", wait_end=pl.col("ts_ns") + pl.col("wait_ns"))
    segs = (
        tagged((i, r.exposed.select("cidx", "start_ns", "end_ns")) for i, r in with_coll)
        .join(coll, on=["_i", "cidx"], how="left")
        .with_columns(wait_end=pl.col("wait_end").fill_null(pl.col("start_ns")))
    )
    # Each piece clipped to each step window it overlaps.
    pieces = pl.concat(
        [
            tagged((i, r.collectives.select(start_ns="ts_ns", end_ns="end_ns")) for i, r in with_coll).with_columns(
                kind=pl.lit("comm")
            ),
            segs.select("start_ns", "end_ns", "_i", kind=pl.lit("exposed")),
            segs.select(
                start_ns="start_ns", end_ns=pl.min_horizontal("end_ns", "wait_end"), _i="_i", kind=pl.lit("wait")
            ).filter(pl.col("end_ns") > pl.col("start_ns")),
        ],
        how="vertical_relaxed",
    )
    steps = tagged((i, r.steps.select("step", a="start_ns", b="end_ns")) for i, r in with_coll)
    clipped = (
        pieces.join(steps, on="_i")
        .filter((pl.col("start_ns") < pl.col("b")) & (pl.col("end_ns") > pl.col("a")))
        .select(
            "_i",
            "kind",
            step=pl.col("step").fill_null(-1),
            ts_ns=pl.max_horizontal("start_ns", "a"),
            end_ns=pl.min_horizontal("end_ns", "b"),
        )
    )
    # Overlapping collectives (two groups at once) count once.
    m = intervals.merge(clipped, ["_i", "kind", "step"])
    per = (
        m.group_by("_i", "step")
        .agg(
            ((pl.col("end_ns") - pl.col("start_ns")).filter(pl.col("kind") == k).sum()).alias(f"{k}_ns")
            for k in ("comm", "exposed", "wait")
        )
        .with_columns(rank=pl.col("_i").replace_strict(rank_of, return_dtype=pl.Int64))
    )
    df = per.with_columns(pl.col("comm_ns", "exposed_ns", "wait_ns").cast(pl.Int64), pl.col("step").cast(pl.Int64))
    wait = pl.min_horizontal("wait_ns", "exposed_ns")
    return df.sort("rank", "step", "_i").select(
        "rank",
        step=pl.when(pl.col("step") >= 0).then(pl.col("step")),
        comm_ns="comm_ns",
        exposed_ns="exposed_ns",
        exposed_wait_ns=wait,
        exposed_transfer_ns=pl.col("exposed_ns") - wait,
        overlap_share=pl.when(pl.col("comm_ns") > 0).then(1 - pl.col("exposed_ns") / pl.col("comm_ns")),
    )


def compare(results, shift: dict[int, int], rank_of: dict[int, int]) -> CollectiveResult:
    """Match the ranks' collectives and read arrivals, stragglers, victims and exposed time.
    `shift[i]`: ns added to rank i's clock to align it; `rank_of[i]`: its rank number."""
    parts = [
        r.collectives.with_columns(
            _i=pl.lit(i, pl.Int64), rank=pl.lit(rank_of[i], pl.Int64), arrival_ns=pl.col("ts_ns") + shift[i]
        )
        for i, r in enumerate(results)
        if r.collectives.height
    ]
    if len(parts) < 2:
        return _empty()
    allc = pl.concat(parts, how="vertical_relaxed")
    key, note = collectives.match_key(allc)
    inst = collectives.instances(allc, key)
    if inst.is_empty():
        return _empty()
    inst = inst.with_columns(instance=pl.int_range(pl.len()).cast(pl.Int64))
    j = allc.join(inst.select(*key, "instance", "first_ns", "last_ns", "last_rank"), on=key, how="inner")
    j = j.with_columns(
        wait_ns=pl.min_horizontal(pl.col("last_ns") - pl.col("arrival_ns"), pl.col("end_ns") - pl.col("ts_ns")).clip(0)
    )
    arrivals = j.select("rank", "instance", lateness_ns=pl.col("arrival_ns") - pl.col("first_ns")).sort(
        "rank", "instance"
    )
    caused = j.sort("instance", "rank").group_by("instance", maintain_order=True).agg(caused_ns=pl.col("wait_ns").sum())
    # In instance order: a float mean does not depend on which executor returned first.
    # late_by: the last arrival after the median one (a median of ns, so a float of ns).
    last = inst.join(caused, on="instance").with_columns(late_by_ns=pl.col("last_ns") - pl.col("median_ns"))
    stragglers = (
        last.sort("instance")
        .group_by(rank="last_rank", maintain_order=True)
        .agg(
            times_last=pl.len(),
            mean_late_by_ns=pl.col("late_by_ns").mean(),
            max_late_by_ns=pl.col("late_by_ns").max(),
            caused_wait_ns=pl.col("caused_ns").sum(),
        )
        .with_columns(share_last=pl.col("times_last") / inst.height)
        .sort(["times_last", "caused_wait_ns"], descending=True)
        .select("rank", "times_last", "share_last", "mean_late_by_ns", "max_late_by_ns", "caused_wait_ns")
    )
    waited_for = (
        j.filter(pl.col("rank") != pl.col("last_rank"))
        .group_by("rank", "last_rank")
        .agg(ns=pl.col("wait_ns").sum())
        .sort(["ns", "last_rank"], descending=[True, False])
        .group_by("rank", maintain_order=True)
        .first()
        .select("rank", waited_most_for="last_rank")
    )
    victims = (
        j.group_by("rank")
        .agg(waited_ns=pl.col("wait_ns").sum(), collectives=pl.len())
        .join(waited_for, on="rank", how="left")
        .sort("waited_ns", descending=True)
    )
    # The straggler's own trace over the intervals a peer waited for it (first arrival -> its own).
    cause = pl.DataFrame()
    if stragglers.height:
        top = stragglers["rank"][0]
        i = next(i for i, rk in rank_of.items() if rk == top)
        mine = j.filter((pl.col("_i") == i) & (pl.col("last_rank") == top))
        win = mine.select(start_ns=pl.col("first_ns") - shift[i], end_ns="ts_ns").filter(
            pl.col("end_ns") > pl.col("start_ns")
        )
        win = intervals.merge(win.with_columns(g=pl.lit(0)), ["g"], "start_ns", "end_ns").drop("g")
        cause = _cause(results[i].idle_gaps, win)
    return CollectiveResult(
        note,
        display_us(inst.drop("first_ns", "last_ns", "median_ns"), 0),  # durations only: no origin
        display_us(collectives.by_group(inst), 0),
        arrivals,
        stragglers,
        cause,
        victims,
        _exposed(results, j, rank_of),
    )
