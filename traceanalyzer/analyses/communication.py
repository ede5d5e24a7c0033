"""Communication that compute did not hide, per step, from one rank's own trace.

For each step: `comm_ns`, the time collective kernels ran (their union: two groups at once count
once); `exposed_ns`, the part of it no compute kernel on the same device overlapped (see
`collectives.exposed_segments`); `overlap_share`, the rest over `comm_ns`. Whether the exposed
time was waiting for peers or the transfer itself needs the other ranks: the directory mode
(`multirank`) splits it; one file alone cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import collectives, windows
from traceanalyzer.analyses.intervals import merge
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us

SCHEMA = {"step": pl.Int64, "comm_ns": pl.Int64, "exposed_ns": pl.Int64, "overlap_share": pl.Float64}


@dataclass(frozen=True, repr=False)
class CommunicationResult(Compact):
    """Per step, collective kernel time and the part compute did not hide.

    `per_step_ns` holds int64 ns (step, comm_ns, exposed_ns, overlap_share); `per_step` is its
    µs display view (`comm_us`, `exposed_us`), the columns the outputs print; the totals are
    integer sums."""

    per_step_ns: pl.DataFrame  # one row per step with collective kernels (SCHEMA)
    origin_ns: int = 0  # the trace start

    # the µs display view of the ns table (units.Shown)
    per_step = Shown("per_step_ns")

    @property
    def comm_ns(self) -> int:
        """Collective kernel time over every step."""
        return int(self.per_step_ns["comm_ns"].sum())

    @property
    def exposed_ns(self) -> int:
        """Collective time no compute hid, over every step."""
        return int(self.per_step_ns["exposed_ns"].sum())

    @property
    def comm_us(self) -> float:
        """`comm_ns` in µs."""
        return duration_us(self.comm_ns)

    @property
    def exposed_us(self) -> float:
        """`exposed_ns` in µs."""
        return duration_us(self.exposed_ns)


def _per_step(df: pl.LazyFrame, steps: pl.LazyFrame, out: str) -> pl.LazyFrame:
    """step, `out`: the union of intervals (start_ns, end_ns) inside each step window, in ns
    (its sums left lazy: the caller's one query runs them)."""
    clipped = chain.collect(  # one query (`chain.collect`), run as the eager calls were
        df.join_where(steps, pl.col("start_ns") < pl.col("_b"), pl.col("end_ns") > pl.col("_a")).select(
            _step=pl.col("step").fill_null(-1),
            ts_ns=pl.max_horizontal("start_ns", "_a"),
            end_ns=pl.min_horizontal("end_ns", "_b"),
        )
    )
    if clipped.is_empty():
        return pl.LazyFrame(schema={"_step": pl.Int64, out: pl.Int64})
    m = merge(clipped, ["_step"])
    return m.lazy().group_by("_step").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias(out))


def exposed_communication(
    trace: Trace, collective_pattern: str, coll: pl.DataFrame | None = None, exposed: pl.DataFrame | None = None
) -> CommunicationResult:
    """Per step (one row per step with collective kernels): comm_ns, exposed_ns, overlap_share.
    `coll` and `exposed`: the trace's `collectives.rank_collectives` and `exposed_segments`
    when already computed (the Session's), else computed here."""
    if coll is None:
        coll = collectives.rank_collectives(
            trace.gpu, collective_pattern, pl.DataFrame(schema=collectives.COMM_ARGS_SCHEMA)
        )
    if coll.is_empty():
        return CommunicationResult(pl.DataFrame(schema=SCHEMA), trace.meta.origin_ns)
    if exposed is None:
        exposed = collectives.exposed_segments(trace.gpu, coll)
    steps = windows.step_windows(trace).lazy().rename({"start_ns": "_a", "end_ns": "_b"})
    comm = _per_step(coll.lazy().select(start_ns="ts_ns", end_ns="end_ns"), steps, "comm_ns")
    hidden = _per_step(exposed.lazy().select("start_ns", "end_ns"), steps, "exposed_ns")
    per = comm.join(hidden, on="_step", how="left").with_columns(pl.col("exposed_ns").fill_null(0))
    table = (
        per.select(
            step=pl.when(pl.col("_step") >= 0).then(pl.col("_step")),
            comm_ns="comm_ns",
            exposed_ns="exposed_ns",
            overlap_share=pl.when(pl.col("comm_ns") > 0).then(1 - pl.col("exposed_ns") / pl.col("comm_ns")),
        )
        .cast(SCHEMA)
        .sort("step")
    ).pipe(chain.collect)
    return CommunicationResult(table, trace.meta.origin_ns)
