"""A small discrete-event replay of a dependency graph: every node starts when all that it
depends on is ready, and lasts its (possibly changed) duration.

A node's start is the latest of its start edges' ready times (source end, or source start for a
launch, plus the edge's lag); a node with no start edge keeps its captured start. Its end is its
start plus its duration; a sync's end is the later of its start plus its own time and its
`to_end` edges' ready times. The graph's lags make a replay with nothing changed reproduce the
capture (see `dependency_graph`).

This is the one loop over nodes in the tool: a dependency chain is sequential by nature. The
graph is flattened once into arrays (CSR adjacency for each node's start and `to_end` edges) in
a topological order: times and lags int64, every index int32 (the order's items, the edges'
sources, the adjacency; about 16 bytes of graph per node and 17 per edge, held for the what-ifs),
and each replay runs the native loop (`traceanalyzer._native`, Rust, GIL released: ~10 ns per
node and edge) over them. Without the extension, with TRACEANALYZER_NATIVE=0, or on a graph too
big for int32 indexes (a billion nodes), the same loop runs in Python (`_replay`: about 1 µs per
node and edge, 0.3 s for 300k nodes).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.load import native


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the Python loops allocate millions of small lists and
    tuples that live until the loop ends, and each collection rescanned all of them (the walk of
    a 215k-node graph spent 90 % of its time in the collector)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True, eq=False)
class Schedule:
    """start_ns / end_ns per node (int64 arrays indexed by node); `bind`: per node the edge index
    that set its start (-1: its own captured start); `end_bind`: the edge that set a sync's end
    (-1: its own time, or not a sync); both of the graph's index type (`Prepared.index`), or None
    where the replay was asked for times only (a what-if reads nothing else)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    bind: np.ndarray | None
    end_bind: np.ndarray | None


@dataclass(frozen=True, eq=False)
class Prepared:
    """The graph as flat arrays for the replay loop: `order` the items in a topological order
    (v: node v's start; n + v: sync v's end), per node `ts`, per edge `src`, `lag`, `from_start`;
    node v's start edges are `start_idx[start_off[v]:start_off[v + 1]]` (edge indexes, in edge
    order), its `to_end` edges likewise in `end_off` / `end_idx`. `ts` is int64, `lag` int32
    where every lag fits (as the graph holds them) else int64, the indexes (`order`, `src`, the
    offsets and edge indexes) all of one type, `index`: int32 unless the graph is too big for it.

    Two arrays may be left out (4 and 8 MB at 311 MB, held through every what-if):
    `start_idx` is None where the start edges are the first edges, in destination order (as
    `build_graph` orders them: edge j is the j-th start edge); and `ts_nodes`, when set, names
    the nodes whose captured start `ts` holds (sorted; `keep_starts`): a replay reads a node's
    captured start only when none of its start edges is live, so a model that cuts no start
    edge keeps those of the nodes without start edges alone (5 of 1.0 M at 311 MB); and `end_nodes`,
    when set, names the syncs (sorted) whose end edges' offsets `end_off` holds (`keep_syncs`:
    a few thousand offsets, not n + 1)."""

    order: np.ndarray
    ts: np.ndarray
    src: np.ndarray
    lag: np.ndarray
    from_start: np.ndarray
    start_off: np.ndarray
    start_idx: np.ndarray | None
    end_off: np.ndarray
    end_idx: np.ndarray
    ts_nodes: np.ndarray | None = None
    end_nodes: np.ndarray | None = None

    @property
    def nodes(self) -> int:
        """The number of nodes."""
        return len(self.start_off) - 1

    @property
    def index(self) -> np.dtype:
        """The indexes' dtype (int32, or int64 for a graph of over 2^30 nodes or 2^31 edges)."""
        return self.src.dtype

    def sync_nodes(self) -> np.ndarray:
        """The nodes whose end `to_end` edges set (the syncs), in node order: what a replay's
        `own` may be given for alone."""
        return self.end_ranges()[0].astype(np.int64)

    def end_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """The syncs (sorted) and the offsets of their `to_end` edges in `end_idx` (one more)."""
        if self.end_nodes is not None:
            return self.end_nodes, self.end_off
        syncs = np.flatnonzero(np.diff(self.end_off) > 0)
        return syncs, np.append(self.end_off[syncs], self.end_off[-1]).astype(self.end_off.dtype)

    def keep_syncs(self) -> Prepared:
        """This graph holding the end offsets of its syncs alone (`end_nodes`)."""
        syncs, off = self.end_ranges()
        return replace(self, end_off=off, end_nodes=syncs.astype(self.index))

    def end_offsets(self) -> np.ndarray:
        """The end edges' offsets of every node (n + 1), as `end_off` holds them without `end_nodes`."""
        if self.end_nodes is None:
            return self.end_off
        count = np.zeros(self.nodes, dtype=np.int64)
        count[self.end_nodes] = np.diff(self.end_off)
        return np.concatenate([[0], np.cumsum(count)]).astype(self.end_off.dtype)

    def start_edges(self, v: int) -> np.ndarray:
        """Node v's start edges."""
        if self.start_idx is None:  # the first edges: edge j is the j-th start edge
            return np.arange(self.start_off[v], self.start_off[v + 1], dtype=self.index)
        return self.start_idx[self.start_off[v] : self.start_off[v + 1]]

    def keep_starts(self) -> Prepared:
        """This graph holding the captured starts of the nodes without start edges alone
        (`ts_nodes`): a replay that cuts no start edge reads no other."""
        if self.ts_nodes is not None:
            return self
        free = np.flatnonzero(self.start_off[1:] == self.start_off[:-1]).astype(self.index)
        return replace(self, ts=np.ascontiguousarray(self.ts[free]), ts_nodes=free)

    def starts(self, cut: np.ndarray | None = None) -> np.ndarray:
        """The captured start of every node (int64; 0 where `ts` holds none), for a replay that
        cuts the edges `cut`: an error if a node's start no live edge sets is not held."""
        if self.ts_nodes is None:
            return self.ts
        n = self.nodes
        full = np.zeros(n, dtype=np.int64)
        full[self.ts_nodes] = self.ts
        live = np.diff(self.start_off).astype(np.int64)
        if cut is not None and live.any():
            edges = np.arange(len(self.src)) if self.start_idx is None else self.start_idx
            gone = cut[edges[: int(self.start_off[-1])]]
            np.subtract.at(live, np.repeat(np.arange(n), np.diff(self.start_off))[gone], 1)
        held = np.zeros(n, dtype=np.bool_)
        held[self.ts_nodes] = True
        unset = np.flatnonzero((live == 0) & ~held)
        if len(unset):
            raise ValueError(f"replay: node {int(unset[0])} has no live start edge and no captured start in ts")
        return full

    def end_edges(self, v: int) -> np.ndarray:
        """Node v's `to_end` edges (none: not a sync)."""
        j = v if self.end_nodes is None else int(np.searchsorted(self.end_nodes, v))
        if self.end_nodes is not None and (j >= len(self.end_nodes) or self.end_nodes[j] != v):
            return self.end_idx[:0]
        return self.end_idx[self.end_off[j] : self.end_off[j + 1]]

    def is_sync(self, v: int) -> bool:
        """Node v's end is set by `to_end` edges."""
        return len(self.end_edges(v)) > 0


def native_kernel(name: str, force: bool = False) -> Any:
    """`traceanalyzer._native.<name>`, one of the dependency model's native loops (`replay`,
    `walk`, `innermost`), or None: not built (or built before it had that one), or turned off
    with the decoder by TRACEANALYZER_NATIVE=0 (`force`: regardless of the switch)."""
    return native.kernel(name, force)


def int64_values(s: pl.Series) -> np.ndarray:
    """`s` as one contiguous int64 numpy array (read in place where it already is one)."""
    return np.ascontiguousarray(s.cast(pl.Int64).to_numpy(), dtype=np.int64)


def prepare(nodes: pl.DataFrame, edges: pl.DataFrame) -> Prepared:
    """Flatten a dependency graph's nodes and edges and order them.

    The order is over events: item v is node v's start (and its end, when nothing but its duration sets that);
    item n + v is the end of a node with `to_end` edges, a sync, so that the copy a blocking call launches (from
    its start) can end before the call returns. Captured time order is tried first (in one native pass, else
    vectorised; checked against every edge); a trace whose clocks put an event before what it depends on is
    ordered by Kahn's algorithm instead (a cycle, only from a damaged trace, is broken at its earliest event).

    Times stay int64, lags as the edges hold them (int32 where they fit); every index, and the
    work arrays of the ordering, are int32 where every item fits (half the memory: the arrays
    are held through every what-if)."""
    n = nodes.height
    # the node indexes in the table's own width (int32 as `build_graph` makes them: no int64 copies)
    src, dst = (np.ascontiguousarray(edges[c].to_numpy()) for c in ("src", "dst"))
    lag = np.ascontiguousarray(edges["lag_ns"].to_numpy())  # int32 where every lag fits (`build_graph`)
    lag = lag if lag.dtype in (np.int32, np.int64) else lag.astype(np.int64)
    fs = np.ascontiguousarray(edges["from_start"].to_numpy(), dtype=np.bool_)
    to_end = np.ascontiguousarray(edges["to_end"].to_numpy(), dtype=np.bool_)
    ts, end_ns = int64_values(nodes["ts_ns"]), int64_values(nodes["end_ns"])
    # the indexes held: items are below 2n, edge indexes below m (and the offsets at most m)
    ix = np.int32 if 2 * n < 2**31 and len(src) < 2**31 else np.int64
    fn = native_kernel("prepare_order") if ix is np.int32 and src.dtype == dst.dtype == np.int32 else None
    gpu, ends = (nodes["lane"] == "gpu").to_numpy(), int(to_end.sum())  # (at most a sync end per `to_end` edge)
    out = [np.empty(k, np.int32) for k in (n + ends, n + 1, len(src) - ends, n + 1, ends)] if fn else []
    got = fn and fn(ts, end_ns, gpu.view(np.uint8), src, dst, fs.view(np.uint8), to_end.view(np.uint8), *out)
    if got is not None:  # all of it in one native pass, in place (None: captured order breaks an edge)
        order, start_off, start_idx, end_off, end_idx = out[0][:got], *out[1:]
    else:
        (start_off, start_idx), (end_off, end_idx) = _csr(dst, ~to_end, n, ix), _csr(dst, to_end, n, ix)
    if len(start_idx) and start_idx[0] == 0 and start_idx[-1] == len(start_idx) - 1:
        start_idx = None  # the start edges first, in destination order (`build_graph`): the identity
    if got is not None:
        return Prepared(order, ts, src, lag, fs, start_off, start_idx, end_off, end_idx)
    it = np.int32 if 8 * n < 2**31 else np.int64  # the ordering's work arrays: the ties are below 8n
    sync_ids = np.flatnonzero(np.diff(end_off) > 0).astype(it)
    lane = gpu.astype(it)
    t = np.concatenate([ts, end_ns[sync_ids]])
    # by time, then end-first, lane and item: the last three as one integer (items are below
    # 2n), so that the stable sort runs twice rather than four times
    tie = np.concatenate([np.full(n, 4 * n, dtype=it), np.zeros(len(sync_ids), dtype=it)])
    tie += np.concatenate([lane, lane[sync_ids]]) * it(2 * n)
    del lane, gpu
    tie[:n] += np.arange(n, dtype=it)
    tie[n:] += sync_ids + it(n)
    order = np.lexsort((tie, t))  # positions in (nodes, sync ends): the item is the position,
    del tie, t
    late = order >= n  # or n + the sync's node
    order[late] = sync_ids[order[late] - n].astype(np.int64) + n
    del late
    # the dependencies, checked against that order (made after the sort: 9 MB fewer at its peak)
    end_item = np.arange(n, dtype=it)  # the item at which a node's end is known
    end_item[sync_ids] += it(n)
    src_i, dst_i = src.astype(it, copy=False), dst.astype(it, copy=False)
    before = np.concatenate([np.where(fs & ~to_end, src_i, end_item[src]), sync_ids])
    after = np.concatenate([np.where(to_end, dst_i + it(n), dst_i), sync_ids + it(n)])
    del src_i, dst_i, end_item
    pos = np.zeros(2 * n, dtype=it)
    pos[order] = np.arange(len(order), dtype=it)
    if not bool((pos[before] < pos[after]).all()):
        order = np.asarray(_kahn(n, before, after, order.tolist()), dtype=np.int64)
    del pos, before, after
    order, src = order.astype(ix), src.astype(ix, copy=False)  # src: the edges' column can go (a view holds it)
    return Prepared(order, ts, src, lag, fs, start_off, start_idx, end_off, end_idx)


def _csr(dst: np.ndarray, keep: np.ndarray, n: int, ix: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (n + 1) and edge indexes of the kept edges grouped by destination, each group in edge order (a
    stable sort by destination; none when the kept edges are in destination order already, as `calibrate` orders
    them), both of dtype `ix`: the fallback of `_native.prepare_order`, whose pass makes them with the order."""
    idx = np.flatnonzero(keep)
    d = dst[idx]
    if len(d) > 1 and not bool((d[1:] >= d[:-1]).all()):
        idx = idx[np.argsort(d, kind="stable")]
    off = np.zeros(n + 1, dtype=ix)
    np.cumsum(np.bincount(d, minlength=n), out=off[1:])
    return off, idx.astype(ix)


def _kahn(n: int, before: np.ndarray, after: np.ndarray, by_time: list[int]) -> list[int]:
    """A topological order of the items in `by_time` (captured order) under the dependencies
    before[i] -> after[i] (a Python loop: it runs only on damaged traces)."""
    out: list[list[int]] = [[] for _ in range(2 * n)]
    indeg = [0] * (2 * n)
    for a, b in zip(before.tolist(), after.tolist(), strict=True):
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
    p: Prepared,
    dur: np.ndarray,
    own: np.ndarray,
    lag: np.ndarray | None = None,
    cut: np.ndarray | None = None,
    use_native: bool | None = None,
    binds: bool = True,
    zero_lag: np.ndarray | None = None,
) -> Schedule:
    """Re-schedule the graph with these durations (int64, or int32 read as such: 4 MB fewer at 311 MB;
    `own`: a sync's own time, per node or per sync in `Prepared.sync_nodes` order, as only a
    sync's end reads it), edge lags (default: the captured ones) and edges cut (`cut[k]`: edge k
    no longer binds, e.g. a removed sync).
    `zero_lag[k]`: edge k's lag taken as 0 (a byte per edge where a changed copy of the lags
    took eight). `binds=False`: the times only, no binding edges (`Schedule.bind` None: two arrays of n fewer,
    16 MB at 311 MB, for a caller that reads only times).
    The native loop when built and enabled (`load.native.enabled`), else `_replay`;
    `use_native` forces one (False: Python; True: native, which must be built)."""
    n = p.nodes
    dur = np.asarray(dur)
    dur = np.ascontiguousarray(dur, dtype=dur.dtype if dur.dtype in (np.int32, np.int64) else np.int64)
    own = np.ascontiguousarray(own, dtype=np.int64)
    lag = p.lag if lag is None else np.ascontiguousarray(lag, dtype=np.int64)  # given: int64
    cut = None if cut is None else np.ascontiguousarray(cut, dtype=np.bool_)
    zero_lag = None if zero_lag is None else np.ascontiguousarray(zero_lag, dtype=np.bool_)
    fn = native.replay_loop() if use_native is None else (native.replay_loop(force=True) if use_native else None)
    if use_native and fn is None:
        raise RuntimeError("the native replay loop is not built (pip install -e .)")
    if p.index != np.int32:  # the native loop reads int32 indexes: a graph too big for them
        if use_native:
            raise ValueError("replay: the graph has too many nodes or edges for the native loop's int32 indexes")
        fn = None
    if fn is None:
        with no_gc():
            return _replay(p, dur, own, lag, cut, binds, zero_lag)
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    # -1 where the loop writes nothing: the end of a node that is not a sync
    bind, end_bind = (np.full(n, -1, p.index), np.full(n, -1, p.index)) if binds else (None, None)
    fs = p.from_start.view(np.uint8)
    args = (p.order, p.ts, p.src, lag, fs, p.start_off, p.start_idx, p.end_off, p.end_idx, dur, own)
    as_u8 = lambda a: None if a is None else a.view(np.uint8)  # noqa: E731
    kw = {"zero_lag": as_u8(zero_lag), "lag32": lag.dtype == np.int32, "ts_nodes": p.ts_nodes, "end_nodes": p.end_nodes}
    fn(*args, as_u8(cut), start, end, bind, end_bind, dur32=dur.dtype == np.int32, **kw)
    return Schedule(start, end, bind, end_bind)


def _replay(
    p: Prepared,
    dur: np.ndarray,
    own: np.ndarray,
    lag: np.ndarray,
    cut: np.ndarray | None,
    binds: bool = True,
    zero_lag: np.ndarray | None = None,
) -> Schedule:
    """The replay loop in Python (the fallback of the native one, and its reference): the arrays
    become lists for the loop's duration, as indexing numpy scalars is several times slower."""
    n = p.nodes
    ts, order = p.starts(cut).tolist(), p.order.tolist()
    dur_l, own_l = dur.tolist(), own.tolist()
    lag_l = (lag if zero_lag is None else np.where(zero_lag, 0, lag)).tolist()
    if len(own_l) != n:  # one per sync: spread over the nodes for the loop (n values, as lists are)
        full = [0] * n
        for v, o in zip(p.sync_nodes().tolist(), own_l, strict=True):
            full[v] = o
        own_l = full
    src, fs = p.src.tolist(), p.from_start.tolist()
    si = range(len(p.src)) if p.start_idx is None else p.start_idx.tolist()
    so, eo, ei = p.start_off.tolist(), p.end_offsets().tolist(), p.end_idx.tolist()
    cut_l = None if cut is None else cut.tolist()
    start, end, bind, end_bind = [0] * n, [0] * n, [-1] * n, [-1] * n
    for x in order:
        if x >= n:  # a sync's end: its own time, or the GPU work it waits for and its return
            v = x - n
            e = start[v] + own_l[v]
            eb = -1
            for j in range(eo[v], eo[v + 1]):
                k = ei[j]
                if cut_l is not None and cut_l[k]:
                    continue
                r = end[src[k]] + lag_l[k]
                if r > e:
                    e, eb = r, k
            end[v], end_bind[v] = e, eb
            continue
        s = ts[x]
        b = -1
        for j in range(so[x], so[x + 1]):
            k = si[j]
            if cut_l is not None and cut_l[k]:
                continue
            u = src[k]
            r = (start[u] if fs[k] else end[u]) + lag_l[k]
            if b < 0 or r > s:
                s, b = r, k
        start[x], bind[x] = s, b
        if eo[x] == eo[x + 1]:
            end[x] = s + dur_l[x]
    times = np.array(start, dtype=np.int64), np.array(end, dtype=np.int64)
    if not binds:
        return Schedule(*times, None, None)
    return Schedule(*times, np.array(bind, dtype=p.index), np.array(end_bind, dtype=p.index))
