"""What each CPU thread was doing over time, as disjoint interval sets with prefix sums, so
that "how long was thread T blocked / loading data / busy inside [a, b]" is one join."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.intervals import coverage_index, merge
from traceanalyzer.options import SYNC_API_PATTERN
from traceanalyzer.trace import Trace

THREAD = ["pid", "tid"]


def blocking_calls(trace: Trace) -> pl.DataFrame:
    """Runtime calls that hold the CPU thread until the GPU catches up: the synchronising APIs,
    and memcpy calls whose copy involves pageable host memory (those block even when Async)."""
    pageable = (
        trace.gpu.select("kind", "name", "runtime_id")
        .filter((pl.col("kind") == "memcpy") & pl.col("name").str.contains("(?i)pageable"))
        .get_column("runtime_id")
        .drop_nulls()
        .unique()
    )
    # A filter, not a join: the runtime table is one of the largest and is copied only in part.
    return trace.runtime.filter(
        pl.col("name").str.contains(SYNC_API_PATTERN) | pl.col("runtime_id").is_in(pageable.implode())
    )


def data_loading_ranges(trace: Trace, pattern: str) -> pl.DataFrame:
    return trace.ops.filter(pl.col("name").str.contains(pattern))


@dataclass(frozen=True)
class CpuActivity:
    """Per-thread coverage indexes: blocked in sync calls, in data-loading ranges, in any op
    or runtime call."""

    blocked: pl.DataFrame
    data: pl.DataFrame
    busy: pl.DataFrame
    blocking: pl.DataFrame  # the blocking calls themselves (runtime rows)
    data_ranges: pl.DataFrame

    @classmethod
    def of(cls, trace: Trace, data_pattern: str) -> CpuActivity:
        blocking = blocking_calls(trace)
        data = data_loading_ranges(trace, data_pattern)
        # Ranges (record_function, ProfilerStep) say where the thread was, not that it worked.
        # Narrow columns first: these tables are the biggest of a trace.
        real_ops = trace.ops.select(*THREAD, "ts_ns", "end_ns", "kind", "name").filter(
            (pl.col("kind") == "cpu_op") & ~pl.col("name").str.contains(r"^ProfilerStep#\d+$")
        )
        anything = pl.concat([t.select(*THREAD, "ts_ns", "end_ns") for t in (real_ops, trace.runtime, data)])
        return cls(
            blocked=coverage_index(merge(blocking, THREAD), THREAD),
            data=coverage_index(merge(data, THREAD), THREAD),
            busy=coverage_index(merge(anything, THREAD), THREAD),
            blocking=blocking,
            data_ranges=data,
        )
