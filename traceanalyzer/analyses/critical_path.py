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


def _lane(nodes: pl.DataFrame) -> list[str]:
    return (
        nodes.select(
            pl.when(pl.col("lane") == "cpu")
            .then(pl.format("thread {}", pl.col("tid")))
            .otherwise(pl.format("GPU {} stream {}", pl.col("device"), pl.col("stream")))
        )
        .to_series()
        .to_list()
    )


def walk(
    graph: DependencyGraph, p: Prepared, sched: Schedule, windows: pl.DataFrame, end_nodes: list[int]
) -> pl.DataFrame:
    """The segments of each step window (step, start_ns, end_ns), walked back from `end_nodes`."""
    with no_gc():
        return _walk(graph, p, sched, windows, end_nodes)


def _walk(
    graph: DependencyGraph, p: Prepared, sched: Schedule, windows: pl.DataFrame, end_nodes: list[int]
) -> pl.DataFrame:
    nodes = graph.nodes
    kind, name = nodes["kind"].to_list(), nodes["name"].to_list()
    lanes = list(range(nodes.height))  # segments carry the node; its lane's name is added below
    wait = nodes["wait_ns"].fill_null(0).to_list()
    etype = graph.edges["etype"].to_list()
    start, end = sched.start_ns, sched.end_ns
    rows: list[tuple] = []
    for (step, ws, we), v in zip(windows.select("step", "start_ns", "end_ns").iter_rows(), end_nodes, strict=True):
        segs: list[tuple[str, str, str, int, int]] = []
        c = we
        guard = 0
        at_start = False  # arrived at v's start (through a launch), not at its end
        while v >= 0 and c > ws and guard < 2 * len(start) + 2:
            guard += 1
            eb = sched.end_bind[v] if p.end_in[v] and not at_start else -1
            if eb >= 0:
                # the call returned after the GPU work it waited for: its wait is the GPU's time
                u = p.src[eb]
                c = _emit(segs, c, ws, "sync", name[v], lanes[v], end[u])
                v, at_start = u, False
                continue
            if kind[v] == "collective" and wait[v] > 0:
                c = _emit(segs, c, ws, "collective", name[v], lanes[v], start[v] + wait[v])
                c = _emit(segs, c, ws, "peer_wait", name[v], lanes[v], start[v])
            else:
                c = _emit(segs, c, ws, kind[v], name[v], lanes[v], start[v])
            b = sched.bind[v]
            if b < 0:
                break
            u = p.src[b]
            ref = start[u] if p.from_start[b] else end[u]
            wk = EDGE_WAIT_KIND.get(etype[b])
            if wk == "launch":
                c = _emit(segs, c, ws, "launch", name[u], lanes[u], ref)
            elif wk:
                c = _emit(segs, c, ws, wk, name[v] if wk == "gpu_wait" else name[u], lanes[v], ref)
            v, at_start = u, bool(p.from_start[b])
        if c > ws:  # nothing recorded before: the thread's time before its first event
            segs.append(("untraced", "before the first traced event", -1, ws, c))
        segs.reverse()
        merged: list[list] = []
        for s in segs:
            if (
                merged
                and merged[-1][0] == s[0]
                and merged[-1][1] == s[1]
                and merged[-1][2] == s[2]
                and merged[-1][4] == s[3]
            ):
                merged[-1][4] = s[4]
            else:
                merged.append(list(s))
        rows += [(step, i, k, nm, "", ln, a, b, b - a) for i, (k, nm, ln, a, b) in enumerate(merged)]
    seg = pl.DataFrame(rows, schema=SEGMENT_SCHEMA, orient="row")
    where = nodes.select(
        lane_node="node", _lane=pl.Series(_lane(nodes)), pid="pid", tid="tid", device="device", stream="stream"
    )
    return (
        seg.join(where, on="lane_node", how="left", maintain_order="left")
        .with_columns(lane=pl.col("_lane").fill_null(""))
        .drop("_lane")
    )


def _emit(segs: list, c: int, ws: int, kind: str, name: str, lane: str, a: int) -> int:
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
