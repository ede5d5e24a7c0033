"""What each CPU thread was doing over time, as disjoint interval sets with prefix sums, so
that "how long was thread T blocked / loading data / busy inside [a, b]" is one join; and which
thread is the main one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.intervals import collected, coverage_index, filter_rows, merge, run_id, series_of
from traceanalyzer.analyses.layer_coverage import Bands, bounds, cumulative_unions, unband
from traceanalyzer.analyses.op_tree import ancestors, is_row_number
from traceanalyzer.causes import LAYERS
from traceanalyzer.patterns import COMPILED_WRAPPER, LAUNCH_API, PAGEABLE_COPY, PROFILER_STEP, SYNC_API, matches
from traceanalyzer.trace import Trace

THREAD = ["pid", "tid"]


def rows_at(table: pl.DataFrame, id_col: str, ids: pl.Series, **cols: str) -> pl.DataFrame:
    """Columns of the rows of `table` whose `id_col` is each of `ids` (null: none), one row per
    id in its order, renamed (`out=column`): a gather by row where the id is the row number
    (runtime_id, gpu_id and op_id of every Trace), else a left join. The gaps look calls up
    three times: a hash join against every runtime call each time cost more than the lookups'
    whole answer."""
    if is_row_number(table[id_col]):  # by UInt32 positions (null: null): `gather` is a polars query
        at = ids.cast(pl.UInt32)
        # the columns picked by name (no query; `get_column` of a trace table's one-valued
        # column would keep it in full, a picked frame's copy of it goes with the frame), then
        # each column's rows (a frame's `[rows]` with nulls in them was ~80 µs, a Series' ~2)
        picked = table[list(dict.fromkeys(cols.values()))]
        return pl.DataFrame([picked.get_column(c)[at].alias(out) for out, c in cols.items()])
    pick = [pl.col(c).alias(out) for out, c in cols.items()]
    keyed = table.select(pl.col(id_col).alias("_id"), *pick)
    return pl.DataFrame({"_id": ids}).join(keyed, on="_id", how="left", maintain_order="left").drop("_id")


def by_gap(n: int, found: pl.DataFrame) -> pl.DataFrame:
    """The columns of `found` (gap_id, then one row per gap found, in any order) as full
    columns of the `n` pieces, in gap_id order, null where a gap has no row: a gather by row
    number, as the pieces' gap_id is their row. A left join on gap_id instead copied every
    column of the pieces, once per join (~25 columns, 276 k rows at 1 GB). Series calls, by
    UInt32 positions: `repeat`, `drop` and `gather` were a polars query each (~25 µs)."""
    rows = found.with_row_index("_i").get_column("_i")
    at = pl.Series([None], dtype=pl.UInt32).new_from_index(0, n).scatter(found.get_column("gap_id"), rows)
    return pl.DataFrame([c[at] for c in found.get_columns() if c.name != "gap_id"])


def is_blocking(trace: Trace) -> pl.Expr:
    """Over the runtime table: whether a call holds the CPU thread until the GPU catches up (the
    synchronising APIs, and memcpy calls whose copy involves pageable host memory: those block
    even when Async)."""
    # the distinct ids as one list, in one query (a filter, `drop_nulls`, `unique` and `implode`
    # were a query each)
    pageable = (
        trace.gpu.lazy()
        .select("kind", "name", "runtime_id")
        .filter((pl.col("kind") == "memcpy") & pl.col("name").str.contains(PAGEABLE_COPY))
        .select(pl.col("runtime_id").drop_nulls().unique().implode())
        .collect()
        .to_series()
    )
    return pl.col("name").str.contains(SYNC_API) | pl.col("runtime_id").is_in(pageable)


def blocking_calls(trace: Trace) -> pl.DataFrame:
    """Runtime calls that hold the CPU thread until the GPU catches up (`is_blocking`)."""
    # A filter, not a join: the runtime table is one of the largest and is copied only in part.
    return trace.runtime.filter(is_blocking(trace))


def data_loading_ranges(trace: Trace, pattern: str) -> pl.DataFrame:
    """The ops and ranges whose name matches the data-loading pattern (once per Trace and
    pattern: the activity and the steps ask, ~0.3 ms each on a small rank)."""
    return trace.derived(
        f"data_loading_ranges {pattern}", lambda: trace.ops.filter(pl.col("name").str.contains(pattern))
    )


def call_runs(calls: pl.DataFrame, join_ns: float) -> pl.DataFrame:
    """Calls (pid, tid, name, ts_ns, end_ns: blocking calls, say) merged into runs of the same
    call on the same thread, a call joining the run when it starts within `join_ns` of the
    run's furthest end -> pid, tid, name, ts_ns, end_ns, calls, busy_ns (the time inside the
    calls), by thread, name and start. The timeline names `cudaEventSynchronize ×11` so."""
    by = ["pid", "tid", "name"]
    if calls.is_empty():
        return calls.select(*by, "ts_ns", "end_ns").with_columns(
            calls=pl.lit(0, pl.UInt32), busy_ns=pl.lit(0, pl.Int64)
        )
    s = calls.select(*by, "ts_ns", "end_ns").sort([*by, "ts_ns"])
    s = s.with_columns(_run=run_id("ts_ns", "end_ns", by, join=join_ns))
    return (
        s.group_by([*by, "_run"])
        .agg(
            pl.col("ts_ns").min(),
            pl.col("end_ns").max(),
            calls=pl.len(),
            busy_ns=(pl.col("end_ns") - pl.col("ts_ns")).sum(),
        )
        .drop("_run")
        .sort([*by, "ts_ns"])
    )


def main_thread(trace: Trace) -> tuple[int, int] | None:
    """The thread that drives the program: the one running the ProfilerSteps, else the one
    that launched the most GPU work, else the one with the most CPU op time."""
    if trace.steps.height:
        r = trace.steps.sort("cpu_start_ns").row(0, named=True)
        return r["pid"], r["tid"]
    g = (
        trace.gpu.filter(pl.col("launch_tid").is_not_null())
        .group_by("launch_pid", "launch_tid")
        .len()
        .sort(["len", "launch_pid", "launch_tid"], descending=[True, False, False])
    )
    if g.height:
        return g["launch_pid"][0], g["launch_tid"][0]
    if trace.ops.height:
        g = (
            trace.ops.group_by("pid", "tid")
            .agg(pl.col("dur_ns").sum())
            .sort(["dur_ns", "pid", "tid"], descending=[True, False, False])
        )
        return g["pid"][0], g["tid"][0]
    return None


def step_threads(trace: Trace) -> pl.DataFrame:
    """step, pid, tid: the thread each step window is judged from (its ProfilerStep's thread;
    without steps, the main thread for the one window)."""
    if trace.steps.height:
        return trace.steps[["step", "pid", "tid"]]  # picked by name: no query
    main = main_thread(trace)
    return pl.DataFrame(
        {"step": [None], "pid": [main[0] if main else None], "tid": [main[1] if main else None]},
        schema={"step": pl.Int64, "pid": pl.Int64, "tid": pl.Int64},
    )


def step_thread_of(trace: Trace, at: pl.DataFrame) -> pl.DataFrame:
    """step_pid, step_tid for each row of `at` (step, device): the step's thread (`step_threads`),
    one per row. Where several processes ran a step of that number (one ProfilerStep thread
    each), the thread of the process that launched most of the device's work; else the first."""
    # (renamed, picked and told unique by Series calls: a frame's `rename`, `select` and
    # `unique` were a query each, and every step is one thread's on most traces)
    t = step_threads(trace)
    threads = pl.DataFrame([t.get_column("step"), t.get_column("pid").alias("step_pid"), t["tid"].alias("step_tid")])
    if threads.get_column("step").n_unique() == threads.height:  # null is one value, as for `unique`
        return at[["step"]].join(threads, on="step", how="left", nulls_equal=True, maintain_order="left")
    first = threads.unique("step", keep="first", maintain_order=True)
    owner = (
        trace.gpu.select("device", step_pid=pl.col("launch_pid"))
        .drop_nulls()
        .group_by("device")
        .agg(pl.col("step_pid").mode().min())
    )
    own = threads.unique(["step", "step_pid"], keep="first", maintain_order=True)
    mine = at.join(owner, on="device", how="left", maintain_order="left").join(
        own, on=["step", "step_pid"], how="left", nulls_equal=True, maintain_order="left"
    )
    fallback = at.select("step").join(first, on="step", how="left", nulls_equal=True, maintain_order="left")
    found = mine.get_column("step_tid").is_not_null()
    return pl.DataFrame(
        [
            mine.get_column("step_pid").zip_with(found, fallback.get_column("step_pid")),
            mine.get_column("step_tid").zip_with(found, fallback.get_column("step_tid")),
        ]
    )


def is_launch(trace: Trace) -> pl.Expr:
    """Over the runtime table: whether a call puts work on the GPU (its correlation reaches a GPU
    activity, or it is named like a launch: `cudaLaunchKernel`, `cudaGraphLaunch`, async memcpy
    or memset, even when its work was not recorded)."""
    with_work = trace.gpu.select(pl.col("runtime_id").drop_nulls().unique().implode()).to_series()  # one query
    # the pattern tried once per distinct name (a few hundred), not per call (400k at 311 MB: 13 ms)
    names = trace.runtime.select(pl.col("name").unique()).to_series()
    named = pl.lit(names.filter(matches(names, LAUNCH_API))).implode()  # in the expression: no query
    return pl.col("runtime_id").is_in(with_work) | pl.col("name").is_in(named)  # null where a name is, as before


def launch_calls(trace: Trace, runtime: pl.DataFrame | None = None) -> pl.DataFrame:
    """Runtime calls that put work on the GPU (`is_launch`). `runtime`: the trace's runtime
    table or some of its columns (with runtime_id and name), to copy no more than needed."""
    return (trace.runtime if runtime is None else runtime).filter(is_launch(trace))


def _launching_ops(trace: Trace, launch_op_ids: pl.Series) -> tuple[pl.Series, pl.Series]:
    """The ops issuing launches (those around a launch call, but a compiled-code wrapper only
    when the call is its own) and the compiled-code wrappers above a launch: op_ids each. The
    names are tested once per distinct ancestor, not once per (op, ancestor) pair."""
    up = ancestors(trace.ops, launch_op_ids.to_frame().select(pl.first().drop_nulls().unique()).to_series())
    own = up.get_column("ancestor_id").filter(up.get_column("level") == 0)  # Series calls: no query
    above = up.get_column("ancestor_id").unique()
    del up
    names = rows_at(trace.ops, "op_id", above, _name="name")
    wrapper = names.select(pl.col("_name").fill_null("").str.contains(COMPILED_WRAPPER)).to_series()
    del names
    return pl.concat([own, above.filter(~wrapper)]).unique(), above.filter(wrapper)


@dataclass(frozen=True)
class CpuActivity:
    """Per-thread coverage indexes: `blocked` (in synchronising calls) and, for the exclusive
    split of a CPU interval, `cumulative[k]`: the union of the interval sets of LAYERS[0..k]
    (`causes.LAYERS`, the priority order), so that the time of layer k alone is
    covered(cumulative[k]) - covered(cumulative[k-1])."""

    blocked: pl.DataFrame
    # the unions as `cumulative_unions` keeps them: on its bands' axis when `bands` (what the
    # classification measures), keyed otherwise; `cumulative` gives them keyed
    unions: tuple[pl.DataFrame, ...]
    blocking: pl.DataFrame  # the blocking calls themselves (runtime rows)
    data_ranges: pl.DataFrame
    # runtime calls that neither launch nor synchronise: their runtime_id only (rows of Trace.runtime)
    runtime_other: pl.DataFrame
    bands: Bands | None = None  # how `unions` numbered the threads (layer_coverage.covered_many reads it)
    # per runtime call whether it launches (`is_launch`: a bit a call), for the dependency graph's threads
    launches: pl.Series | None = None

    @property
    def cumulative(self) -> tuple[pl.DataFrame, ...]:
        """The unions of LAYERS[0..k] as coverage indexes over pid, tid (start_ns, end_ns,
        _before, `intervals.coverage_index`), made from `unions` when asked: a reader that
        measures on the bands' axis keeps 24 bytes a row, not 44 (1 GB: -30 MB)."""
        made: dict[int, pl.DataFrame] = {}  # an index shared by two layers stays shared
        for u in self.unions:
            if id(u) not in made:
                made[id(u)] = unband(u, self.bands, THREAD)
        return tuple(made[id(u)] for u in self.unions)

    def bounds(self) -> list[pl.DataFrame]:
        """Per distinct union, start_ns and end_ns frames of its least start and greatest end
        (`layer_coverage.bounds`: what a clock over them reads, without a keyed copy)."""
        made: dict[int, pl.DataFrame] = {}
        for u in self.unions:
            if id(u) not in made:
                made[id(u)] = bounds(u, self.bands)
        return list(made.values())

    @classmethod
    def of(cls, trace: Trace, data_pattern: str) -> CpuActivity:
        """Build the indexes from a trace and the data-loading pattern."""
        data = data_loading_ranges(trace, data_pattern)
        # Each runtime call is blocking, else a launch, else another call: two masks, one pass.
        kind = trace.runtime.select(_blocks=is_blocking(trace), _launches=is_launch(trace))
        blocks, launches_ = kind.get_column("_blocks"), kind.get_column("_launches")
        blocking = trace.runtime.filter(blocks)
        # Narrow columns: most runtime rows are launches, and the wide table is among the largest.
        # Each layer but the two kept is a mask and a function that builds it (`build`): the
        # unions build one at a time and let it go once merged in; built all at once, every
        # later layer sat beside the one being sorted (1 GB: ~30 MB).
        # (columns picked by name and small frames filtered by Series: a frame's `select` and
        # `filter` are a polars query each, ~30-60 µs, and a DLRM rank built its layers with ~70)
        four = [*THREAD, "ts_ns", "end_ns"]
        rt = trace.runtime[four]
        is_launch_call, is_other = launches_ & ~blocks, ~launches_ & ~blocks
        other_ids = filter_rows(trace.runtime[["runtime_id"]], is_other)
        del kind, blocks
        # An op that launches GPU work (itself or through the ops inside it: aten::linear over
        # aten::addmm, an autograd node over its aten ops) is issuing launches: its CPU time is
        # launch overhead. A compiled-code wrapper (`Torch-Compiled Region`, `TorchDynamo Cache
        # Lookup`, AOT wrappers: patterns.COMPILED_WRAPPER) is not: the Python it runs between
        # launches is CPU-bound work, as the ops that launch nothing are.
        launching, wrappers = _launching_ops(trace, trace.runtime.get_column("op_id").filter(is_launch_call))
        # Ranges (record_function, ProfilerStep) say where the thread was, not that it worked.
        # Masks over the whole op table (one query for all three), then one filter of four
        # columns per layer: a filtered copy carrying the names (to test them) cost 30 MB at
        # 1 GB, never read after. Each op's part marked once (two lookups), then split by the marks.
        real = ((pl.col("kind") == "cpu_op") & ~pl.col("name").str.contains(PROFILER_STEP)).fill_null(False)
        launching_op = pl.col("_real") & pl.col("op_id").is_in(pl.lit(launching).implode())
        # Such a wrapper holds the Python frames that run the compiled code (dynamo, AOT, the
        # Inductor `call`): its time outside the launches is Python's, so it joins that layer.
        # A compiled wrapper's own time is Python (the generated code), not an op's.
        wrapper_op = pl.col("_real") & pl.col("op_id").is_in(pl.lit(wrappers).implode()) & ~pl.col("_l")
        # each mark a column once (the names tested once, not in each of three expressions)
        marks = collected(
            trace.ops.lazy()
            .select("op_id", _real=real)
            .with_columns(_l=launching_op)
            .with_columns(_w=wrapper_op)
            .select("_l", "_w", _c=pl.col("_real") & ~pl.col("_l") & ~pl.col("_w"))
        )
        is_launching, is_wrapper, is_cpu_op = marks.get_columns()
        del marks, launching, wrappers
        ops = trace.ops[four]
        python = trace.python[four]
        # One interval set per layer, by name (causes.LAYERS says the order they win in).
        sets = {
            "data_loading": lambda: data,
            "sync": lambda: blocking,
            "runtime_call": lambda: filter_rows(rt, is_other),
            "launch": lambda: pl.concat([filter_rows(rt, is_launch_call), filter_rows(ops, is_launching)]),
            "cpu_op": lambda: filter_rows(ops, is_cpu_op),
            "python": lambda: pl.concat([python, filter_rows(ops, is_wrapper)]),
        }
        assert set(sets) == set(LAYERS), sorted(set(sets) ^ set(LAYERS))
        # The union of layers 0..k for each k (`layer_coverage.cumulative_unions`: one sort per layer).
        names = {"pid": "pid", "tid": "tid", "ts_ns": "start_ns", "end_ns": "end_ns"}

        def build(name: str) -> Callable[[], pl.DataFrame]:
            # a frame of its four columns as Int64 Series (a `select` and a `cast` were two queries)
            return lambda: pl.DataFrame(
                [c.cast(pl.Int64).alias(names[c.name]) for c in series_of(sets[name](), list(names))]
            )

        cumulative, bands = cumulative_unions([build(name) for name in LAYERS], THREAD)  # masks left: bits
        return cls(
            blocked=coverage_index(merge(blocking, THREAD), THREAD, presorted=True),
            unions=tuple(cumulative),
            blocking=blocking,
            data_ranges=data,
            runtime_other=other_ids,
            bands=bands,
            launches=launches_,
        )
