"""What each CPU slice of the dependency graph was doing (`graph_nodes` finds the slices): the
time each CPU layer covers inside it, its kind (the layer of the largest time, or a wait), its
modelled duration, and the forks of the main thread (gaps in which another thread works).

On the thread clock (`ThreadClock`) the slices come in key order, every thread's slices
contiguous and in time order, with no null time; so all of it is computed here on int64 arrays:
every layer in one native pass (`_fold_native`), else a layer at a time in numpy (the running
maximum that picks the kind, the work seen so far), and each column is made once, at its final
width: a polars column per helper (the layers' cumulative unions, their differences, the flags)
cost 0.25 s and ~100 MB at 311 MB. Each layer's times go straight into the form the graph holds
them in (`graph_table.LayerFold`), not into a column per layer (28 MB at 311 MB). `graph_nodes`
keeps the same rules in polars for the slices of a trace no clock holds (its t_<layer> columns
then go through `graph_table.layer_table`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from traceanalyzer.analyses.cpu_activity import LAYERS, CpuActivity
from traceanalyzer.analyses.graph_table import LayerFold
from traceanalyzer.analyses.replay import native_kernel
from traceanalyzer.analyses.thread_clock import ThreadClock

# Work the thread does, by layer; `thread_wait` slices are modelled as taking no time.
WORK_LAYERS = ("data_loading", "sync", "runtime_call", "launch", "cpu_op")
# A slice's kind: the layer of the largest time (the first in this order of equal ones), else it waits.
KIND_LAYERS = (*LAYERS, "untraced")
CPU_KINDS = (*KIND_LAYERS, "thread_wait")
THREAD_WAIT = len(KIND_LAYERS)


def coverages(
    th: np.ndarray, a: np.ndarray, b: np.ndarray, act: CpuActivity, clock: ThreadClock
) -> Iterator[np.ndarray]:
    """Per cumulative layer union, in order, the time it covers inside each slice (thread
    number `th`, [a, b), in key order), on the clock: int64 arrays, one alive at a time (a layer
    that adds nothing yields the previous union's array again)."""
    # A thread's slices are contiguous (each ends where the next begins), so the coverage up
    # to each slice's start is the one up to the previous slice's end: one search per slice.
    first = np.ones(len(th), dtype=np.bool_)
    first[1:] = th[1:] != th[:-1]
    done: dict[int, np.ndarray] = {}
    fn = native_kernel("covered_in")
    if fn is not None:
        th, a, b = (np.ascontiguousarray(x, dtype=np.int64) for x in (th, a, b))
    # the unions as `cumulative_unions` left them (on its bands): `act.cumulative` makes a keyed
    # copy of each (pid, tid, ...) at every call
    for index in act.unions:
        if id(index) not in done:
            done.clear()  # the previous union's times go before the next are made (8 MB at 311 MB)
        if id(index) not in done and fn is not None:
            # both ends of every slice in one merge, natively (ten passes over the slices in numpy)
            out = np.empty(len(th), dtype=np.int64)
            fn(th, a, b, clock.span, clock.lo, *clock.index_arrays(index, act.bands), out)
            done = {id(index): out}
            del out
        elif id(index) not in done:
            until = clock.until(index, act.bands)
            to_end = until(th, b)
            to_start = np.empty_like(to_end)
            to_start[1:] = to_end[:-1]
            to_start[first] = until(th[first], a[first])
            done = {id(index): np.maximum(to_end - to_start, 0)}
            del to_end, to_start
        yield done[id(index)]


Layers = tuple[pl.Series, pl.DataFrame]  # `graph_table.layer_table`'s layer_of and long table
Sink = Callable[[int, np.ndarray], None]  # takes layer k's time in every slice (KIND_LAYERS order)


def slice_kinds(
    act: CpuActivity, s: pl.DataFrame, wait_ns: int, clock: ThreadClock, main: tuple[int, int] | None
) -> tuple[pl.DataFrame, pl.DataFrame, Layers]:
    """`graph_nodes.cpu_nodes` on the clock: the slices `s` (ts_ns, end_ns, _th in key order,
    runtime_id, op_id) with lane, kind and dur_ns; the forks (pid, gap_a, gap_b) of the main
    thread `main`; and the slices' layer times as `graph_table.layer_table` holds them (folded
    a layer at a time, `LayerFold`: no t_<layer> column is made)."""
    th, a, b = (
        np.ascontiguousarray(s[c].cast(pl.Int64).to_numpy(), dtype=np.int64) for c in ("_th", "ts_ns", "end_ns")
    )
    layers = LayerFold(b - a, KIND_LAYERS)
    if native_kernel("fold_slices") is not None:
        code, busy, untraced_all = _fold_native(th, a, b, act, clock, layers)
    else:
        code, busy, untraced_all = _fold_numpy(th, a, b, act, clock, layers.add)
    me = thread_number(clock, main)
    is_main = th == me
    idle = ~busy
    del busy
    wait = ~is_main & untraced_all
    del untraced_all
    forks = _forks(th, a, b, is_main, idle, wait_ns, clock, main)
    if forks.height:
        # the gap (if any) each slice starts in: a binary search of the start times in the gaps'
        # (disjoint, sorted) starts
        # (the main thread's idle slices alone: only they can be waiting in a gap)
        ga, gb = forks["gap_a"].to_numpy(), forks["gap_b"].to_numpy()
        rows = np.flatnonzero(is_main & idle)
        pos = np.searchsorted(ga, a[rows], side="right") - 1
        wait[rows[(pos >= 0) & (b[rows] <= gb[np.maximum(pos, 0)])]] = True
        del ga, gb, pos, rows
    del is_main, idle
    code[wait] = THREAD_WAIT
    # an Enum (a byte per slice, as `build_graph` casts it) rather than a million strings
    kind = pl.Series(CPU_KINDS, dtype=pl.Enum(CPU_KINDS)).gather(code)
    del code
    dur = b - a  # (in place: np.where's temporaries were 16 MB at the build's peak, 311 MB)
    dur[wait] = 0
    parts = layers.parts(dur)
    del wait, th, a, b, layers
    # the lane a byte per slice, as `build_graph` casts it (a string per slice was 16 MB at 311 MB)
    lane = pl.lit("cpu", dtype=pl.Enum(["cpu", "gpu"]))
    return s.with_columns(lane=lane, kind=kind, dur_ns=dur), forks, parts


Folded = tuple[np.ndarray, np.ndarray, np.ndarray]


def _fold_numpy(
    th: np.ndarray, a: np.ndarray, b: np.ndarray, act: CpuActivity, clock: ThreadClock, sink: Sink
) -> Folded:
    """Per slice the kind code (the first layer of the largest time), whether a work layer
    covers any of it, and whether no layer does; the time of each layer and of no layer handed
    to `sink` as it is made (KIND_LAYERS order): a layer at a time on numpy arrays (the fallback
    of `_fold_native`)."""
    best, code, busy, prev = None, np.zeros(len(th), dtype=np.int8), np.zeros(len(th), dtype=np.bool_), None
    for k, (name, u) in enumerate(zip(LAYERS, coverages(th, a, b, act, clock), strict=True)):
        t = u if prev is None else np.maximum(u - prev, 0)
        prev = u
        best = _kind_step(k, t, best, code)
        sink(k, t)
        if name in WORK_LAYERS:
            busy |= t > 0
        del t
    t = np.maximum(b - a - prev, 0) if prev is not None else b - a
    del prev
    best = _kind_step(len(LAYERS), t, best, code)
    sink(len(LAYERS), t)
    del best
    # other threads: a slice with no event at all is the thread waiting for work
    return code, busy, t == b - a


def _fold_native(
    th: np.ndarray, a: np.ndarray, b: np.ndarray, act: CpuActivity, clock: ThreadClock, fold: LayerFold
) -> Folded:
    """`_fold_numpy` in one native pass over the slices (`_native.fold_slices`), every union's
    coverage merged at once, and `fold` given the layer times as `LayerFold.add` would keep
    them: no array of a layer's times is made (seven native calls and numpy between them held
    four int64 arrays of a million slices, 0.15 s at 311 MB). The unions' index arrays are held
    together (the distinct ones: 19 MB at 311 MB, fewer than those four arrays)."""
    n = len(th)
    # on the unions' bands where they have them (`_native.fold_bands`: no keyed copy of each)
    bands = act.bands if all("_t" in u.columns for u in act.unions) else None
    fold_bands = native_kernel("fold_bands") if bands is not None else None
    distinct: dict[int, int] = {}
    which, arrays = [], []
    for index in act.unions:
        if id(index) not in distinct:
            distinct[id(index)] = len(distinct)
            if fold_bands is not None:
                arrays.extend(
                    np.ascontiguousarray(index[c].cast(pl.Int64).to_numpy()) for c in ("_t", "_te", "_before")
                )
            else:
                arrays.extend(clock.index_arrays(index, act.bands))
        which.append(distinct[id(index)])
    code, busy, empty = np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8)
    full, count = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int8)
    work = [name in WORK_LAYERS for name in LAYERS]
    outs = (code.view(np.uint8), busy, empty, full.view(np.uint8), count.view(np.uint8))
    if fold_bands is not None:
        on = clock.numbers(bands.keys)  # a band's thread number (its row is its number), -1: none
        band_of = np.full(clock.threads.height, -1, dtype=np.int64)
        band_of[on[on >= 0]] = np.flatnonzero(on >= 0)
        got = fold_bands(th, a, b, band_of.tolist(), bands.span, bands.lo, arrays, which, work, *outs)
    else:
        got = native_kernel("fold_slices")(th, a, b, clock.span, clock.lo, arrays, which, work, *outs)
    del arrays
    fold.fill(full, count, [(np.frombuffer(at, dtype=np.int64), np.frombuffer(ns, dtype=np.int64)) for at, ns in got])
    return code, busy.view(np.bool_), empty.view(np.bool_)


def thread_number(clock: ThreadClock, thread: tuple[int, int] | None) -> int:
    """The clock's number of `thread` (pid, tid), -1 if none or not in the graph."""
    if thread is None:
        return -1
    th = clock.threads
    at = np.flatnonzero((th["pid"].to_numpy() == thread[0]) & (th["tid"].to_numpy() == thread[1]))
    return int(at[0]) if len(at) else -1


def _kind_step(k: int, t: np.ndarray, best: np.ndarray | None, code: np.ndarray) -> np.ndarray:
    """Layer k's time `t` into the running maximum `best` (code: the first layer of the largest
    time, `graph_nodes._kind_code`'s rule)."""
    if best is None:
        best = t.copy()
    else:
        code[t > best] = k
        np.maximum(best, t, out=best)
    return best


def _forks(
    th: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    is_main: np.ndarray,
    idle: np.ndarray,
    wait_ns: int,
    clock: ThreadClock,
    main: tuple[int, int] | None,
) -> pl.DataFrame:
    """`graph_nodes._forks` on the clock: the main thread's runs of idle slices (contiguous, in
    time order) of at least `wait_ns` in which another thread of its process starts work."""
    empty = pl.DataFrame(schema={"pid": pl.Int64, "gap_a": pl.Int64, "gap_b": pl.Int64})
    rows = np.flatnonzero(is_main)
    if main is None or not len(rows):
        return empty
    mi = idle[rows]
    starts = np.flatnonzero(mi & np.concatenate([[True], ~mi[:-1]]))
    ends = np.flatnonzero(mi & np.concatenate([~mi[1:], [True]]))
    gap_a, gap_b = a[rows[starts]], b[rows[ends]]
    del mi, starts, ends
    long = gap_b - gap_a >= wait_ns
    gap_a, gap_b = gap_a[long], gap_b[long]
    # the process's other threads, by a lookup of the few thread numbers
    same_pid = clock.threads["pid"].to_numpy() == main[0]
    work = np.sort(a[same_pid[th] & ~is_main & ~idle], kind="stable")  # in sorted runs: timsort
    if not len(gap_a) or not len(work):
        return empty
    # the first work of another thread of the process at or after the gap's start, before its end
    pos = np.searchsorted(work, gap_a, side="left")
    found = pos < len(work)
    found[found] = work[pos[found]] < gap_b[found]
    n = int(found.sum())
    return pl.DataFrame({"pid": np.full(n, main[0], dtype=np.int64), "gap_a": gap_a[found], "gap_b": gap_b[found]})
