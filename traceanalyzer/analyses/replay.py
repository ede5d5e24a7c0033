"""A small discrete-event replay of a dependency graph: every node starts when all that it
depends on is ready, and lasts its (possibly changed) duration.

A node's start is the latest of its start edges' ready times (source end, or source start for a
launch, plus the edge's lag); a node with no start edge keeps its captured start. Its end is its
start plus its duration; a sync's end is the later of its start plus its own time and its
`to_end` edges' ready times. The graph's lags make a replay with nothing changed reproduce the
capture (see `dependency_graph`).

This is the one loop over nodes in the tool: a dependency chain is sequential by nature. It
runs over plain Python lists in a topological order computed once per graph; about 1 µs per
node and edge (0.3 s for 300k nodes; a 1 GB trace's ~10M slices take ~15 s per replay).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import polars as pl


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the loops below allocate millions of small lists and
    tuples that live until the loop ends, and each collection rescanned all of them (the walk of
    a 215k-node graph spent 90 % of its time in the collector)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True)
class Schedule:
    """start_ns / end_ns per node (lists indexed by node); `bind`: per node the edge index that
    set its start (-1: its own captured start); `end_bind`: the edge that set a sync's end (-1:
    its own time)."""

    start_ns: list[int]
    end_ns: list[int]
    bind: list[int]
    end_bind: list[int]


@dataclass(frozen=True)
class Prepared:
    """The graph as flat lists for the replay loop."""

    order: list[int]
    ts: list[int]
    src: list[int]
    lag: list[int]
    from_start: list[bool]
    start_in: list  # per node: its start edges (indexes)
    end_in: list  # per node: its to_end edges


def prepare(nodes: pl.DataFrame, edges: pl.DataFrame) -> Prepared:
    """The graph flattened and ordered for `replay` (see `_prepare`)."""
    with no_gc():
        return _prepare(nodes, edges)


def _prepare(nodes: pl.DataFrame, edges: pl.DataFrame) -> Prepared:
    """Flatten a dependency graph's nodes and edges and order them.

    The order is over events: item v is node v's start (and its end, when nothing but its
    duration sets that); item n + v is the end of a node with `to_end` edges, a sync, so that the
    copy a blocking call launches (from its start) can end before the call returns. Captured time
    order is tried first (vectorised, and checked against every edge); a trace whose clocks put
    an event before what it depends on is ordered by Kahn's algorithm instead (a cycle, only
    from a damaged trace, is broken at its earliest captured event)."""
    n = nodes.height
    e = edges.with_row_index("k").with_columns(pl.col("k").cast(pl.Int64))
    start_in = _grouped(e.filter(~pl.col("to_end")), n)
    end_in = _grouped(e.filter("to_end"), n)
    syncs = e.filter("to_end").select("dst").unique()
    is_sync = pl.Series([False] * n, dtype=pl.Boolean)
    if syncs.height:
        is_sync = is_sync.scatter(syncs["dst"], True)
    # the item at which a node's end is known
    end_item = pl.select(pl.when(is_sync).then(pl.int_range(n) + n).otherwise(pl.int_range(n))).to_series()
    before = (
        pl.when(pl.col("from_start") & ~pl.col("to_end"))
        .then(pl.col("src"))
        .otherwise(end_item.gather(e["src"]) if e.height else pl.lit(0))
    )
    after = pl.when(pl.col("to_end")).then(pl.col("dst") + n).otherwise(pl.col("dst"))
    deps = e.select(before=before, after=after).cast(pl.Int64)
    sync_ids = syncs["dst"].cast(pl.Int64) if syncs.height else pl.Series([], dtype=pl.Int64)
    deps = pl.concat([deps, pl.DataFrame({"before": sync_ids, "after": sync_ids + n})])
    lane = (nodes["lane"] == "gpu").cast(pl.Int64)
    items = pl.concat(
        [
            pl.DataFrame({"x": range(n), "t": nodes["ts_ns"], "endfirst": 1, "lane": lane}),
            pl.DataFrame(
                {"x": sync_ids + n, "t": nodes["end_ns"].gather(sync_ids), "endfirst": 0, "lane": lane.gather(sync_ids)}
            ),
        ],
        how="vertical_relaxed",
    ).sort("t", "endfirst", "lane", "x")
    order = items["x"]
    pos = pl.Series([0] * (2 * n), dtype=pl.Int64).scatter(order, pl.int_range(len(order), eager=True))
    ok = deps.is_empty() or bool((pos.gather(deps["before"]) < pos.gather(deps["after"])).all())
    out = order.to_list() if ok else _kahn(n, deps, order.to_list())
    ts = nodes["ts_ns"].to_list()
    return Prepared(
        out, ts, edges["src"].to_list(), edges["lag_ns"].to_list(), edges["from_start"].to_list(), start_in, end_in
    )


def _grouped(e: pl.DataFrame, n: int) -> list:
    """Per node, the indexes of the edges into it (an empty tuple for none)."""
    out: list = [()] * n
    g = e.group_by("dst").agg(pl.col("k").sort())
    for d, ks in zip(g["dst"].to_list(), g["k"].to_list(), strict=True):
        out[d] = ks
    return out


def _kahn(n: int, deps: pl.DataFrame, by_time: list[int]) -> list[int]:
    """A topological order of the items in `by_time` (captured order) under `deps`."""
    out: list[list[int]] = [[] for _ in range(2 * n)]
    indeg = [0] * (2 * n)
    for a, b in zip(deps["before"].to_list(), deps["after"].to_list(), strict=True):
        out[a].append(b)
        indeg[b] += 1
    ready = [x for x in reversed(by_time) if indeg[x] == 0]
    order: list[int] = []
    done = [False] * (2 * n)
    pos = 0  # next candidate in captured order, to break a cycle
    while len(order) < len(by_time):
        while ready:
            x = ready.pop()
            if done[x]:
                continue
            done[x] = True
            order.append(x)
            for y in out[x]:
                indeg[y] -= 1
                if indeg[y] == 0:
                    ready.append(y)
        while pos < len(by_time) and done[by_time[pos]]:
            pos += 1
        if pos < len(by_time):
            ready.append(by_time[pos])
    return order


def replay(
    p: Prepared, dur: list[int], own: list[int], lag: list[int] | None = None, cut: list[bool] | None = None
) -> Schedule:
    """Re-schedule the graph with these durations (see `_replay`)."""
    with no_gc():
        return _replay(p, dur, own, lag, cut)


def _replay(
    p: Prepared, dur: list[int], own: list[int], lag: list[int] | None = None, cut: list[bool] | None = None
) -> Schedule:
    """Re-schedule with these durations (`own`: a sync's own time), edge lags (default: the
    captured ones) and edges cut (`cut[k]`: edge k no longer binds, e.g. a removed sync)."""
    n = len(p.ts)
    lag = p.lag if lag is None else lag
    src, fs, start_in, end_in = p.src, p.from_start, p.start_in, p.end_in
    start = [0] * n
    end = [0] * n
    bind = [-1] * n
    end_bind = [-1] * n
    for x in p.order:
        if x >= n:  # a sync's end: its own time, or the GPU work it waits for and its return
            v = x - n
            e = start[v] + own[v]
            eb = -1
            for k in end_in[v]:
                if cut is not None and cut[k]:
                    continue
                r = end[src[k]] + lag[k]
                if r > e:
                    e, eb = r, k
            end[v], end_bind[v] = e, eb
            continue
        s = p.ts[x]
        b = -1
        for k in start_in[x]:
            if cut is not None and cut[k]:
                continue
            u = src[k]
            r = (start[u] if fs[k] else end[u]) + lag[k]
            if b < 0 or r > s:
                s, b = r, k
        start[x], bind[x] = s, b
        if not end_in[x]:
            end[x] = s + dur[x]
    return Schedule(start, end, bind, end_bind)


def step_times(
    graph_steps: pl.DataFrame, sched: Schedule, trace_steps: pl.DataFrame, gpu_launch: pl.DataFrame
) -> pl.DataFrame:
    """step, start_ns, end_ns of each step window in the replayed schedule, by the one definition
    of a step (`trace.extend_steps`) applied to replayed times. `gpu_launch`: node, launch_node
    (the slice that starts each GPU activity's launch call)."""
    from traceanalyzer.trace import extend_steps

    start = pl.Series(sched.start_ns, dtype=pl.Int64)
    end = pl.Series(sched.end_ns, dtype=pl.Int64)
    st = graph_steps.filter(pl.col("first_node").is_not_null() & pl.col("last_node").is_not_null())
    ranges = trace_steps.select("step", "name", "pid", "tid", "op_id").join(
        st.select("step", "first_node", "last_node"), on="step"
    )
    ranges = ranges.with_columns(
        cpu_start_ns=start.gather(ranges["first_node"]), cpu_end_ns=end.gather(ranges["last_node"])
    ).drop("first_node", "last_node")
    g = gpu_launch.with_columns(
        launch_ts_ns=pl.when(pl.col("launch_node").is_not_null()).then(
            start.gather(gpu_launch["launch_node"].fill_null(0))
        ),
        end_ns=end.gather(gpu_launch["node"]),
    )
    return extend_steps(ranges, g).select("step", "start_ns", "end_ns").sort("start_ns")


def calibrate(nodes: pl.DataFrame, edges: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Lags and own times that make a replay with nothing changed give the captured times.
    `nodes` are numbered 0..n-1 in row order; node times are gathered by position, so the wide
    node table (names and all) is never joined or sorted."""
    ts, end, dur = nodes["ts_ns"], nodes["end_ns"], nodes["dur_ns"]
    is_sync = pl.Series([False] * nodes.height, dtype=pl.Boolean)
    sync_dst = edges.filter("to_end")["dst"].unique()
    if sync_dst.len():
        is_sync = is_sync.scatter(sync_dst, True)
    # the modelled end of a node: start + duration, a sync's captured end
    mend = pl.select(pl.when(is_sync).then(end).otherwise(ts + dur)).to_series()
    src, dst = edges["src"], edges["dst"]
    e = edges.select("src", "dst", "etype", "from_start", "to_end").with_columns(
        edge=pl.int_range(edges.height),
        _ref=pl.when(pl.col("from_start")).then(ts.gather(src)).otherwise(mend.gather(src)),
        _target=pl.when(pl.col("to_end")).then(end.gather(dst)).otherwise(ts.gather(dst)),
    )
    e = e.with_columns(_lag0=(pl.col("_target") - pl.col("_ref")).clip(upper_bound=0)).with_columns(
        _ready=pl.col("_ref") + pl.col("_lag0")
    )
    # a sync's own time: what the call took after the latest work it waited for ended
    ends = e.filter("to_end").group_by("dst").agg(_maxref=pl.col("_ref").max())
    maxref = pl.Series([None] * nodes.height, dtype=pl.Int64)
    if ends.height:
        maxref = maxref.scatter(ends["dst"], ends["_maxref"])
    own = pl.select(
        pl.when(maxref.is_not_null()).then((end - pl.max_horizontal(ts, maxref)).clip(0, end - ts)).otherwise(dur)
    ).to_series()
    # the edge that binds each node's start (or a sync's end): the latest ready, first by index
    best = e.group_by("dst", "to_end").agg(
        pl.col("edge").sort_by("_ready", "edge", descending=[True, False]).first(),
        pl.col("_ready").max(),
        pl.col("_target").first(),
    )
    best = best.with_columns(_own_ready=(ts + own).gather(best["dst"]))
    # the binding edge carries the rest; for a sync whose own time binds, the own time does
    best = best.with_columns(_own_binds=pl.col("to_end") & (pl.col("_own_ready") >= pl.col("_ready"))).with_columns(
        _rest=pl.when(pl.col("_own_binds")).then(pl.lit(0)).otherwise(pl.col("_target") - pl.col("_ready")).clip(0)
    )
    rest = pl.Series([0] * edges.height, dtype=pl.Int64).scatter(best["edge"], best["_rest"])
    fix = best.filter("_own_binds")
    if fix.height:
        own = own.scatter(fix["dst"], own.gather(fix["dst"]) + (fix["_target"] - fix["_own_ready"]).clip(0))
    lag = e["_lag0"] + rest
    out = e.select("src", "dst", "etype", "from_start", "to_end").with_columns(lag_ns=lag)
    return nodes.with_columns(own_ns=own), out.sort("dst", "src")
