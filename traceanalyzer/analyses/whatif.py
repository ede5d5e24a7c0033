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
from traceanalyzer.analyses.graph_table import trim_heap
from traceanalyzer.analyses.op_tree import ancestors
from traceanalyzer.analyses.replay import Prepared, Schedule, prepare, replay, step_times
from traceanalyzer.analyses.scenario import CPU_CAUSES, SCENARIO_CAUSES, Scenario  # noqa: F401 - re-exported
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us

STEP_COLUMNS = ("step_ns", "replayed_ns", "predicted_ns", "saving_ns")
# a node's thread or stream, read by the path's lanes only, and its kind, read by the walk only
LANE_COLUMNS = ("thread",)


SLICE_ROWS = 1 << 18  # a what-if's expressions run on this many nodes at once (2 MB per float temporary)


def _per_slice(frame: pl.DataFrame, expr: pl.Expr, dtype: type) -> np.ndarray:
    """`expr` (elementwise: no aggregation, no window) over `frame`, as a numpy array of
    `dtype`, evaluated SLICE_ROWS rows at a time into one array."""
    out = np.empty(frame.height, dtype=dtype)
    for a in range(0, frame.height, SLICE_ROWS):
        out[a : a + SLICE_ROWS] = frame.slice(a, SLICE_ROWS).select(expr).to_series().to_numpy()
    return out


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
    _path: CriticalPath | None = field(init=False, default=None)  # see `critical_path`

    def __post_init__(self) -> None:
        self.prepared = prepare(self.graph.nodes, self.graph.edges)
        n, e = self.graph.nodes, self.graph.edges
        self._base = self._replay_capture()
        self._gpu_launch = (
            n.select(_node_index(), "lane")  # the columns first: an eager filter copies every column
            .filter(pl.col("lane") == "gpu")
            .select("node")
            .join(e.filter(pl.col("etype") == "launch").select(node="dst", launch_node="src"), on="node", how="left")
            .unique("node", keep="first")
            .sort("node")
        )
        # The captured times live on in `prepared.ts` and the replay of the capture (`base`,
        # which reproduces them), the edges' destinations in its adjacency (`prepared`, read by
        # `_sync_edges_into`) and their sources in `prepared.src` (int32): the tables need not
        # hold them too (32 MB at 311 MB).
        self.graph = replace(self.graph, nodes=n.drop("ts_ns", "end_ns"), edges=e.drop("src", "dst"))
        trim_heap()  # the build's numpy transients, under the arrays held from here on

    def _replay_capture(self) -> Schedule:
        n = self.graph.nodes
        dur = n["dur_ns"].cast(pl.Int64).to_numpy()
        # the syncs' own times only: a replay reads no other (8 MB fewer at 311 MB)
        own = self.graph.column("own_ns").fill_null(0).gather(self.prepared.sync_nodes()).to_numpy()
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

    def critical_path(self) -> CriticalPath:
        """The critical path of every step of the capture (walked once: the nodes' threads,
        streams and kinds, which only the walk and the path's lanes read, go once it is walked:
        17 MB at 311 MB, held through every what-if)."""
        if self._path is not None:
            return self._path
        w = self.windows(self.base)
        if self.graph.nodes.is_empty():  # no timed event at all
            return summarise(walk(self.graph, self.prepared, self.base, w.clear(), []), w.clear())
        segments = walk_back(self.graph, self.prepared, self.base, w, self._end_nodes(w, self.base))
        self._replayed = w.select(replayed_ns=pl.col("end_ns") - pl.col("start_ns"))  # what what-ifs read of it
        self._base = None  # walked: the segments are named and merged without it
        trim_heap()
        path = summarise(segment_table(self.graph, w, segments), w)
        del segments
        self._path = path
        self.graph = replace(self.graph, nodes=self.graph.nodes.drop(*LANE_COLUMNS, "kind", strict=False))
        trim_heap()  # the capture's replay and the walk's arrays
        return path

    def _end_nodes(self, w: pl.DataFrame, sched: Schedule) -> list[int]:
        """The node whose end is each window's end: of the nodes ending last at or before it, the
        latest to start, then the lowest (-1: none). On the schedule's arrays: each node counted
        into the first window end at or after its own, the latest end per window by a running
        maximum, then the few nodes ending at those instants (no sort of a million nodes)."""
        e, s = sched.end_ns, sched.start_ns
        wend = w["end_ns"]
        out = [-1] * w.height
        known = wend.drop_nulls().unique().sort().to_numpy()
        if not len(e) or not len(known):
            return out
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
        sched = replay(self.prepared, dur, own, None, cut, binds=False, zero_lag=zero_lag)  # times are all it reads
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
        del sched, dur, own, zero_lag, cut
        trim_heap()  # the scenario's arrays
        med = lambda c: steps[c].median() if steps.height else None  # noqa: E731
        m, r, p = med("step_ns"), med("replayed_ns"), med("predicted_ns")
        err = abs(r - m) / m if m and r is not None else None
        return WhatIf(scenario, steps, m, r, p, err, origin)

    def _apply(self, sc: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Per node durations, per sync (`Prepared.sync_nodes`) own times, per edge the lags taken
        away (`replay`'s `zero_lag`) and the edges cut (each None: none) under `sc`."""
        n = self.graph.nodes
        e = self.graph.edges
        cpu = pl.col("lane") == "cpu"
        dur = pl.col("dur_ns").cast(pl.Float64)
        own = pl.col("own_ns").fill_null(0).cast(pl.Float64)
        removed = [layer for c in sc.without for layer in CPU_CAUSES.get(c, ())]
        # the columns the scenario reads (no copy), and in one select the two integer columns it
        # gives: no frame of float intermediates, no node column (a what-if at 311 MB held 90 MB)
        frame = n.select("lane", "op_id", "runtime_id", "dur_ns")
        frame = frame.with_columns(self.graph.column("wait_ns"))  # own_ns: at the syncs only, below
        if sc.unsync:
            frame = frame.with_columns(t_sync=pl.Series(self.graph.layer_ns(["sync"])))
        exprs_dur, exprs_own = dur, own
        if removed:  # summed as floats (exact): the layer times may be Int32, their sum need not fit
            frame = frame.with_columns(_gone=pl.Series(self.graph.layer_ns(removed)))
            gone = pl.col("_gone")
            keep = pl.when(cpu & (pl.col("dur_ns") > 0)).then((1 - gone / pl.col("dur_ns")).clip(0, 1)).otherwise(1.0)
            exprs_dur, exprs_own = exprs_dur * keep, exprs_own * keep
        if "slow_launch" in sc.without:
            # runtime_id is the runtime table's row number: its duration by position, not a join
            rdur = self.trace.runtime["dur_ns"]
            frame = frame.with_columns(_rdur=rdur.gather(frame["runtime_id"]) if rdur.len() else None)
            slow = cpu & (pl.col("_rdur") >= self.slow_launch_ns).fill_null(False)
            exprs_dur = pl.when(slow).then(0.0).otherwise(exprs_dur)
        if "peer_wait" in sc.without or "gpu_wait" in sc.without:
            exprs_dur = exprs_dur - pl.col("wait_ns").fill_null(0)
        if sc.speedup:  # GPU names only where a pattern is matched against them
            frame = frame.with_columns(name=self.graph.gpu_node_names())
        for pattern, f in sc.speedup:
            hit = self._matching_ops(pattern)
            scale = 0.0 if math.isinf(f) else 1.0 / f
            on_gpu = ~cpu & pl.col("name").str.contains(pattern)
            on_cpu = cpu & pl.col("op_id").is_in(hit.implode())
            w = pl.col("wait_ns").fill_null(0)
            exprs_dur = (
                pl.when(on_gpu)
                .then(w + (exprs_dur - w) * scale)
                .when(on_cpu)
                .then(exprs_dur * scale)
                .otherwise(exprs_dur)
            )
            exprs_own = pl.when(on_cpu).then(exprs_own * scale).otherwise(exprs_own)
        dropped = pl.lit(False)
        for name in sc.drop:
            dropped = dropped | pl.col("op_id").is_in(self._matching_ops(name, exact=True).implode())
        dur_x = pl.when(dropped).then(0.0).otherwise(exprs_dur)
        own_x = pl.when(dropped).then(0.0).otherwise(exprs_own)
        if sc.unsync:
            unsynced = cpu & pl.col("runtime_id").is_in(list(sc.unsync)) & (pl.col("t_sync") > 0)
            dur_x = pl.when(unsynced).then((dur_x - pl.col("t_sync")).clip(0)).otherwise(dur_x)
            own_x = pl.when(unsynced).then(0.0).otherwise(own_x)
            dropped = dropped | unsynced
        # one column at a time, a slice of rows at a time: evaluated at once, polars holds every
        # float intermediate of every node together (the peak of a whole summary at 311 MB)
        # own at the syncs only, the one place a replay reads it (elementwise, so the same values
        # on those rows; the node-long own column goes before the durations are made)
        syncs = self.prepared.sync_nodes()
        at_syncs = frame[syncs].with_columns(self.graph.column("own_ns").gather(syncs))
        own_l = _per_slice(at_syncs, own_x.clip(0).round().cast(pl.Int64), np.int64)
        del at_syncs
        dur_l = _per_slice(frame, dur_x.clip(0).round().cast(pl.Int64), np.int64)
        drop = _per_slice(frame, dropped.fill_null(False), np.bool_) if sc.drop or sc.unsync else None
        del frame
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
            self._sync_edges_into(stop, np.flatnonzero(drop))  # node v is row v
        if stop.any():
            cut = stop
        return dur_l, own_l, zero_lag, cut

    def _sync_edges_into(self, stop: np.ndarray, nodes: np.ndarray) -> None:
        """Set `stop` (per edge) on the `to_end` edges of `nodes`: those the adjacency lists as
        their end edges (`Prepared.end_idx`, grouped by destination)."""
        p = self.prepared
        owner = np.repeat(np.arange(len(p.ts), dtype=np.int64), np.diff(p.end_off))  # per end edge, its node
        stop[p.end_idx[np.isin(owner, nodes)]] = True

    def _matching_ops(self, pattern: str, exact: bool = False) -> pl.Series:
        """The op ids of slices that lie inside an op matching `pattern` (or named exactly)."""
        ops = self.trace.ops
        ids = self.graph.nodes["op_id"].drop_nulls().unique().cast(pl.Int64)
        anc = ancestors(ops, ids)
        names = ops.select(ancestor_id="op_id", _n="name")
        cond = pl.col("_n") == pattern if exact else pl.col("_n").str.contains(pattern)
        return anc.join(names, on="ancestor_id", how="left").filter(cond)["op_id"].unique()
