"""CPU events that cross an earlier event on their thread: one starting inside another and
ending after it, which no nesting allows (a writer's mistake; `health` notes them). Counted per
thread in (start, end descending) order against the furthest-reaching earlier event and the one
just before (`intervals.reach`): natively where built, on numpy arrays for a small table, else
by polars sorts one thread at a time."""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.analyses.intervals import reach, series_of
from traceanalyzer.links import int64_arrays
from traceanalyzer.links_native import native_loop

# Up to this many rows a table's threads are swept in one query (windows over pid, tid): their
# temporaries are small, and a small rank has several threads a table (~25 µs a query each).
SMALL_TABLE_ROWS = 100_000


def _crossing_small(df: pl.DataFrame) -> int | None:
    """`crossing_events` on numpy arrays (its query's sort and windows were two queries, ~0.4 ms
    a table of a small rank); None (the query) where a column holds a null or is not an integer."""
    if (cols := int64_arrays(series_of(df, ["pid", "tid", "ts_ns", "end_ns"]))) is None:
        return None
    np = sys.modules["numpy"]
    pid, tid, ts, end = cols
    order = np.lexsort((-end, ts, tid, pid))
    pid, tid, ts, end = pid[order], tid[order], ts[order], end[order]
    first = np.r_[True, (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])]
    furthest = np.empty_like(end)  # the running maximum of the ends, per thread
    starts = np.flatnonzero(first)
    for a, b in zip(starts, [*starts[1:], len(end)]):
        furthest[a:b] = np.maximum.accumulate(end[a:b])
    # against the rows before (none on a thread's first row)
    reach, prev, ts, end = furthest[:-1], end[:-1], ts[1:], end[1:]
    crosses = ((ts < reach) & (reach < end)) | ((ts < prev) & (prev < end))
    return int((crosses & ~first[1:]).sum())


def _crossing_native(df: pl.DataFrame) -> int | None:
    """`crossing_events` natively (`_native.crossing_events`: a permutation of the rows sorted
    per thread, 8 bytes a row; at 1 GB 10 MB and 0.11 s for the 1.3 M runtime calls, where the
    per-thread sorts held 84 MB and took 0.21 s); None where `links_native.native_loop` gives no
    loop, or a column holds a null or is no integer."""
    if (fn := native_loop("crossing_events", df.height)) is None:
        return None
    cols = int64_arrays(series_of(df, ["pid", "tid", "ts_ns", "end_ns"]))
    return None if cols is None else int(fn(*cols))


def crossing_events(df: pl.DataFrame) -> int:
    """Events of a CPU table (pid, tid, ts_ns, end_ns) that start inside an earlier event on
    their thread and end after it: witnessed by the one just before, or by the one reaching
    furthest (`intervals.reach`; a lower bound where both miss a crossing).

    One thread at a time (a trace has a few dozen): windows `.over(["pid", "tid"])` on the
    whole table held ~170 MB of temporaries on a 1 GB trace, these ~115 MB, and are faster (measured
    when the loader ran this check, docs/performance.md)."""
    if df.height < 2:
        return 0
    furthest, prev = reach("end_ns"), pl.col("end_ns").shift(1)
    ts, end = pl.col("ts_ns"), pl.col("end_ns")
    crosses = ((ts < furthest) & (furthest < end)) | ((ts < prev) & (prev < end))
    if df.height <= SMALL_TABLE_ROWS and (n := _crossing_small(df)) is not None:
        return n
    if df.height > SMALL_TABLE_ROWS and (n := _crossing_native(df)) is not None:
        return n
    if df.height <= SMALL_TABLE_ROWS:  # one query, the windows per thread: two in all, not two a thread
        order = ["pid", "tid", "ts_ns", "end_ns"]
        ordered = df.select(order).sort(order, descending=[False, False, False, True], nulls_last=True)
        return int(ordered.select(crosses.fill_null(False).over(["pid", "tid"]).sum()).item())
    n = 0
    for thread in df.select("pid", "tid", "ts_ns", "end_ns").partition_by(["pid", "tid"], include_key=False):
        ordered = thread.sort(["ts_ns", "end_ns"], descending=[False, True], nulls_last=True)
        n += int(ordered.select(crosses.fill_null(False).sum()).item())
    return n
