"""The nodes of the dependency graph (`dependency_graph` explains them and builds the edges):
the CPU slices of every thread that matters for the GPU, and the GPU activities.

A trace of 300 MB cuts its launching threads into ~1 M slices, so the slices are found and
looked up on one sortable int64 per (thread, instant), a `ThreadClock`: one sort of a single
column instead of a sort by (pid, tid, time), and binary searches in the sorted slices instead of
hash joins of a million rows on three keys. A trace whose times do not fit one int64 per thread
(damaged timestamps) takes the same steps by sorts and joins on the keys themselves.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable

import numpy as np
import polars as pl

from traceanalyzer.analyses.cpu_activity import LAYERS, THREAD, CpuActivity, launch_calls, main_thread
from traceanalyzer.analyses.graph_table import narrow, trim_heap
from traceanalyzer.analyses.intervals import covered
from traceanalyzer.analyses.slice_kinds import (
    CPU_KINDS,
    KIND_LAYERS,
    THREAD_WAIT,
    WORK_LAYERS,
    Layers,
    coverages,
    slice_kinds,
)
from traceanalyzer.analyses.thread_clock import ThreadClock
from traceanalyzer.links import innermost_containing
from traceanalyzer.trace import Trace


def graph_threads(trace: Trace, blocking: pl.DataFrame, launches: pl.Series | None = None) -> pl.DataFrame:
    """The threads whose timelines matter for the GPU: they launch, block or run a step.
    `launches`: per runtime call whether it launches (`CpuActivity.launches`), if known (else
    tested again: 16 ms at 311 MB)."""
    if launches is not None and launches.len() == trace.runtime.height:
        launching = trace.runtime[list(THREAD)].filter(launches)
    else:
        launching = launch_calls(trace, trace.runtime.select("runtime_id", "name", *THREAD)).select(*THREAD)
    parts = [
        launching,
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


def slices(
    trace: Trace, threads: pl.DataFrame, clock: ThreadClock | None, numbers: dict[str, np.ndarray] | None = None
) -> pl.DataFrame:
    """Consecutive [ts_ns, end_ns) pieces of each thread between all op, call and step
    boundaries, in (pid, tid, ts_ns) order: pid, tid, ts_ns, end_ns; with a clock ts_ns, end_ns
    and `_th`, the thread number (Int32), in place of pid and tid (`numbers`: those of the ops'
    and runtime calls' rows, if known, under "ops" and "runtime")."""
    if clock is None:
        return _slices_by_keys(trace, threads)
    # every boundary's key on numpy arrays: numpy sorts int64 several times faster than polars
    # (written straight into the array sorted: a key array per table and column, then their
    # concatenation, were 11 MB of fresh pages more at 311 MB)
    known = numbers or {}
    events = list(zip(("ops", "runtime", "steps"), _events(trace), strict=True))
    ths = [known[name] if name in known else clock.numbers(df) for name, df in events]
    k = _mapped(2 * sum(int((th >= 0).sum()) for th in ths))  # sorted in place, on a mapping of its own
    at = 0
    for (_, df), th in zip(events, ths, strict=True):
        mine = th >= 0
        every = bool(mine.all())
        base = th[mine] if not every else th.astype(np.int64, copy=True)
        base *= clock.span
        base -= clock.lo
        for c in ("ts_ns", "end_ns"):
            t = df[c].cast(pl.Int64).to_numpy()
            np.add(base, t if every else t[mine], out=k[at : at + len(base)])
            at += len(base)
        del base, mine
    del events, ths
    k.sort(kind="stable")  # timsort: each table's keys come in long sorted runs (8x quicksort's speed)
    if len(k):
        new = np.empty(len(k), dtype=np.bool_)  # distinct boundaries: sorted, so by neighbours
        new[0] = True
        np.not_equal(k[1:], k[:-1], out=new[1:])
        k = k[new]
        del new
    # the keys are sorted, so each thread's are one run (a band of the clock): its slices go from
    # each of its boundaries to the next, written a thread at a time (a few threads: no thread
    # number per key, no division of a million keys)
    bands = np.searchsorted(k, np.arange(clock.threads.height + 1, dtype=np.int64) * clock.span)
    count = np.maximum(np.diff(bands) - 1, 0)
    ts, end = np.empty(int(count.sum()), dtype=np.int64), np.empty(int(count.sum()), dtype=np.int64)
    th = np.repeat(np.arange(clock.threads.height, dtype=np.int32), count)
    at = 0
    for t in np.flatnonzero(count).tolist():
        a, b, c = int(bands[t]), int(bands[t + 1]), int(count[t])
        off = t * clock.span - clock.lo
        np.subtract(k[a : b - 1], off, out=ts[at : at + c])
        np.subtract(k[a + 1 : b], off, out=end[at : at + c])
        at += c
    del k, bands
    # no pid and tid per slice (16 MB at 311 MB): the thread number says both (`ThreadClock.threads`)
    return pl.DataFrame({"ts_ns": ts, "end_ns": end, "_th": th})


def _mapped(n: int) -> np.ndarray:
    """A writable int64 array of n on an anonymous mapping of its own, unmapped when let go.

    The slices' boundary keys are the largest numpy array of the model (11 MB at 311 MB). From
    malloc, its free raised glibc's mmap threshold past the arrays of one value per edge, which
    `replay.prepare` then took from the heap and left resident (+19 MB of RSS held through the
    findings at 311 MB, for the same live bytes)."""
    if not n:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(mmap.mmap(-1, n * 8), dtype=np.int64)


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
        th, a, b = (s[c].cast(pl.Int64).to_numpy() for c in ("_th", "ts_ns", "end_ns"))
        return [pl.Series(f"_u{k}", u, dtype=pl.Int64) for k, u in enumerate(coverages(th, a, b, act, clock))]
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
) -> tuple[pl.DataFrame, pl.DataFrame, Layers | None]:
    """The CPU slices with their runtime call, innermost op, layer times and kind (see
    `dependency_graph`), the forks (pid, gap_a, gap_b: gaps of the main thread while
    another launching thread works), and on the clock the layer times as the graph holds them
    (`graph_table.layer_table`'s two parts; None: they are the slices' t_<layer> columns)."""
    # each row's thread number, once per table: the slices and the innermost calls and ops read it
    numbers = {"ops": clock.numbers(trace.ops), "runtime": clock.numbers(trace.runtime)} if clock else None
    s = slices(trace, threads, clock, numbers)
    rt = trace.runtime.select(*THREAD, "ts_ns", "end_ns", "runtime_id", "name").with_columns(
        parent_id=pl.lit(None, pl.Int64)
    )
    if clock is not None:
        at = clock.points(s)  # the slices' keys, searched for both
        inner_rt = clock.innermost(s, rt, "runtime_id", numbers["runtime"], at)
        s = s.with_columns(inner_rt, clock.innermost(s, trace.ops, "op_id", numbers["ops"], at))
        del numbers, inner_rt, at
        del rt
        trim_heap()  # the searches' arrays, freed, under the layer times made next
        s, forks, layers = slice_kinds(act, s, wait_ns, clock, main_thread(trace))
        trim_heap()  # the fold's arrays, freed under the slices (12 MB of RSS held to the edges at 311 MB)
        return narrow(s, ["runtime_id", "op_id"]), forks, layers
    s = innermost_containing(s, rt, "runtime_id", "runtime_id")
    s = innermost_containing(s, trace.ops, "op_id", "op_id")
    del rt
    s = s.with_columns(_layer_times(s, act, clock))
    layers = [
        (pl.col(f"_u{k}") - (pl.col(f"_u{k - 1}") if k else 0)).clip(0).alias(f"t_{n}") for k, n in enumerate(LAYERS)
    ]
    s = s.with_columns(layers).with_columns(
        t_untraced=(pl.col("end_ns") - pl.col("ts_ns") - pl.col(f"_u{len(LAYERS) - 1}")).clip(0)
    )
    s = s.drop([f"_u{k}" for k in range(len(LAYERS))])
    s = s.with_columns(_kind=_kind_code(s))  # in (pid, tid, ts_ns) order already: one row per distinct start
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
        # a binary search of the start times in the gaps' (disjoint, sorted) starts, in the slices'
        # own order: no sort of a million start times and back
        f = forks.select("gap_a", "gap_b").sort("gap_a")
        pos = f["gap_a"].search_sorted(s["ts_ns"], side="right").cast(pl.Int64) - 1
        gap_b = pl.select(pl.when(pos >= 0).then(f["gap_b"].gather(pos.clip(0)))).to_series()
        del f, pos
    in_gap = pl.col("_main") & pl.col("_idle") & (pl.col("end_ns") <= gap_b).fill_null(False)
    s = s.with_columns(_wait=pl.col("_wait") | in_gap)
    code = s.select(pl.when(pl.col("_wait")).then(pl.lit(THREAD_WAIT, pl.Int8)).otherwise(pl.col("_kind")))
    s = s.with_columns(
        lane=pl.lit("cpu"),
        kind=pl.Series(CPU_KINDS).gather(code.to_series()),
        dur_ns=pl.when(pl.col("_wait")).then(0).otherwise(pl.col("end_ns") - pl.col("ts_ns")),
    )
    # no names: `DependencyGraph.names` gathers them by id (runtime_id and op_id are row numbers)
    # narrow now what no join of `build_graph` reads (threads stay Int64 until the joins are done)
    ids_and_times = ["runtime_id", "op_id", *(f"t_{n}" for n in (*LAYERS, "untraced"))]
    return narrow(s.drop("_idle", "_main", "_wait", "_kind"), ids_and_times), forks, None


def _kind_code(s: pl.DataFrame) -> pl.Series:
    """Per slice, the index in KIND_LAYERS of the layer with the largest time (`t_<layer>`; the
    first of equal ones; null where every time is): a running maximum over the layers on int64
    arrays, named once at the end by a gather (a when-chain of the seven, on a million slices,
    cost 0.2 s at 311 MB; all seven as one array would hold 56 MB)."""
    best = s[f"t_{KIND_LAYERS[0]}"].cast(pl.Int64).fill_null(-1).to_numpy().copy()
    code = np.zeros(len(best), dtype=np.int8)
    for k, n in enumerate(KIND_LAYERS[1:], start=1):
        t = s[f"t_{n}"].cast(pl.Int64).fill_null(-1).to_numpy()  # times are >= 0: -1 never wins
        more = t > best
        code[more] = k
        np.maximum(best, t, out=best)
    out = pl.Series("_kind", code, dtype=pl.Int8)
    return out.scatter(np.flatnonzero(best < 0), None) if (best < 0).any() else out


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
    g = g.with_columns(dur_ns=pl.col("end_ns") - pl.col("ts_ns"))
    # Only a kernel named like a collective waits, and its shortest instance is one of its own
    # name: the window over (name, message) runs on those rows alone (over all 300k activities,
    # with a join of every op's input shapes, it cost 50 ms at 311 MB).
    # the pattern tried once per distinct name (a hundred kernels, not 300k activities)
    names = g.select(pl.col("name").unique()).to_series()
    hits = names.filter(names.str.contains(collective_pattern))
    named = pl.Series([], dtype=pl.UInt32)
    if hits.len():
        named = g.select(pl.col("name").is_in(hits.implode())).to_series().arg_true()
    wait = pl.repeat(0, g.height, dtype=pl.Int64, eager=True)
    if named.len():
        sub = g[named].select("kind", "name", "op_id", "dur_ns")
        if "input_dims" in trace.ops.columns:
            sub = sub.with_columns(input_dims=_op_dims(trace.ops, sub["op_id"]))
        else:
            sub = sub.with_columns(input_dims=pl.lit(None, pl.String))
        # The shortest instance of one collective (same kernel, same message) is its transfer time.
        fastest = pl.col("dur_ns").min().over("name", "input_dims")
        coll = sub.select(pl.when(pl.col("kind") == "kernel").then(pl.col("dur_ns") - fastest).otherwise(0)).to_series()
        wait = wait.scatter(named, coll)
        del sub, coll
    is_coll = pl.lit(pl.repeat(False, g.height, eager=True).scatter(named, True)) & (pl.col("kind") == "kernel")
    return g.with_columns(
        lane=pl.lit("gpu"),
        kind=pl.when(is_coll).then(pl.lit("collective")).otherwise(pl.col("kind").cast(pl.String)),
        wait_ns=wait,
    ).drop("name")


def _op_dims(ops: pl.DataFrame, op_id: pl.Series) -> pl.Series:
    """The input shapes of the ops `op_id` (null where none): gathered by row where the op ids
    are the row numbers (as the loader numbers them), else by a join."""
    ids = ops["op_id"]
    n = ids.len()
    rows = n > 0 and ids.null_count() == 0 and ids[0] == 0 and ids[-1] == n - 1
    known = op_id.drop_nulls()
    in_range = not known.len() or (known.min() >= 0 and known.max() < n)
    if rows and in_range and (n < 2 or ids.diff().drop_nulls().min() >= 1):
        return ops["input_dims"].gather(op_id)
    dims = ops.select("op_id", "input_dims").unique("op_id", keep="first", maintain_order=True)
    return op_id.to_frame("op_id").join(dims, on="op_id", how="left", maintain_order="left")["input_dims"]


def slice_finder(cpu: pl.DataFrame, clock: ThreadClock | None, at: str) -> Callable[[pl.DataFrame, str], pl.Series]:
    """f(df, col) -> per row of `df` (pid, tid, col) the node of the CPU slice whose `at`
    (ts_ns or end_ns) is df[col] on its thread, null where none: a binary search in the slices'
    keys (they are sorted on their clock), or a join on (pid, tid, time) without a clock."""
    if clock is not None:
        # each thread's slices are a run of rows in time order (key order): a search in its run
        # of `at` (the column read in place), no key per slice (two columns of a million keys
        # cost 18 ms at 311 MB)
        th, times = cpu["_th"].to_numpy(), cpu[at].cast(pl.Int64).to_numpy()
        runs = np.searchsorted(th, np.arange(clock.threads.height + 1, dtype=th.dtype))

        def by_key(df: pl.DataFrame, col: str) -> pl.Series:
            q_th, t = clock.numbers(df), df[col].cast(pl.Int64)
            known = (q_th >= 0) & t.is_not_null().to_numpy()
            q = t.fill_null(0).to_numpy()
            node = np.full(len(q), -1, dtype=np.int64)
            for k in np.flatnonzero(np.bincount(q_th[known], minlength=len(runs) - 1)).tolist():
                rows = np.flatnonzero(known & (q_th == k))
                lo, hi = int(runs[k]), int(runs[k + 1])
                pos = np.searchsorted(times[lo:hi], q[rows], side="left")
                hit = pos < hi - lo
                hit[hit] = times[lo + pos[hit]] == q[rows[hit]]
                node[rows[hit]] = lo + pos[hit]
            out = pl.Series("node", node)
            return out.set(out < 0, None)

        return by_key
    right = cpu.select(*THREAD, at, "node")

    def by_join(df: pl.DataFrame, col: str) -> pl.Series:
        q = df.select(pl.col(c).cast(pl.Int64) for c in THREAD).with_columns(df[col].alias(at))
        return q.join(right, on=[*THREAD, at], how="left", maintain_order="left")["node"]

    return by_join
