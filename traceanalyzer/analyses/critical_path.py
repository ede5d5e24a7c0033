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

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.dependency_graph import DependencyGraph
from traceanalyzer.analyses.replay import Prepared, Schedule, no_gc

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
    graph: DependencyGraph, p: Prepared, sched: Schedule, windows: pl.DataFrame, end_nodes: list[int]
) -> pl.DataFrame:
    """The segments of each step window (step, start_ns, end_ns), walked back from `end_nodes`."""
    with no_gc():
        return _walk(graph, p, sched, windows, end_nodes)


def _walk(
    graph: DependencyGraph, p: Prepared, sched: Schedule, windows: pl.DataFrame, end_nodes: list[int]
) -> pl.DataFrame:
    """The walk is a Python loop over the path only: per node it reads scalars of the schedule's
    arrays; the kinds and names of the nodes it passes are gathered once afterwards."""
    nodes = graph.nodes
    coll_wait = ((nodes["kind"] == "collective") & (nodes["wait_ns"].fill_null(0) > 0)).fill_null(False).to_numpy()
    wait = nodes["wait_ns"].fill_null(0).cast(pl.Int64).to_numpy().item
    code = {k: WAIT_KINDS.index(w) for k, w in EDGE_WAIT_KIND.items()}
    wait_code = graph.edges["etype"].replace_strict(code, default=0, return_dtype=pl.Int8).to_numpy().item
    start, end, bind, end_bind = sched.start_ns.item, sched.end_ns.item, sched.bind.item, sched.end_bind.item
    src, from_start, is_sync = p.src.item, p.from_start.item, p.is_sync
    guard_max = 2 * len(sched.start_ns) + 2
    # a segment: (kind, or None for its node's kind; the node it is named after, -1 none; lane node; a; b)
    raw: list[tuple[int, list[tuple]]] = []
    for (step, ws, we), v in zip(windows.select("step", "start_ns", "end_ns").iter_rows(), end_nodes, strict=True):
        segs: list[tuple] = []
        c = we
        guard = 0
        at_start = False  # arrived at v's start (through a launch), not at its end
        while v >= 0 and c > ws and guard < guard_max:
            guard += 1
            eb = end_bind(v) if not at_start and is_sync(v) else -1
            if eb >= 0:
                # the call returned after the GPU work it waited for: its wait is the GPU's time
                u = src(eb)
                c = _emit(segs, c, ws, "sync", v, v, end(u))
                v, at_start = u, False
                continue
            if coll_wait[v]:
                c = _emit(segs, c, ws, "collective", v, v, start(v) + wait(v))
                c = _emit(segs, c, ws, "peer_wait", v, v, start(v))
            else:
                c = _emit(segs, c, ws, None, v, v, start(v))
            b = bind(v)
            if b < 0:
                break
            u = src(b)
            ref = start(u) if from_start(b) else end(u)
            wk = WAIT_KINDS[wait_code(b)]
            if wk == "launch":
                c = _emit(segs, c, ws, "launch", u, u, ref)
            elif wk:
                c = _emit(segs, c, ws, wk, v if wk == "gpu_wait" else u, v, ref)
            v, at_start = u, bool(from_start(b))
        if c > ws:  # nothing recorded before: the thread's time before its first event
            segs.append((*UNTRACED, -1, ws, c))
        segs.reverse()
        raw.append((step, segs))
    kind, name = _names(nodes, {s[1] for _, segs in raw for s in segs})
    rows: list[tuple] = []
    for step, segs in raw:
        merged: list[list] = []  # kind, name, lane node, a, b, the node named (-1: none)
        for k, nm, ln, a, b in segs:
            s = (k if k is not None else kind[nm], name.get(nm, UNTRACED_NAME), ln, a, b)
            if (
                merged
                and merged[-1][0] == s[0]
                and merged[-1][1] == s[1]
                and merged[-1][2] == s[2]
                and merged[-1][4] == s[3]
            ):
                merged[-1][4] = s[4]
            else:
                merged.append([*s, nm])
        rows += [(step, i, k, ln, a, b, b - a, nn) for i, (k, _, ln, a, b, nn) in enumerate(merged)]
    schema = {c: t for c, t in SEGMENT_SCHEMA.items() if c not in ("name", "lane")}
    seg = pl.DataFrame(rows, schema={**schema, "_nn": pl.Int64}, orient="row")
    del rows, raw
    # names gathered from the node table (views of its strings), not one Python string per segment
    named = nodes["name"].gather(seg["_nn"].clip(0)) if nodes.height else pl.Series([], dtype=pl.String)
    name_col = pl.when(pl.col("_nn") >= 0).then(named).otherwise(pl.lit(UNTRACED_NAME))
    seg = seg.select(
        *(name_col.alias(c) if c == "name" else pl.lit("").alias(c) if c == "lane" else c for c in SEGMENT_SCHEMA)
    )
    # each segment's lane, gathered by position (node v is row v): no join against the node table
    at = seg["lane_node"]
    where = nodes.select(_lt="lane", pid="pid", tid="tid", device="device", stream="stream")[at.clip(0)]
    where = where.select(pl.when(at >= 0).then(pl.col(c)).alias(c) for c in where.columns)
    lane = (
        pl.when(pl.col("_lt").is_null())
        .then(pl.lit(""))
        .when(pl.col("_lt") == "cpu")
        .then(pl.format("thread {}", pl.col("tid")))
        .otherwise(pl.format("GPU {} stream {}", pl.col("device"), pl.col("stream")))
    )
    return seg.hstack(where).with_columns(lane=lane.fill_null("")).drop("_lt")


def _names(nodes: pl.DataFrame, used: set[int]) -> tuple[dict[int, str], dict[int, str]]:
    """kind and name of the nodes on the path, by node (gathered for those nodes only)."""
    ids = pl.Series(sorted(u for u in used if u >= 0), dtype=pl.Int64)
    got = nodes.select("kind", "name")[ids] if ids.len() else nodes.select("kind", "name").clear()
    keys = ids.to_list()
    return dict(zip(keys, got["kind"].to_list(), strict=True)), dict(zip(keys, got["name"].to_list(), strict=True))


def _emit(segs: list, c: int, ws: int, kind: str | None, name: int, lane: int, a: int) -> int:
    """Append the segment [a, c] (clipped to the window) walking back; the new cursor."""
    a = max(min(a, c), ws)
    if a < c:
        segs.append((kind, name, lane, a, c))
    return a


def summarise(segments: pl.DataFrame, windows: pl.DataFrame) -> CriticalPath:
    """Shares of step time on the path by kind and by name."""
    steps = windows.select("step", "start_ns", "end_ns", step_ns=pl.col("end_ns") - pl.col("start_ns"))
    total = int(steps["step_ns"].sum() or 0)
    by = lambda cols: (  # noqa: E731
        segments.group_by(cols)
        .agg(duration_ns=pl.col("duration_ns").sum(), segments=pl.len())
        .with_columns(share=pl.col("duration_ns") / total if total else pl.lit(None, pl.Float64))
        .sort("duration_ns", *cols, descending=[True] + [False] * len(cols))
    )
    return CriticalPath(segments, steps, by(["kind"]), by(["kind", "name"]))
