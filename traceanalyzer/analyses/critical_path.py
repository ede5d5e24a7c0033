"""The critical path of each step: the chain of work and waits that set the step's end, walked
back from its last node through the edge that bound each node's start (or a sync's end) in the
replay of the capture, until the step's start.

Each segment is one stretch of that chain: a CPU slice (`kind` its layer: data_loading, cpu_op,
python, launch, runtime_call, untraced; `sync` a blocking call waiting for the GPU), a launch's
latency (`launch`: from the launch call's start to its work's start), GPU work (`kernel`,
`memcpy`, `memset`, `collective`), a collective's wait for its peers (`peer_wait`), and waits on
the GPU we see only as a delay (`gpu_wait`: a stream waiting beyond its previous work or an
event; the device's own spacing between queued kernels included). Segments tile the step: their
durations sum to the step time exactly.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceanalyzer.analyses.dependency_graph import DependencyGraph
from traceanalyzer.analyses.replay import Prepared, Schedule, native_kernel, no_gc
from traceanalyzer.keys import grouped

SEGMENT_SCHEMA = {
    "step": pl.Int64,
    "order": pl.Int64,
    "kind": pl.String,
    "name": pl.String,
    "lane": pl.String,
    "lane_node": pl.Int64,  # the graph node whose thread or stream the segment lies on (-1: none)
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "duration_ns": pl.Int64,
}
EDGE_WAIT_KIND = {
    "launch": "launch",
    "stream": "gpu_wait",
    "event": "gpu_wait",
    "fork": "thread_wait",
    "join": "thread_wait",
}


@dataclass(frozen=True)
class CriticalPath:
    """segments: step, order, kind, name, lane, lane_node, start_ns, end_ns, duration_ns, and the
    lane's pid/tid (a thread) or device/stream (every step, in time order); steps: step, start_ns, end_ns, step_ns; by_kind / by_name: share of the step
    time on the path (summed over steps)."""

    segments: pl.DataFrame
    steps: pl.DataFrame
    by_kind: pl.DataFrame
    by_name: pl.DataFrame


# The wait an edge stands for on the path, by code (0: none; see EDGE_WAIT_KIND).
WAIT_KINDS = (None, "launch", "gpu_wait", "thread_wait")
UNTRACED = ("untraced", -1)  # the thread's time before its first event (kind, no node)
UNTRACED_NAME = "before the first traced event"


def walk(
    graph: DependencyGraph,
    p: Prepared,
    sched: Schedule,
    windows: pl.DataFrame,
    end_nodes: list[int],
    use_native: bool | None = None,
) -> pl.DataFrame:
    """The segments of each step window (step, start_ns, end_ns), walked back from `end_nodes`
    (`walk_back`), as a table (`segment_table`)."""
    return segment_table(graph, windows, walk_back(graph, p, sched, windows, end_nodes, use_native))


def walk_back(
    graph: DependencyGraph,
    p: Prepared,
    sched: Schedule,
    windows: pl.DataFrame,
    end_nodes: list[int],
    use_native: bool | None = None,
) -> Segments:
    """The segments of each step window (step, start_ns, end_ns), walked back from `end_nodes`:
    flat arrays, which `segment_table` names and merges (the schedule, which they no longer
    need, may go first: 24 MB at 311 MB).

    The walk is a loop over the path only (per node, scalars of the schedule's arrays, a segment
    appended to flat int64 arrays); kinds and names are gathered and neighbours merged
    afterwards, vectorised. It runs natively (`_native.walk`, the GIL released: 174k segments of
    a 311 MB trace in milliseconds instead of 0.3 s) when built and enabled, else in Python
    (`_walk_py`, its reference); `use_native` forces one (True: native, which must be built).
    `sched` needs its binding edges (a replay with `binds=True`)."""
    if sched.bind is None or sched.end_bind is None:
        raise ValueError("walk: the schedule was replayed without its binding edges (binds=False)")
    coll_wait, wait = _collective_waits(graph)
    code = {k: WAIT_KINDS.index(w) for k, w in EDGE_WAIT_KIND.items()}
    etype = graph.edges["etype"]
    if isinstance(etype.dtype, pl.Enum):  # a table of its few categories, gathered by code (no string per edge)
        table = np.array([code.get(c, 0) for c in etype.dtype.categories.to_list()], dtype=np.int8)
        wait_code = table[etype.to_physical().to_numpy()]
    else:
        wait_code = etype.replace_strict(code, default=0, return_dtype=pl.Int8).to_numpy()
    del etype
    bounds = windows.select(pl.col("start_ns", "end_ns").cast(pl.Int64))
    fn = native_kernel("walk") if use_native is None else (native_kernel("walk", force=True) if use_native else None)
    if use_native and fn is None:
        raise RuntimeError("the native walk is not built (pip install -e .)")
    if fn is not None and p.index == np.int32 and bounds.null_count().sum_horizontal().item() == 0:
        arrays = [
            np.ascontiguousarray(bounds["start_ns"].to_numpy(), dtype=np.int64),
            np.ascontiguousarray(bounds["end_ns"].to_numpy(), dtype=np.int64),
            np.asarray(end_nodes, dtype=np.int64),
            np.ascontiguousarray(coll_wait, dtype=np.bool_).view(np.uint8),
            wait,
            np.ascontiguousarray(wait_code, dtype=np.int8).view(np.uint8),
            np.ascontiguousarray(sched.start_ns, dtype=np.int64),
            np.ascontiguousarray(sched.end_ns, dtype=np.int64),
            # the indexes as the replay keeps them, int32 (read in place, no int64 copies)
            *(np.ascontiguousarray(a, dtype=np.int32) for a in (sched.bind, sched.end_bind, p.src)),
            np.ascontiguousarray(p.from_start, dtype=np.bool_).view(np.uint8),
            None,  # (no end offsets: a node's end binding is an edge only where it is a sync's)
        ]
        out = Segments.of(*(np.frombuffer(b, dtype=np.int64) for b in fn(*arrays)))
        del arrays
    else:
        with no_gc():
            out = _walk_py(p, sched, bounds, end_nodes, coll_wait, wait, wait_code)
    return out


def _collective_waits(graph: DependencyGraph) -> tuple[np.ndarray, np.ndarray]:
    """Per node whether it is a collective that waited for its peers, and that wait (int64, 0
    where none). Only GPU nodes wait, the last rows (`DependencyGraph.gpu`): the arrays are
    zeroed (calloc's pages, untouched) and written there alone, not made of node-long columns
    (four of them: 12 MB of fresh pages at 311 MB)."""
    nodes = graph.nodes
    n, g = nodes.height, graph.gpu
    if g is None or "wait_ns" not in g.columns or g.height > n:
        waits = graph.column("wait_ns").fill_null(0)
        coll_wait = ((nodes["kind"] == "collective") & (waits > 0)).fill_null(False).to_numpy()
        return coll_wait, np.ascontiguousarray(waits.cast(pl.Int64).to_numpy(), dtype=np.int64)
    first = n - g.height
    waits = g["wait_ns"].fill_null(0)
    coll_wait, wait = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.int64)
    coll_wait[first:] = ((nodes["kind"].slice(first) == "collective") & (waits > 0)).fill_null(False).to_numpy()
    wait[first:] = waits.cast(pl.Int64).to_numpy()
    return coll_wait, wait


def _walk_py(
    p: Prepared,
    sched: Schedule,
    bounds: pl.DataFrame,
    end_nodes: list[int],
    coll_wait: np.ndarray,
    wait_ns: np.ndarray,
    wait_codes: np.ndarray,
) -> Segments:
    """The walk in Python (see `walk`): the fallback of the native one, and its reference."""
    wait, wait_code = wait_ns.item, wait_codes.item
    start, end, bind, end_bind = sched.start_ns.item, sched.end_ns.item, sched.bind.item, sched.end_bind.item
    src, from_start, is_sync = p.src.item, p.from_start.item, p.is_sync
    guard_max = 2 * len(sched.start_ns) + 2
    # one segment per index: its window, kind (a SEG_KINDS code; -1: its node's kind), the node it
    # is named after (-1: none), the lane's node, [a, b); appended walking back, so reversed per window
    out = Segments()
    for w, ((ws, we), v) in enumerate(zip(bounds.iter_rows(), end_nodes, strict=True)):
        c = we
        guard = 0
        at_start = False  # arrived at v's start (through a launch), not at its end
        out.window = w
        while v >= 0 and c > ws and guard < guard_max:
            guard += 1
            eb = end_bind(v) if not at_start and is_sync(v) else -1
            if eb >= 0:
                # the call returned after the GPU work it waited for: its wait is the GPU's time
                u = src(eb)
                c = out.emit(c, ws, SYNC, v, v, end(u))
                v, at_start = u, False
                continue
            if coll_wait[v]:
                c = out.emit(c, ws, COLLECTIVE, v, v, start(v) + wait(v))
                c = out.emit(c, ws, PEER_WAIT, v, v, start(v))
            else:
                c = out.emit(c, ws, -1, v, v, start(v))
            b = bind(v)
            if b < 0:
                break
            u = src(b)
            ref = start(u) if from_start(b) else end(u)
            wk = WAIT_KINDS[wait_code(b)]
            if wk == "launch":
                c = out.emit(c, ws, SEG_KINDS.index("launch"), u, u, ref)
            elif wk:
                c = out.emit(c, ws, SEG_KINDS.index(wk), v if wk == "gpu_wait" else u, v, ref)
            v, at_start = u, bool(from_start(b))
        if c > ws:  # nothing recorded before: the thread's time before its first event
            out.emit(c, ws, SEG_KINDS.index(UNTRACED[0]), UNTRACED[1], -1, ws)
    return out


SEG_KINDS = ("sync", "collective", "peer_wait", "launch", "gpu_wait", "thread_wait", "untraced")
SYNC, COLLECTIVE, PEER_WAIT = 0, 1, 2


class Segments:
    """The walk's segments as flat arrays (see `walk`)."""

    def __init__(self) -> None:
        self.window = 0
        self.w, self.kind, self.named, self.lane, self.a, self.b = (array("q") for _ in range(6))

    @classmethod
    def of(cls, *arrays: np.ndarray) -> Segments:
        """The segments of the native walk: its six arrays (w, kind, named, lane, a, b)."""
        out = cls()
        out.w, out.kind, out.named, out.lane, out.a, out.b = arrays
        return out

    def emit(self, c: int, ws: int, kind: int, name: int, lane: int, a: int) -> int:
        """Append the segment [a, c] (clipped to the window) walking back; the new cursor."""
        a = max(min(a, c), ws)
        if a < c:
            self.w.append(self.window)
            self.kind.append(kind)
            self.named.append(name)
            self.lane.append(lane)
            self.a.append(a)
            self.b.append(c)
        return a


def segment_table(graph: DependencyGraph, windows: pl.DataFrame, out: Segments) -> pl.DataFrame:
    """The segments in time order per window, consecutive pieces of one kind, name and lane
    merged, named and placed on their lanes."""
    nodes = graph.nodes
    cols = {"_w": out.w, "_k": out.kind, "_nn": out.named, "lane_node": out.lane, "start_ns": out.a, "end_ns": out.b}
    cols = {c: np.asarray(v, dtype=np.int64) for c, v in cols.items()}
    del out
    at = _time_order(cols["_w"])
    seg = pl.DataFrame({c: pl.Series(v if at is None else v[at], dtype=pl.Int64) for c, v in cols.items()})
    del cols, at
    # the names as one gather (views of the trace's strings: choosing between a gather and a
    # literal afterwards copied every name, 50 MB at 311 MB)
    node_name = graph.names(seg["_nn"], UNTRACED_NAME) if nodes.height else pl.Series([], dtype=pl.String)
    seg = seg.with_columns(kind=_kinds(nodes, seg["_k"], seg["_nn"]), name=node_name)
    # a new piece unless the previous one (same window) has the same kind, name and lane and ends where it starts
    prev = lambda c: pl.col(c).shift(1)  # noqa: E731
    same = (
        (pl.col("_w") == prev("_w"))
        & pl.col("kind").eq_missing(prev("kind"))
        & pl.col("name").eq_missing(prev("name"))
        & (pl.col("lane_node") == prev("lane_node"))
        & (pl.col("start_ns") == prev("end_ns"))
    )
    seg = seg.with_columns(_run=(~same.fill_null(False)).cum_sum())
    if seg["_run"].n_unique() < seg.height:  # (on a trace of 311 MB, none of 174k merges: no group_by)
        seg = seg.group_by("_run", maintain_order=True).agg(
            pl.col("_w", "kind", "name", "lane_node", "start_ns", "_nn").first(), pl.col("end_ns").last()
        )
    first = (pl.col("_w") != pl.col("_w").shift(1)).fill_null(True)
    at = pl.int_range(pl.len(), dtype=pl.Int64)
    steps = windows["step"].cast(pl.Int64)
    seg = seg.select(
        step=steps.gather(seg["_w"]) if steps.len() else pl.lit(None, pl.Int64),
        order=at - pl.when(first).then(at).forward_fill(),
        kind="kind",
        name="name",
        lane=pl.lit(""),
        lane_node="lane_node",
        start_ns="start_ns",
        end_ns="end_ns",
        duration_ns=pl.col("end_ns") - pl.col("start_ns"),
    ).cast({c: t for c, t in SEGMENT_SCHEMA.items()})
    # each segment's lane, gathered by position (node v is row v): no join against the node table
    where = graph.lanes(seg["lane_node"])
    return seg.hstack(where).with_columns(lane=_lane_names(graph, seg["lane_node"], where)).drop("_lt")


def _lane_format() -> pl.Expr:
    """A lane's name from its `_lt`, tid, device and stream ("" where one is not known)."""
    lane = (
        pl.when(pl.col("_lt").is_null())
        .then(pl.lit(""))
        .when(pl.col("_lt") == "cpu")
        .then(pl.format("thread {}", pl.col("tid")))
        .otherwise(pl.format("GPU {} stream {}", pl.col("device"), pl.col("stream")))
    )
    return lane.fill_null("")


def _lane_names(graph: DependencyGraph, lane_node: pl.Series, where: pl.DataFrame) -> pl.Series:
    """Each segment's lane name (`_lane_format`, `where` as `DependencyGraph.lanes` gives it):
    one gather from the names of the few lanes, each formatted once (a thread's by its number, a
    stream's by its device and stream, counted in a table of their ranges), rather than a string
    formatted per segment (14 ms for the 174k segments at 311 MB); per segment where the graph
    numbers no threads or the GPU lanes' numbers span too wide a table."""
    nodes, threads = graph.nodes, graph.threads
    if "thread" not in nodes.columns or threads is None or not where.height:
        return where.select(_lane_format()).to_series().alias("lane")
    lt = where["_lt"]
    cpu = (lt == "cpu").fill_null(False).to_numpy()
    gpu = (lt != "cpu").fill_null(False).to_numpy()
    th = nodes["thread"].gather(lane_node.clip(0)).filter(pl.Series(cpu))
    dev, st = where["device"], where["stream"]
    gpu &= (dev.is_not_null() & st.is_not_null()).to_numpy()
    d, s = dev.filter(pl.Series(gpu)).to_numpy(), st.filter(pl.Series(gpu)).to_numpy()
    d_lo, s_lo = (int(x.min()) if len(x) else 0 for x in (d, s))
    d_n, s_n = (int(x.max()) - lo + 1 if len(x) else 1 for x, lo in ((d, d_lo), (s, s_lo)))
    if th.null_count() or d_n * s_n > 1 << 20:
        return where.select(_lane_format()).to_series().alias("lane")
    tids = threads["tid"].cast(pl.Int64).to_list()
    names = ["", *("" if t is None else f"thread {t}" for t in tids)]  # code 0: no lane known
    code = np.zeros(where.height, dtype=np.int64)
    code[cpu] = 1 + th.cast(pl.Int64).to_numpy()
    if len(d):
        key = (d - d_lo) * s_n + (s - s_lo)
        used = np.flatnonzero(np.bincount(key, minlength=d_n * s_n))
        at = np.zeros(d_n * s_n, dtype=np.int64)
        at[used] = len(names) + np.arange(len(used))
        names += [f"GPU {u // s_n + d_lo} stream {u % s_n + s_lo}" for u in used.tolist()]
        code[gpu] = at[key]
    return pl.Series("lane", names, dtype=pl.String).gather(code)


def _kinds(nodes: pl.DataFrame, k: pl.Series, named: pl.Series) -> pl.Series:
    """Each segment's kind: SEG_KINDS[k], else (k < 0) its node's kind; one gather from the
    few kinds side by side (a choice between two string columns per segment cost 20 ms)."""
    kind = nodes["kind"] if nodes.height else pl.Series([], dtype=pl.String)
    theirs = kind.dtype.categories if isinstance(kind.dtype, pl.Enum) else kind.unique().drop_nulls().sort()
    every = pl.concat(
        [pl.Series(SEG_KINDS, dtype=pl.String), theirs.cast(pl.String), pl.Series([None], dtype=pl.String)]
    )
    if not nodes.height:
        return every.gather(k.clip(0)).alias("kind")
    own = kind.gather(named.clip(0))
    code = (
        own.to_physical()
        if isinstance(kind.dtype, pl.Enum)
        else own.replace_strict(theirs, range(theirs.len()), default=None)
    )
    at = pl.select(
        pl.when(k >= 0).then(k).otherwise(len(SEG_KINDS) + code.cast(pl.Int64)).fill_null(every.len() - 1)
    ).to_series()
    return every.gather(at).alias("kind")


def _time_order(w: np.ndarray) -> np.ndarray | None:
    """The segments in time order per window (window, then reversed: the walk appends each
    window's walking back): each window's run reversed where the walk gave the windows in order,
    else a stable sort (None: already in order)."""
    if not len(w):
        return None
    if len(w) > 1 and not bool((w[1:] >= w[:-1]).all()):
        return np.lexsort((-np.arange(len(w)), w))
    start = np.flatnonzero(np.concatenate([[True], w[1:] != w[:-1]]))
    end = np.append(start[1:], len(w))
    count = end - start
    return np.repeat(start + end - 1, count) - np.arange(len(w))  # position i of [s, e) takes s + e - 1 - i


def summarise(segments: pl.DataFrame, windows: pl.DataFrame) -> CriticalPath:
    """Shares of step time on the path by kind and by name."""
    steps = windows.select("step", "start_ns", "end_ns", step_ns=pl.col("end_ns") - pl.col("start_ns"))
    total = int(steps["step_ns"].sum() or 0)
    share = pl.col("duration_ns") / total if total else pl.lit(None, pl.Float64)
    # (the names by their codes: row-encoded, the segments' names were 200 MB at 1 GB, `keys`)
    by_name = grouped(segments, ["kind", "name"], pl.col("duration_ns").sum(), pl.len().alias("segments"))
    # by kind from the few (kind, name) sums, not from the segments again: integer sums, exact
    count = by_name.schema["segments"]
    by_kind = by_name.group_by("kind").agg(pl.col("duration_ns").sum(), pl.col("segments").sum().cast(count))
    order = lambda df, cols: df.with_columns(share=share).sort(  # noqa: E731
        "duration_ns", *cols, descending=[True] + [False] * len(cols)
    )
    return CriticalPath(segments, steps, order(by_kind, ["kind"]), order(by_name, ["kind", "name"]))
