"""The nodes of the dependency graph (`dependency_graph` explains them and builds the edges):
the CPU slices of every thread that matters for the GPU, and the GPU activities.

A trace of 300 MB cuts its launching threads into ~1 M slices, so the slices are found and
looked up on one sortable int64 per (thread, instant), a `ThreadClock`: one sort of a single
column instead of a sort by (pid, tid, time), and binary searches in the sorted slices instead of
hash joins of a million rows on three keys. A trace whose times do not fit one int64 per thread
(damaged timestamps) takes the same steps by sorts and joins on the keys themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceanalyzer.analyses.cpu_activity import LAYERS, THREAD, CpuActivity, launch_calls, main_thread
from traceanalyzer.analyses.graph_table import narrow
from traceanalyzer.analyses.intervals import covered
from traceanalyzer.links import innermost_containing
from traceanalyzer.trace import Trace

# Work the thread does, by layer; `thread_wait` slices are modelled as taking no time.
WORK_LAYERS = ("data_loading", "sync", "runtime_call", "launch", "cpu_op")
KEY_LIMIT = 1 << 62  # thread number x span must stay below it (room for the differences)


@dataclass(frozen=True)
class ThreadClock:
    """One sortable int64 per (thread, instant) on the graph's threads: thread number x span +
    (t - lo), thread numbers in (pid, tid) order, so that keys sort as (pid, tid, t) do.
    `threads`: pid, tid, _th (the thread number)."""

    threads: pl.DataFrame
    lo: int
    span: int

    @classmethod
    def of(cls, threads: pl.DataFrame, times: list[pl.DataFrame]) -> ThreadClock | None:
        """The clock of `threads` (sorted by pid, tid) for every instant of `times` (frames of
        one `lo` and one `hi` column each, their min and max), or None when one key per
        (thread, instant) would not fit an int64 or a time is null."""
        bounds = [
            df.select(
                lo=pl.col(df.columns[0]).min(), hi=pl.col(df.columns[1]).max(), n=df.null_count().sum_horizontal()
            )
            for df in times
            if df.height
        ]
        if not bounds or not threads.height:
            return None
        b = pl.concat(bounds).select(pl.col("lo").min(), pl.col("hi").max(), pl.col("n").sum()).row(0)
        if b[0] is None or b[2]:
            return None
        lo, span = int(b[0]), int(b[1]) - int(b[0]) + 1
        if threads.height * span >= KEY_LIMIT:
            return None
        return cls(threads.with_row_index("_th").with_columns(pl.col("_th").cast(pl.Int64)), lo, span)

    def number(self, df: pl.DataFrame) -> pl.Series:
        """The thread number of each row of `df` (pid, tid; null on a thread not in the graph)."""
        th = self.threads
        keys = df.select(pl.col(c).cast(th.schema[c]) for c in THREAD)
        return keys.join(th, on=THREAD, how="left", maintain_order="left")["_th"]

    def key(self, th: pl.Series, t: pl.Series) -> pl.Series:
        """The key of thread number `th` at `t` (null where `th` is)."""
        return pl.select((th * self.span + (t - self.lo)).alias("_key")).to_series()

    def until(self, index: pl.DataFrame) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """For a coverage index (`intervals.coverage_index` over pid, tid: disjoint intervals
        with `_before`), the time it covers up to each instant: f(th, t) -> int64 per instant, as
        `intervals.covered` counts it (the last interval starting at or before t on the thread).
        On numpy arrays: a binary search and gathers, no frame per call."""
        ix = index.join(self.threads, on=THREAD, how="inner", maintain_order="left")
        ikey = self.key(ix["_th"], ix["start_ns"])
        if not ikey.is_sorted():
            order = ikey.arg_sort()
            ix, ikey = ix[order], ikey.gather(order)
        keys = ikey.to_numpy()
        th_i, start, end, before = (ix[c].cast(pl.Int64).to_numpy() for c in ("_th", "start_ns", "end_ns", "_before"))

        def at(th: np.ndarray, t: np.ndarray) -> np.ndarray:
            if not len(keys):
                return np.zeros(len(t), dtype=np.int64)
            pos = np.searchsorted(keys, th * self.span + (t - self.lo), side="right") - 1
            p = np.maximum(pos, 0)
            found = (pos >= 0) & (th_i[p] == th)
            return np.where(found, before[p] + np.minimum(t, end[p]) - start[p], 0)

        return at


def graph_threads(trace: Trace, blocking: pl.DataFrame) -> pl.DataFrame:
    """The threads whose timelines matter for the GPU: they launch, block or run a step."""
    parts = [
        launch_calls(trace).select(*THREAD),
        blocking.select(*THREAD),
        trace.steps.select(*THREAD),
    ]
    main = main_thread(trace)
    if main:
        parts.append(pl.DataFrame({"pid": [main[0]], "tid": [main[1]]}))
    return pl.concat([p.cast({"pid": pl.Int64, "tid": pl.Int64}) for p in parts]).unique().sort(THREAD)


def _events(trace: Trace) -> list[pl.DataFrame]:
    """The CPU intervals that cut slices: ops, runtime calls and steps (pid, tid, ts_ns, end_ns)."""
    steps = trace.steps.select(*THREAD, ts_ns="cpu_start_ns", end_ns="cpu_end_ns")
    return [
        df.select(*THREAD, "ts_ns", "end_ns").cast({"pid": pl.Int64, "tid": pl.Int64})
        for df in (trace.ops, trace.runtime, steps)
    ]


def slices(trace: Trace, threads: pl.DataFrame, clock: ThreadClock | None) -> pl.DataFrame:
    """Consecutive [ts_ns, end_ns) pieces of each thread between all op, call and step
    boundaries, in (pid, tid, ts_ns) order; `_th` the thread number (with a clock)."""
    if clock is None:
        return _slices_by_keys(trace, threads)
    th = clock.threads
    ev = pl.concat([df.join(th, on=THREAD, how="inner").select("_th", "ts_ns", "end_ns") for df in _events(trace)])
    k = pl.concat([clock.key(ev["_th"], ev["ts_ns"]), clock.key(ev["_th"], ev["end_ns"])]).sort()
    del ev
    k = k.filter((k != k.shift(1)).fill_null(True))  # distinct boundaries: sorted, so by neighbours
    b = pl.DataFrame({"_th": k // clock.span}).with_columns(t=k - pl.col("_th") * clock.span + clock.lo)
    del k
    same = pl.col("_th") == pl.col("_th").shift(-1)
    b = b.with_columns(end_ns=pl.when(same).then(pl.col("t").shift(-1))).filter(pl.col("end_ns").is_not_null())
    pid, tid = th["pid"].gather(b["_th"]), th["tid"].gather(b["_th"])
    return b.select(pid=pid, tid=tid, ts_ns="t", end_ns="end_ns", _th="_th")


def _slices_by_keys(trace: Trace, threads: pl.DataFrame) -> pl.DataFrame:
    """`slices` by a sort on (pid, tid, t): for times no clock holds."""
    ev = pl.concat([df.join(threads, on=THREAD, how="semi") for df in _events(trace)])
    b = pl.concat([ev.select(*THREAD, t="ts_ns"), ev.select(*THREAD, t="end_ns")]).sort(*THREAD, "t")
    # distinct boundaries: a sorted frame drops its repeats by comparing neighbours (no hash)
    new = (pl.col("t") != pl.col("t").shift(1)) | (pl.col("tid") != pl.col("tid").shift(1))
    new = (new | (pl.col("pid") != pl.col("pid").shift(1))).fill_null(True)
    b = b.filter(new)
    same = (pl.col("tid") == pl.col("tid").shift(-1)) & (pl.col("pid") == pl.col("pid").shift(-1))
    b = b.with_columns(end_ns=pl.when(same).then(pl.col("t").shift(-1))).filter(pl.col("end_ns").is_not_null())
    return b.select(*THREAD, ts_ns="t", end_ns="end_ns")


def _layer_times(s: pl.DataFrame, act: CpuActivity, clock: ThreadClock | None) -> list[pl.Series]:
    """Per slice, the time each cumulative layer union covers inside it (`_u0`, `_u1`, ...)."""
    out = []
    if clock is not None:
        # A thread's slices are contiguous (each ends where the next begins), so the coverage up
        # to each slice's start is the one up to the previous slice's end: one search per slice.
        th, a, b = (s[c].cast(pl.Int64).to_numpy() for c in ("_th", "ts_ns", "end_ns"))
        first = np.ones(len(th), dtype=np.bool_)
        first[1:] = th[1:] != th[:-1]
        for k, index in enumerate(act.cumulative):
            until = clock.until(index)
            to_end = until(th, b)
            to_start = np.empty_like(to_end)
            to_start[1:] = to_end[:-1]
            to_start[first] = until(th[first], a[first])
            out.append(pl.Series(f"_u{k}", np.maximum(to_end - to_start, 0), dtype=pl.Int64))
        return out
    # `covered` sorts what it is given (twice per layer): a narrow copy, scattered back into the
    # slices' order
    times = s.select(*THREAD, "ts_ns", "end_ns").with_row_index("_r")
    for k, index in enumerate(act.cumulative):
        got = covered(times, index, THREAD, "ts_ns", "end_ns", "_u").select("_r", "_u")
        u = pl.Series(f"_u{k}", [], dtype=got.schema["_u"]).extend_constant(None, s.height)
        out.append(u.scatter(got["_r"], got["_u"]))
    return out


def cpu_nodes(
    trace: Trace, act: CpuActivity, threads: pl.DataFrame, wait_ns: int, clock: ThreadClock | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The CPU slices with their runtime call, innermost op, layer times and kind (see
    `dependency_graph`), and the forks (pid, gap_a, gap_b: gaps of the main thread while
    another launching thread works)."""
    s = slices(trace, threads, clock)
    rt = trace.runtime.select(*THREAD, "ts_ns", "end_ns", "runtime_id", "name").with_columns(
        parent_id=pl.lit(None, pl.Int64)
    )
    s = innermost_containing(s, rt, "runtime_id", "runtime_id")
    s = innermost_containing(s, trace.ops, "op_id", "op_id")
    s = s.with_columns(_layer_times(s, act, clock))
    layers = [
        (pl.col(f"_u{k}") - (pl.col(f"_u{k - 1}") if k else 0)).clip(0).alias(f"t_{n}") for k, n in enumerate(LAYERS)
    ]
    s = s.with_columns(layers).with_columns(
        t_untraced=(pl.col("end_ns") - pl.col("ts_ns") - pl.col(f"_u{len(LAYERS) - 1}")).clip(0)
    )
    s = s.drop([f"_u{k}" for k in range(len(LAYERS))])
    names = ("data_loading", "sync", "runtime_call", "launch", "cpu_op", "python", "untraced")
    largest = pl.max_horizontal([pl.col(f"t_{n}") for n in names])
    kind = pl.when(pl.lit(False)).then(pl.lit(None, pl.String))
    for n in names:
        kind = kind.when(pl.col(f"t_{n}") >= largest).then(pl.lit(n))
    s = s.with_columns(kind=kind)  # in (pid, tid, ts_ns) order already: one row per distinct start
    # Waits on another thread. Idle: no work layer covers the slice (Python frames may).
    idle = pl.sum_horizontal([pl.col(f"t_{n}") for n in WORK_LAYERS]) == 0
    s = s.with_columns(_idle=idle)
    main = main_thread(trace)
    is_main = (pl.col("pid") == (main[0] if main else -1)) & (pl.col("tid") == (main[1] if main else -1))
    s = s.with_columns(_main=is_main.fill_null(False))
    # other threads: a slice with no event at all is the thread waiting for work
    s = s.with_columns(_wait=~pl.col("_main") & (pl.col("t_untraced") == pl.col("end_ns") - pl.col("ts_ns")))
    forks = _forks(s, wait_ns)
    # the gap (if any) each slice starts in, by an as-of join of the start times alone: the slices
    # stay in thread order, and the wide table is never sorted again
    gap_b = pl.repeat(None, s.height, dtype=pl.Int64, eager=True)
    if forks.height:
        at = s.select("ts_ns").with_row_index("_r").sort("ts_ns")
        at = at.join_asof(
            forks.select("gap_a", "gap_b").sort("gap_a"),
            left_on="ts_ns",
            right_on="gap_a",
            strategy="backward",
            check_sortedness=False,
        )
        gap_b = at.sort("_r")["gap_b"]
    in_gap = pl.col("_main") & pl.col("_idle") & (pl.col("end_ns") <= gap_b).fill_null(False)
    s = s.with_columns(_wait=pl.col("_wait") | in_gap)
    s = s.with_columns(
        lane=pl.lit("cpu"),
        kind=pl.when(pl.col("_wait")).then(pl.lit("thread_wait")).otherwise(pl.col("kind")),
        dur_ns=pl.when(pl.col("_wait")).then(0).otherwise(pl.col("end_ns") - pl.col("ts_ns")),
    )
    # no names: `DependencyGraph.names` gathers them by id (runtime_id and op_id are row numbers)
    # narrow now what no join of `build_graph` reads (threads stay Int64 until the joins are done)
    ids_and_times = ["runtime_id", "op_id", *(f"t_{n}" for n in (*LAYERS, "untraced"))]
    return narrow(s.drop("_idle", "_main", "_wait"), ids_and_times), forks


def _forks(s: pl.DataFrame, wait_ns: int) -> pl.DataFrame:
    """Gaps of the main thread (no work layer) of at least `wait_ns` in which another thread of
    the process starts work: pid, gap_a, gap_b."""
    runs = (
        s.filter(pl.col("_main"))
        .with_columns(_run=(pl.col("_idle") != pl.col("_idle").shift(1)).fill_null(True).cum_sum())
        .filter(pl.col("_idle"))
        .group_by("_run")
        .agg(pl.col("pid").first(), gap_a=pl.col("ts_ns").min(), gap_b=pl.col("end_ns").max())
        .filter(pl.col("gap_b") - pl.col("gap_a") >= wait_ns)
    )
    busy_other = s.filter(~pl.col("_main") & ~pl.col("_idle")).select("pid", "tid", "ts_ns", "end_ns")
    forks = pl.DataFrame(schema={"pid": pl.Int64, "gap_a": pl.Int64, "gap_b": pl.Int64})
    if runs.height and busy_other.height:
        first = runs.sort("gap_a").join_asof(
            busy_other.sort("ts_ns").select("pid", _fts="ts_ns"),
            left_on="gap_a",
            right_on="_fts",
            by="pid",
            strategy="forward",
            check_sortedness=False,
        )
        forks = first.filter(pl.col("_fts") < pl.col("gap_b")).select("pid", "gap_a", "gap_b")
    return forks


def gpu_nodes(trace: Trace, collective_pattern: str) -> pl.DataFrame:
    """Every kernel, memcpy and memset with a device; a collective's `wait_ns` is its time
    beyond the shortest instance of the same kernel and message (waiting for its peers)."""
    g = trace.gpu.filter(pl.col("device").is_not_null()).select(
        "gpu_id",
        "kind",
        "name",
        "device",
        "stream",
        "ts_ns",
        "end_ns",
        "runtime_id",
        "op_id",
        "launch_ts_ns",
        "launch_pid",
        "launch_tid",
    )
    dims = trace.ops.select("op_id", "input_dims") if "input_dims" in trace.ops.columns else None
    coll = (pl.col("kind") == "kernel") & pl.col("name").str.contains(collective_pattern)
    g = g.with_columns(_coll=coll, dur_ns=pl.col("end_ns") - pl.col("ts_ns"))
    if dims is not None:
        g = g.join(dims, on="op_id", how="left")
    else:
        g = g.with_columns(input_dims=pl.lit(None, pl.String))
    # The shortest instance of one collective (same kernel, same message) is its transfer time.
    fastest = pl.col("dur_ns").min().over("name", "input_dims")
    return g.with_columns(
        lane=pl.lit("gpu"),
        kind=pl.when(pl.col("_coll")).then(pl.lit("collective")).otherwise(pl.col("kind").cast(pl.String)),
        wait_ns=pl.when(pl.col("_coll")).then(pl.col("dur_ns") - fastest).otherwise(0),
    ).drop("_coll", "input_dims", "name")


def slice_finder(cpu: pl.DataFrame, clock: ThreadClock | None, at: str) -> Callable[[pl.DataFrame, str], pl.Series]:
    """f(df, col) -> per row of `df` (pid, tid, col) the node of the CPU slice whose `at`
    (ts_ns or end_ns) is df[col] on its thread, null where none: a binary search in the slices'
    keys (they are sorted on their clock), or a join on (pid, tid, time) without a clock."""
    if clock is not None:
        keys = clock.key(cpu["_th"], cpu[at])
        n = keys.len()

        def by_key(df: pl.DataFrame, col: str) -> pl.Series:
            q = clock.key(clock.number(df), df[col].cast(pl.Int64))
            if not n:
                return pl.repeat(None, q.len(), dtype=pl.Int64, eager=True).alias("node")
            pos = keys.search_sorted(q, side="left").cast(pl.Int64)
            hit = ((pos < n) & (keys.gather(pos.clip(0, n - 1)) == q)).fill_null(False)
            return pl.select(pl.when(hit).then(pos)).to_series().alias("node")

        return by_key
    right = cpu.select(*THREAD, at, "node")

    def by_join(df: pl.DataFrame, col: str) -> pl.Series:
        q = df.select(pl.col(c).cast(pl.Int64) for c in THREAD).with_columns(df[col].alias(at))
        return q.join(right, on=[*THREAD, at], how="left", maintain_order="left")["node"]

    return by_join
