"""What would a fix buy: replay the dependency graph with changed durations and read the new
step times by the one definition of a step.

A `Scenario` removes the CPU time of gap causes (`without`: the cause's layer of
`cpu_activity`, as `gap_causes` names them: data_loading, sync, runtime_call, launch_latency,
slow_launch, cpu_bound, untraced; and on the GPU side gpu_wait, kernel_spacing, peer_wait),
scales kernels, copies and ops by name pattern (`speedup`: a kernel 1.3x faster takes 1/1.3 of
its time; an op's CPU time inside it, nested ops and calls included), and drops op instances by
name (`drop`: their CPU time, their syncs and the GPU work they launched). Removing `sync` also
stops the calls waiting for the GPU (their `sync` edges are cut).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from traceanalyzer.analyses import windows as win
from traceanalyzer.analyses.critical_path import CriticalPath, segment_table, summarise, walk, walk_back
from traceanalyzer.analyses.dependency_graph import DependencyGraph
from traceanalyzer.analyses.graph_table import INT32, trim_heap
from traceanalyzer.analyses.node_changes import NodeChanges, member, whole_ns
from traceanalyzer.analyses.op_tree import ancestors
from traceanalyzer.analyses.replay import Prepared, Schedule, native_kernel, prepare, replay
from traceanalyzer.analyses.scenario import CPU_CAUSES, SCENARIO_CAUSES, Scenario  # noqa: F401 - re-exported
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us

STEP_COLUMNS = ("step_ns", "replayed_ns", "predicted_ns", "saving_ns")
# a node's thread or stream, read by the path's lanes only, and its kind, read by the walk only
LANE_COLUMNS = ("thread",)


SLICE_ROWS = 1 << 18  # a what-if's expressions run on this many nodes at once (2 MB per float temporary)


def _node_index() -> pl.Expr:
    """The node number of each row of the graph's node table (node v is row v)."""
    return pl.int_range(pl.len(), dtype=pl.Int64).alias("node")


@dataclass(frozen=True)
class WhatIf:
    """The steps as captured, replayed unchanged and predicted under a scenario.

    `steps_ns` holds int64 ns (step, step_ns, replayed_ns, predicted_ns, saving_ns); `steps` is
    its µs display view (`units.display_us`); the medians are of the ns, shown in µs by the
    `*_us` properties."""

    scenario: Scenario
    steps_ns: pl.DataFrame  # step, step_ns, replayed_ns, predicted_ns, saving_ns
    median_step_ns: float | None
    replayed_median_step_ns: float | None
    predicted_median_step_ns: float | None
    model_error: float | None  # |replayed - captured| / captured of the median step
    origin_ns: int = 0  # the trace start

    # the µs display view of the ns table (units.Shown)
    steps = Shown("steps_ns")

    @property
    def median_step_us(self) -> float | None:
        """The median step as captured, µs."""
        return None if self.median_step_ns is None else duration_us(self.median_step_ns)

    @property
    def replayed_median_step_us(self) -> float | None:
        """The median step replayed with nothing changed, µs."""
        return None if self.replayed_median_step_ns is None else duration_us(self.replayed_median_step_ns)

    @property
    def predicted_median_step_us(self) -> float | None:
        """The median step under the scenario, µs."""
        return None if self.predicted_median_step_ns is None else duration_us(self.predicted_median_step_ns)

    @property
    def saving_us(self) -> float | None:
        """Median step as replayed less as predicted: what the change saves per step."""
        if self.replayed_median_step_ns is None or self.predicted_median_step_ns is None:
            return None
        return duration_us(self.replayed_median_step_ns - self.predicted_median_step_ns)


@dataclass
class Model:
    """The graph of one trace, ordered once, with its replay of the capture; replays scenarios."""

    trace: Trace
    graph: DependencyGraph
    kernel_spacing_ns: int
    slow_launch_ns: int
    prepared: Prepared = field(init=False)
    _base: Schedule | None = field(init=False, default=None)  # see `base`
    _replayed: pl.DataFrame | None = field(init=False, default=None)  # the steps of `base`
    _walked: bool = field(init=False, default=False)  # see `critical_path`

    def __post_init__(self) -> None:
        self.prepared = prepare(self.graph.nodes, self.graph.edges)
        n, e = self.graph.nodes, self.graph.edges
        ix = pl.Int32 if n.height <= INT32[1] else pl.Int64  # node numbers as the edges hold them (1.5 -> 0.7 MB)
        self._gpu_launch = (
            n.select(_node_index().cast(ix), "lane")  # the columns first: an eager filter copies every column
            .filter(pl.col("lane") == "gpu")
            .select("node")
            .join(
                e.filter(pl.col("etype") == "launch").select(
                    node=pl.col("dst").cast(ix), launch_node=pl.col("src").cast(ix)
                ),
                on="node",
                how="left",
            )
            .unique("node", keep="first")
            .sort("node")
        )
        # a scenario cuts end edges only (`_apply`), so a replay reads the captured start of the
        # nodes without start edges alone: the others' go (8 MB at 311 MB, 5 nodes kept), and the
        # end offsets of the syncs alone are kept (4 MB)
        self.prepared = self.prepared.keep_starts().keep_syncs()
        # The captured times live on in the replay of the capture (`base`, which reproduces
        # them; `prepared.ts` keeps the few a replay reads), the edges' destinations in its
        # adjacency (`prepared`, read by `_sync_edges_into`) and their sources in `prepared.src`
        # (int32): the tables need not hold them too (32 MB at 311 MB), and they go before the
        # capture is replayed (its schedule, 24 MB, is made on top of what is left).
        self.graph = replace(self.graph, nodes=n.drop("ts_ns", "end_ns"), edges=e.drop("src", "dst"))
        del n, e
        trim_heap()  # the build's numpy transients, under the arrays held from here on
        self._base = self._replay_capture()

    def _replay_capture(self) -> Schedule:
        d = self.graph.nodes["dur_ns"]
        dur = (d if d.dtype in (pl.Int32, pl.Int64) else d.cast(pl.Int64)).to_numpy()  # Int32 read in place
        # the syncs' own times only: a replay reads no other (8 MB fewer at 311 MB)
        own = self.graph.column_at("own_ns", pl.Series(self.prepared.sync_nodes())).fill_null(0).to_numpy()
        return replay(self.prepared, dur, own)

    @property
    def base(self) -> Schedule:
        """The replay of the capture with nothing changed (it reproduces the captured times).
        `critical_path` lets it go once walked (two arrays of 8 bytes and two of 4 per node: 24 MB at 311
        MB, held through every what-if, which reads only its step times, kept); asked for
        again, it is replayed again (milliseconds with the native loop)."""
        if self._base is None:
            self._base = self._replay_capture()
        return self._base

    def windows(self, sched: Schedule) -> pl.DataFrame:
        """step, start_ns, end_ns of each window in a schedule (see `analyses.windows`)."""
        if self.trace.steps.height:
            return step_times(self.graph.steps, sched, self.trace.steps, self._gpu_launch)
        g = self._gpu_launch
        if g.height:
            s = pl.Series(sched.start_ns).gather(g["node"])
            e = pl.Series(sched.end_ns).gather(g["node"])
            return pl.DataFrame({"step": [None], "start_ns": [s.min()], "end_ns": [e.max()]}, schema=win.WINDOW_SCHEMA)
        cpu = self.graph.nodes.select(_node_index(), "lane").filter(pl.col("lane") == "cpu")["node"]
        s, e = pl.Series(sched.start_ns).gather(cpu), pl.Series(sched.end_ns).gather(cpu)
        return pl.DataFrame({"step": [None], "start_ns": [s.min()], "end_ns": [e.max()]}, schema=win.WINDOW_SCHEMA)

    def __reduce__(self) -> tuple:
        """Pickled as tables and the trace (`model_state`): a cache writes the tables as Arrow
        files and names the trace it holds anyway."""
        from traceanalyzer.analyses.model_state import model_state, restored

        return restored, (self.trace, model_state(self))

    @property
    def walked(self) -> bool:
        """Whether `critical_path` was walked (it is walked once)."""
        return self._walked

    def critical_path(self) -> CriticalPath:
        """The critical path of every step of the capture, walked once: the nodes' threads,
        streams and kinds, which only the walk and the path's lanes read, go once it is walked
        (17 MB at 311 MB, held through every what-if). The caller holds the path (the Session,
        as a result): the model does not, so that a command printing only its shares lets its
        segments go before the what-ifs replay (28 MB at 311 MB); asked twice, it raises."""
        if self._walked:
            raise RuntimeError("the critical path is walked once: the Session holds it (Session.critical_path)")
        self._walked = True
        w = self.windows(self.base)
        if self.graph.nodes.is_empty():  # no timed event at all
            return summarise(walk(self.graph, self.prepared, self.base, w.clear(), []), w.clear())
        # (in a list, so that the table is handed the walk's arrays alone and lets them go: 8 MB)
        walked = [walk_back(self.graph, self.prepared, self.base, w, self._end_nodes(w, self.base))]
        self._replayed = w.select(replayed_ns=pl.col("end_ns") - pl.col("start_ns"))  # what what-ifs read of it
        self._base = None  # walked: the segments are named and merged without it
        trim_heap()
        path = summarise(segment_table(self.graph, w, walked.pop()), w)
        self.graph = replace(self.graph, nodes=self.graph.nodes.drop(*LANE_COLUMNS, "kind", strict=False))
        trim_heap()  # the capture's replay and the walk's arrays
        return path

    def _end_nodes(self, w: pl.DataFrame, sched: Schedule, use_native: bool | None = None) -> list[int]:
        """The node whose end is each window's end: of the nodes ending last at or before it, the
        latest to start, then the lowest (-1: none). On the schedule's arrays: each node counted
        into the first window end at or after its own, the latest end per window by a running
        maximum, then the few nodes ending at those instants (no sort of a million nodes);
        natively in one pass (`_native.window_ends`) when built and enabled, `use_native`
        forcing one (True: native, which must be built)."""
        e, s = sched.end_ns, sched.start_ns
        wend = w["end_ns"]
        out = [-1] * w.height
        known = wend.drop_nulls().unique().sort().to_numpy()
        if not len(e) or not len(known):
            return out
        fn = native_kernel("window_ends", force=bool(use_native)) if use_native is not False else None
        if fn is not None:  # one pass over the nodes, natively (40 ms of numpy passes at 311 MB)
            at = np.empty(len(known), dtype=np.int64)
            fn(np.ascontiguousarray(s, dtype=np.int64), np.ascontiguousarray(e, dtype=np.int64), known, at)
            by_end = dict(zip(known.tolist(), at.tolist(), strict=True))
            return [by_end[x] if x is not None else -1 for x in wend.to_list()]
        bucket = np.searchsorted(known, e, side="left")  # the first window end at or after each node's end
        inside = bucket < len(known)
        latest = np.full(len(known), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, bucket[inside], e[inside])
        latest = np.maximum.accumulate(latest)  # the latest node end at or before each window end
        del bucket, inside
        found = latest > np.iinfo(np.int64).min
        cand = np.flatnonzero(np.isin(e, latest[found]))
        pick = cand[np.lexsort((cand, -s[cand], e[cand]))]  # per end instant: latest start, then lowest node
        first = np.ones(len(pick), dtype=np.bool_)
        first[1:] = e[pick][1:] != e[pick][:-1]
        node_at = dict(zip(e[pick][first].tolist(), pick[first].tolist(), strict=True))
        by_end = {int(k): node_at[int(v)] for k, v, f in zip(known, latest, found, strict=True) if f}
        return [by_end.get(x, -1) if x is not None else -1 for x in wend.to_list()]

    def what_if(self, scenario: Scenario) -> WhatIf:
        """Replay `scenario` and compare its median step with the capture's."""
        origin = self.trace.meta.origin_ns
        if self.graph.nodes.is_empty():
            empty = pl.DataFrame(schema={"step": pl.Int64, **{c: pl.Int64 for c in STEP_COLUMNS}})
            return WhatIf(scenario, empty, None, None, None, None, origin)
        dur, own, zero_lag, cut = self._apply(scenario)
        trim_heap()  # the scenario's float arrays, under the schedule made next
        sched = replay(self.prepared, dur, own, None, cut, binds=False, zero_lag=zero_lag)  # times are all it reads
        del dur, own, zero_lag, cut  # (8 MB at 311 MB, beside the schedule's 16 while its steps are read)
        captured = win.step_windows(self.trace).with_columns(step_ns=pl.col("end_ns") - pl.col("start_ns"))
        if self._replayed is None:  # the capture's replay is the same for every scenario
            self._replayed = self.windows(self.base).select(replayed_ns=pl.col("end_ns") - pl.col("start_ns"))
        base = self._replayed
        new = self.windows(sched).select(predicted_ns=pl.col("end_ns") - pl.col("start_ns"))
        steps = (
            captured.with_row_index("_k")
            .join(base.with_row_index("_k"), on="_k", how="left")
            .join(new.with_row_index("_k"), on="_k", how="left")
            .select("step", "step_ns", "replayed_ns", "predicted_ns")
            .with_columns(saving_ns=pl.col("replayed_ns") - pl.col("predicted_ns"))
        )
        del sched
        trim_heap()  # the scenario's arrays
        med = lambda c: steps[c].median() if steps.height else None  # noqa: E731
        m, r, p = med("step_ns"), med("replayed_ns"), med("predicted_ns")
        err = abs(r - m) / m if m and r is not None else None
        return WhatIf(scenario, steps, m, r, p, err, origin)

    def _apply(self, sc: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Per node durations, per sync (`Prepared.sync_nodes`) own times, per edge the lags taken
        away (`replay`'s `zero_lag`) and the edges cut (each None: none) under `sc`."""
        e = self.graph.edges
        change = self._changes(sc)
        n = self.graph.nodes.height
        # a slice of rows at a time (2 MB per float temporary): whole, the float intermediates of
        # every node were held together (a what-if at 311 MB held 90 MB)
        # int32 while every duration fits (the replay reads either): 4 MB fewer at 311 MB
        dur_l = np.empty(n, dtype=np.int32)
        for a in range(0, n, SLICE_ROWS):
            rows = slice(a, a + SLICE_ROWS)
            got = whole_ns(change.durations(rows))
            if dur_l.dtype == np.int32 and len(got) and int(got.max()) > INT32[1]:
                dur_l = dur_l.astype(np.int64)
            dur_l[rows] = got
            del got
        # own at the syncs only, the one place a replay reads it
        syncs = self.prepared.sync_nodes()
        own = self.graph.column_at("own_ns", pl.Series(syncs)).fill_null(0).cast(pl.Float64).to_numpy()
        own_l = whole_ns(change.own_times(syncs, own))
        drop = change.dropped if sc.drop or sc.unsync else None
        del change, own
        zero_lag = None  # the edges whose lag the scenario takes away (a byte per edge, not a copy of the lags)
        if "gpu_wait" in sc.without or "kernel_spacing" in sc.without:
            gpu_edge = e["etype"].is_in(["stream", "event"])
            spacing = e["lag_ns"] <= self.kernel_spacing_ns
            hit = (gpu_edge & (e["lag_ns"] > 0)) & (spacing if "gpu_wait" not in sc.without else ~spacing)
            if "gpu_wait" in sc.without and "kernel_spacing" in sc.without:
                hit = gpu_edge & (e["lag_ns"] > 0)
            zero_lag = hit.fill_null(False).to_numpy()
        cut = None
        stop = e["to_end"].to_numpy().copy() if "sync" in sc.without else np.zeros(e.height, dtype=np.bool_)
        if sc.drop or sc.unsync:
            self._sync_edges_into(stop, drop)  # node v is row v
        if stop.any():
            cut = stop
        return dur_l, own_l, zero_lag, cut

    def _changes(self, sc: Scenario) -> NodeChanges:
        """What `sc` changes per node (`NodeChanges`). A null id matches no op or call."""
        g = self.graph
        n = g.nodes
        cpu = (n["lane"] == "cpu").fill_null(False).to_numpy()
        dur = n["dur_ns"].to_numpy()
        out = NodeChanges(dur, cpu)
        removed = [layer for c in sc.without for layer in CPU_CAUSES.get(c, ())]
        if removed:  # summed as floats (exact): the layer times may be Int32, their sum need not fit
            out.gone = g.layer_ns(removed)
        if "slow_launch" in sc.without:
            # runtime_id is the runtime table's row number: its duration by position, not a join
            rdur = self.trace.runtime["dur_ns"]
            slow = rdur.gather(n["runtime_id"]) >= self.slow_launch_ns if rdur.len() else None
            out.slow = cpu & slow.fill_null(False).to_numpy() if slow is not None else np.zeros(len(dur), np.bool_)
        minus_wait = "peer_wait" in sc.without or "gpu_wait" in sc.without
        waits = g.column("wait_ns").fill_null(0).cast(pl.Float64).to_numpy() if sc.speedup or minus_wait else None
        if minus_wait:
            out.wait = waits
        names = g.gpu_node_names() if sc.speedup else None  # GPU names only where a pattern is matched
        op = n["op_id"]
        for pattern, f in sc.speedup:
            on_gpu = ~cpu & names.str.contains(pattern).fill_null(False).to_numpy()
            on_cpu = cpu & member(op, self._matching_ops(pattern))
            out.speedups.append((on_gpu, on_cpu, waits, 0.0 if math.isinf(f) else 1.0 / f))
        if sc.drop:
            dropped = np.zeros(len(dur), dtype=np.bool_)
            for name in sc.drop:
                dropped |= member(op, self._matching_ops(name, exact=True))
            out.dropped_ops = dropped
        if sc.unsync:
            out.t_sync = g.layer_ns(["sync"])
            out.unsynced = cpu & member(n["runtime_id"], pl.Series(list(sc.unsync), dtype=pl.Int64)) & (out.t_sync > 0)
        return out

    def _sync_edges_into(self, stop: np.ndarray, nodes: np.ndarray) -> None:
        """Set `stop` (per edge) on the `to_end` edges of the nodes flagged in `nodes` (per node):
        those the adjacency lists as their end edges (`Prepared.end_idx`, grouped by
        destination), range by range for the few syncs among them."""
        syncs, off = self.prepared.end_ranges()
        v = np.flatnonzero(nodes[syncs])  # (positions among the syncs)
        lo, count = off[v].astype(np.int64), (off[v + 1] - off[v]).astype(np.int64)
        first = np.repeat(np.cumsum(count) - count, count)  # each range's start among the edges taken
        stop[self.prepared.end_idx[np.repeat(lo, count) + np.arange(int(count.sum())) - first]] = True

    def _matching_ops(self, pattern: str, exact: bool = False) -> pl.Series:
        """The op ids of slices that lie inside an op matching `pattern` (or named exactly)."""
        ops = self.trace.ops
        ids = self.graph.nodes["op_id"].drop_nulls().unique().cast(pl.Int64)
        anc = ancestors(ops, ids)
        names = ops.select(ancestor_id="op_id", _n="name")
        cond = pl.col("_n") == pattern if exact else pl.col("_n").str.contains(pattern)
        return anc.join(names, on="ancestor_id", how="left").filter(cond)["op_id"].unique()


def step_times(
    graph_steps: pl.DataFrame, sched: Schedule, trace_steps: pl.DataFrame, gpu_launch: pl.DataFrame
) -> pl.DataFrame:
    """step, start_ns, end_ns of each step window in the replayed schedule, by the one definition
    of a step (`trace.extend_steps`) applied to replayed times. `gpu_launch`: node, launch_node
    (the slice that starts each GPU activity's launch call)."""
    from traceanalyzer.trace import extend_steps

    # the nodes' times gathered from the schedule's arrays themselves (a Series of each copied
    # them: 16 MB per replay at 311 MB)
    def at(times: np.ndarray, nodes: pl.Series) -> pl.Series:
        return pl.Series(times[nodes.cast(pl.Int64).to_numpy()], dtype=pl.Int64)

    st = graph_steps.filter(pl.col("first_node").is_not_null() & pl.col("last_node").is_not_null())
    ranges = trace_steps.select("step", "name", "pid", "tid", "op_id").join(
        st.select("step", "first_node", "last_node"), on="step"
    )
    ranges = ranges.with_columns(
        cpu_start_ns=at(sched.start_ns, ranges["first_node"]), cpu_end_ns=at(sched.end_ns, ranges["last_node"])
    ).drop("first_node", "last_node")
    g = gpu_launch.with_columns(
        launch_ts_ns=pl.when(pl.col("launch_node").is_not_null()).then(
            at(sched.start_ns, gpu_launch["launch_node"].fill_null(0))
        ),
        end_ns=at(sched.end_ns, gpu_launch["node"]),
    )
    return extend_steps(ranges, g).select("step", "start_ns", "end_ns").sort("start_ns")
