"""The tables a dependency graph is held in (`dependency_graph` builds them): what each holds,
how its nodes are named, the narrowing that keeps the node table, the largest, small, and the
C heap's free pages given back once the model's numpy transients are gone (`trim_heap`)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import polars as pl


@dataclass(frozen=True)
class DependencyGraph:
    """nodes (node v is row v: CPU slices first, then GPU activities): lane (cpu|gpu), thread
    (a slice's: a row of `threads`, pid and tid; an activity's device and stream are the
    trace's, `gpu_lanes`), ts_ns,
    end_ns (captured), dur_ns (the modelled duration), kind, runtime_id, op_id; own: the nodes
    whose own time (a sync's without waiting) is not their duration; gpu: per GPU node its gpu_id and wait_ns (a collective's
    wait for peers; `column(name)` gives either for every node); edges: src, dst, etype,
    from_start, to_end, lag_ns; steps: step, pid, tid, cpu_start_ns, cpu_end_ns, first_node,
    last_node (the slices that begin and end each step's
    CPU range); layer_of and layer_times: how much of each CPU slice each layer of
    `cpu_activity` covers (`layer_table`: a slice's one layer, else its times above zero). `names(rows)` names nodes,
    `layer_ns(layers)` sums layer times per node, `lanes(rows)` gives their threads and streams.

    The node table is the largest of the graph (a row per slice of every launching thread), so
    it holds no name (gathered by id when asked) and no node column; row numbers, thread and
    stream ids, the layer times and the durations are Int32 where every value fits (`narrow`);
    `kind` and `lane`, like the edges' `etype`, are Enums (a byte each); it is one chunk
    (`one_chunk`). The layer times are a long table of the times above zero, not a column per
    layer: a slice lies in one layer but for a few (9 bytes a slice rather than 28 at 311 MB).
    The what-if `Model` drops its captured times (ts_ns, end_ns) once its replay of the capture
    holds them, and the edges' `dst` once its adjacency (`replay.Prepared`) holds them."""

    nodes: pl.DataFrame
    edges: pl.DataFrame
    steps: pl.DataFrame
    # the names nodes take, by id: runtime calls', ops' (runtime_id, op_id) and GPU activities' (gpu_id);
    # None, with gpu_lanes, where `names_from` gives them (`trace_columns`)
    runtime_names: pl.Series | None
    op_names: pl.Series | None
    gpu_names: pl.Series | None
    layer_times: pl.DataFrame | None = None  # None: no layer time known (every one zero)
    layer_of: pl.Series | None = None  # per CPU slice its one layer (an index into layer_times' layers), or null
    # the trace's GPU activities' device and stream (by gpu_id: the rows of its GPU table, not copied)
    gpu_lanes: pl.DataFrame | None = None
    # the graph's threads (pid, tid), by the CPU slices' `thread` number
    threads: pl.DataFrame | None = None
    # per GPU node (the last rows, in node order) what only they have: gpu_id, wait_ns (`column`)
    gpu: pl.DataFrame | None = None

    # node, own_ns of the nodes whose own time is not their duration (the syncs'; `column`)
    own: pl.DataFrame | None = None
    names_from: Any = None  # the Trace whose columns the names and lanes are, where they are not held

    def trace_columns(self) -> tuple[pl.Series, pl.Series, pl.Series, pl.DataFrame | None]:
        """The calls', ops' and GPU activities' names and the activities' device and stream: held,
        or read from `names_from` when asked. A model read back from the cache holds none: they
        are three of the trace's tables (300 MB at 1 GB), which a what-if never reads."""
        if self.runtime_names is not None or self.names_from is None:
            return self.runtime_names, self.op_names, self.gpu_names, self.gpu_lanes
        t = self.names_from
        return t.runtime["name"], t.ops["name"], t.gpu["name"], t.gpu.select("device", "stream")

    def column(self, name: str) -> pl.Series:
        """The node column `name`, a value per node: the node table's; one of `gpu` (gpu_id,
        wait_ns), null on the CPU slices; own_ns, the duration but where `own` says (Int64).
        Made when asked (4-8 MB at 311 MB), not held."""
        if name == "own_ns" and self.own is not None:
            own = self.nodes["dur_ns"].cast(pl.Int64)
            return (
                own.scatter(self.own["node"], self.own["own_ns"].cast(pl.Int64)).alias(name)
                if self.own.height
                else own.alias(name)
            )
        if self.gpu is None or name not in self.gpu.columns:
            return self.nodes[name]
        g = self.gpu[name]
        return pl.concat([pl.repeat(None, self.nodes.height - g.len(), dtype=g.dtype, eager=True), g]).alias(name)

    def column_at(self, name: str, rows: pl.Series) -> pl.Series:
        """`column(name).gather(rows)` (rows >= 0), gathered from where the column is held: a
        few rows of a GPU node's column, or own_ns at a few nodes, without making it for every
        node (4-16 MB at 311 MB)."""
        if name == "own_ns" and self.own is not None:
            got = self.nodes["dur_ns"].gather(rows).cast(pl.Int64)
            if not self.own.height or not rows.len():
                return got.alias(name)
            # each row's own time where `own` has one (its nodes are in node order: a search)
            nodes, own = self.own["node"].cast(pl.Int64).to_numpy(), self.own["own_ns"].cast(pl.Int64).to_numpy()
            r = rows.cast(pl.Int64).to_numpy()
            at = np.minimum(np.searchsorted(nodes, r), len(nodes) - 1)
            hit = nodes[at] == r
            return got.scatter(np.flatnonzero(hit), own[at[hit]]).alias(name)
        if self.gpu is None or name not in self.gpu.columns:
            return self.column(name).gather(rows)
        g = self.gpu[name]
        first = self.nodes.height - g.len()  # the GPU nodes are the last rows
        at = rows.cast(pl.Int64) - first
        got = g.gather(at.clip(0)) if g.len() else pl.repeat(None, rows.len(), dtype=g.dtype, eager=True)
        return pl.select(pl.when(at >= 0).then(got)).to_series().alias(name)

    def lanes(self, rows: pl.Series) -> pl.DataFrame:
        """Per node of `rows` its lane: _lt (cpu|gpu), pid and tid (a CPU slice's thread), device
        and stream (a GPU activity's, gathered by gpu_id from the trace's GPU table: the node
        table holds no copy), Int64; null where a row is negative (no node)."""
        at = rows.clip(0)
        n = self.nodes.select(_lt="lane", _th="thread")[at].with_columns(_g=self.column_at("gpu_id", at))
        th = self.threads
        for c in ("pid", "tid"):
            on = th[c].cast(pl.Int64).gather(n["_th"]) if th is not None and th.height else None
            n = n.with_columns(on.alias(c) if on is not None else pl.lit(None, pl.Int64).alias(c))
        g = self.trace_columns()[3]
        for c in ("device", "stream"):
            on = g[c].cast(pl.Int64).gather(n["_g"]) if g is not None and g.height else None
            n = n.with_columns(on.alias(c) if on is not None else pl.lit(None, pl.Int64).alias(c))
        n = n.drop("_g", "_th").select(pl.when(rows >= 0).then(pl.col(c)).alias(c) for c in ("_lt", *LANE))
        return n.cast({c: pl.Int64 for c in LANE})

    def layer_ns(self, layers: list[str]) -> np.ndarray:
        """Per node (float64, n of them) the sum of its times in `layers` (a layer listed twice
        counts twice; 0 where none): a slice's duration where its one layer (`layer_of`) is
        listed, plus its rows of `layer_times`. Exact: sums of integer ns below 2^53."""
        lt, n = self.layer_times, self.nodes.height
        out = np.zeros(n, dtype=np.float64)
        if not layers or lt is None:
            return out
        categories = lt["layer"].dtype.categories.to_list()
        times = np.zeros(len(categories), dtype=np.float64)  # how often each layer is listed
        for layer in layers:
            if layer in categories:
                times[categories.index(layer)] += 1.0
        if self.layer_of is not None and self.layer_of.len():
            # in place, into `out` (float64 temporaries of a million slices are 8 MB each)
            code = self.layer_of.fill_null(len(times)).to_numpy()  # none: the 0 appended below
            k = len(code)
            np.take(np.append(times, 0.0), code, out=out[:k], mode="clip")  # (with "raise", out is buffered)
            np.multiply(out[:k], self.nodes["dur_ns"][:k].to_numpy(), out=out[:k])
        if lt.height:
            weights = lt["ns"].to_numpy().astype(np.float64) * times[lt["layer"].to_physical().to_numpy()]
            np.add.at(out, lt["node"].to_numpy(), weights)  # a few rows: no node-long count
        return out

    def names(self, rows: pl.Series, missing: str | None = None) -> pl.Series:
        """The name of the nodes `rows`: a GPU activity's own; a slice's runtime call, else its
        innermost op, else its kind; `missing` where a row is negative (no node).

        One gather from the names of calls, ops, activities and kinds side by side (one chunk),
        so the names come back as views of those strings: gathering from the trace's columns
        (dozens of chunks, as the loader reads them) or choosing among several gathers copies
        every string (50 MB for the 174k segments of a critical path at 311 MB). Only the rows
        asked for side by side, then gathered from, is worse: polars then compacts the few
        names the views point to into a buffer of their own (18 MB held by the critical path at
        311 MB, against 13 MB of views for the call's time)."""
        at = rows.clip(0)
        n = self.nodes.select("lane", "runtime_id", "op_id", "kind")[at].with_columns(self.column_at("gpu_id", at))
        kind = n["kind"]
        # a kind's name by its Enum code (the strings of 174k segments hashed: ~4 ms at 311 MB)
        enum = isinstance(kind.dtype, pl.Enum)
        kinds = kind.dtype.categories if enum else kind.cast(pl.String).drop_nulls().unique().sort()
        runtime_names, op_names, gpu_names, _ = self.trace_columns()
        r, o, g = runtime_names.len(), op_names.len(), gpu_names.len()
        last = pl.Series([missing], dtype=pl.String)
        every = pl.concat([runtime_names, op_names, gpu_names, kinds, last], rechunk=True)

        def named(names: pl.Series, col: str, size: int) -> pl.Expr:  # an id that has a name
            has = names.is_not_null().extend_constant(False, 1)  # row `size`: no id
            at = pl.col(col).cast(pl.Int64)
            return pl.lit(has).gather(pl.when(at < size).then(at).otherwise(size).fill_null(size))

        code = pl.col("kind").to_physical() if enum else pl.col("kind").cast(pl.String)
        code = code if enum else code.replace_strict(kinds, range(kinds.len()), default=None)
        at = (
            pl.when(pl.col("lane") == "gpu")
            .then(pl.when(pl.col("gpu_id") < g).then(r + o + pl.col("gpu_id").cast(pl.Int64)))
            .when(named(runtime_names, "runtime_id", r))
            .then(pl.col("runtime_id").cast(pl.Int64))
            .when(named(op_names, "op_id", o))
            .then(r + pl.col("op_id").cast(pl.Int64))
            .otherwise(r + o + g + code.cast(pl.Int64))
        )
        at = pl.when(pl.lit(rows) < 0).then(every.len() - 1).otherwise(at)
        return every.gather(n.select(at)[:, 0]).alias("name")

    def gpu_node_names(self) -> pl.Series:
        """Every node's GPU activity name (null on CPU slices), in node order (views of the
        names, gathered from one chunk)."""
        return _by_id(self.trace_columns()[2].rechunk(), self.column("gpu_id")).alias("name")


def _by_id(names: pl.Series, ids: pl.Series) -> pl.Series:
    """names[id] per id (null where the id is)."""
    if names.len() == 0:
        return pl.repeat(None, ids.len(), dtype=pl.String, eager=True)
    return names.gather(ids)


INT32 = (-(2**31), 2**31 - 1)
LANE = ("pid", "tid", "device", "stream")


def layer_table(cpu: pl.DataFrame, layers: tuple[str, ...]) -> tuple[pl.DataFrame, pl.Series, pl.DataFrame]:
    """The CPU slices (node v is row v) without their `t_<layer>` columns, and those times
    (above zero; a null counts as zero, as a what-if reads them) in two parts: per slice the one
    layer that covers all of its `dur_ns` (an Int8 index into `layers`; null where none does:
    several layers, or a thread's wait, whose duration is zero), and for the other slices every
    time as a long table node, layer, ns. Nearly every slice lies in one layer: a byte a slice
    instead of 28 (7 columns) or 9 (the long table alone). Each column leaves the slices as it
    is read (`drop_in_place`), so no more than one is held twice."""
    n = cpu.height
    dur = cpu["dur_ns"].fill_null(-1).cast(pl.Int64).to_numpy()
    count = np.zeros(n, dtype=np.int8)  # how many layers have time in each slice (at most 7)
    code = np.full(n, -1, dtype=np.int8)  # a layer holding all of the slice's duration
    present = [(k, f"t_{layer}") for k, layer in enumerate(layers) if f"t_{layer}" in cpu.columns]
    for k, col in present:
        v = _positive(cpu[col])
        count += v > 0
        code[(v > 0) & (v == dur)] = k
        del v
    one = (count == 1) & (code >= 0)  # its one layer, all of its duration
    del count, dur
    # the long table of the other slices alone, read from each column as it leaves the slices
    # (a table of every time above zero, filtered after, held ~1.5 M rows at 311 MB)
    rest = ~one
    parts = []
    for k, col in present:
        t = cpu.drop_in_place(col)
        at = np.flatnonzero((_positive(t) > 0) & rest)
        layer = layers[k]
        parts.append(
            pl.DataFrame(
                {
                    "node": pl.Series(at, dtype=pl.Int32) if n < INT32[1] else pl.Series(at, dtype=pl.Int64),
                    "layer": pl.Series([layer] * len(at), dtype=pl.Enum(layers)),
                    "ns": t.gather(at),
                }
            )
        )
        del t, at
    layer_of = pl.Series("layer_of", code, dtype=pl.Int8).scatter(np.flatnonzero(rest), None)
    del rest, one
    schema = {"node": pl.Int32, "layer": pl.Enum(layers), "ns": pl.Int32}
    rest = pl.concat(parts, how="vertical_relaxed") if parts else pl.DataFrame(schema=schema)
    del parts
    return cpu, layer_of, narrow(rest, ["ns"])


class LayerFold:
    """`layer_table`'s two parts built a layer at a time, as the slices' layer times are folded
    (`slice_kinds`; or all at once by its native fold, `fill`), so that no time column is held:
    per slice whether one layer covers all of it (`t == span`, an Int8 code) and how many layers
    have time in it, per layer the times of the slices it covers in part; the few slices that turn
    out to be a wait (duration 0) or in several layers go to the long table once the waits are
    known (`parts`). Seven Int32 columns of a million slices were 28 MB at 311 MB, under the
    build's peak."""

    def __init__(self, span: np.ndarray, layers: tuple[str, ...]):
        self.span, self.layers = span, layers
        self._start()

    def _start(self) -> None:
        n = len(self.span)
        self.full = np.full(n, -1, dtype=np.int8)  # the layer whose time is all of the slice's
        self.count = np.zeros(n, dtype=np.int8)  # how many layers have time in it (at most 7)
        self.part: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in self.layers]

    def add(self, k: int, t: np.ndarray) -> None:
        """Layer k's time in every slice (read now, not kept; layer 0 starts the fold again)."""
        if k == 0:
            self._start()
        some = t > 0
        self.count += some
        whole = some & (t == self.span)
        some &= ~whole
        at = np.flatnonzero(some)
        self.part[k].append((at, t[at].astype(np.int64)))
        del some, at
        at = np.flatnonzero(whole)
        del whole
        before = self.full[at]
        if (before >= 0).any():  # (two layers with all of a slice: both times to the long table)
            for j in np.unique(before[before >= 0]).tolist():
                mine = at[before == j]
                self.part[j].append((mine, self.span[mine].astype(np.int64)))
        self.full[at] = k

    def fill(self, full: np.ndarray, count: np.ndarray, part: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """The fold of every layer at once (as `add` of each in turn leaves it): `full`, `count`,
        and per layer its part's slices and times (int64, in slice order)."""
        self.full, self.count, self.part = full, count, [[p] for p in part]

    def parts(self, dur: np.ndarray) -> tuple[pl.Series, pl.DataFrame]:
        """`layer_table`'s layer_of and long table for the slices' durations `dur` (a wait's 0)."""
        n = len(self.span)
        one = (self.count == 1) & (self.full >= 0) & (dur == self.span)
        rest = ~one
        out = []
        for k, layer in enumerate(self.layers):
            whole = np.flatnonzero((self.full == k) & rest)
            got = [*self.part[k], (whole, self.span[whole].astype(np.int64))]
            at, ns = np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])
            if len(at) > 1 and not bool((at[1:] > at[:-1]).all()):  # in slice order, as `layer_table` lists them
                order = np.argsort(at, kind="stable")
                at, ns = at[order], ns[order]
            out.append(
                pl.DataFrame(
                    {
                        "node": pl.Series(at, dtype=pl.Int32) if n < INT32[1] else pl.Series(at, dtype=pl.Int64),
                        "layer": pl.Series([layer] * len(at), dtype=pl.Enum(self.layers)),
                        "ns": pl.Series(ns, dtype=pl.Int64),
                    }
                )
            )
        code = np.where(one, self.full, 0).astype(np.int8)
        layer_of = pl.Series("layer_of", code, dtype=pl.Int8).scatter(np.flatnonzero(rest), None)
        del self.full, self.count, self.part
        schema = {"node": pl.Int32, "layer": pl.Enum(self.layers), "ns": pl.Int32}
        table = pl.concat(out, how="vertical_relaxed") if out else pl.DataFrame(schema=schema)
        return layer_of, narrow(table, ["ns"])


def as_enum(s: pl.Series, dtype: pl.Enum) -> pl.Series:
    """`s` cast to the Enum `dtype`; from an Enum whose categories begin `dtype`'s, by its codes
    (a gather of the few categories: the cast looked up each value's string, ~0.28 G
    instructions for the million slices' kinds at 311 MB)."""
    own, cats = s.dtype, dtype.categories
    prefix = isinstance(own, pl.Enum) and own.categories.equals(cats.head(own.categories.len()))
    return pl.Series(s.name, cats, dtype=dtype).gather(s.to_physical()) if prefix else s.cast(dtype)


def _positive(t: pl.Series) -> np.ndarray:
    """A time column as numpy (read in place where it is one chunk without nulls), null as 0."""
    return (t.fill_null(0) if t.null_count() else t).to_numpy()


def narrow(df: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """The columns `names` (those present) as Int32 where every value fits (the same values, half the memory), one column at
    a time so that only one wide column is ever copied at once. An Int64 column in one chunk
    without nulls through numpy (read in place, its bounds and the copy vectorised: ~5
    instructions a value; polars' checked cast alone took ~30)."""
    cols = [c for c in names if c in df.columns and df.schema[c] != pl.Int32]
    for c in cols:
        col = df[c]
        if col.dtype == pl.Int64 and col.n_chunks() == 1 and not col.null_count():
            v = col.to_numpy()
            if not len(v) or (v.min() >= INT32[0] and v.max() <= INT32[1]):
                out, flags = pl.Series(c, v.astype(np.int32)), col.flags
                if flags["SORTED_ASC"] or flags["SORTED_DESC"]:  # (as the cast keeps it)
                    out = out.set_sorted(descending=flags["SORTED_DESC"])
                df = df.with_columns(out)
            del v
            continue
        lo, hi = col.min(), col.max()
        if lo is None or (lo >= INT32[0] and hi <= INT32[1]):
            df = df.with_columns(col.cast(pl.Int32))
    return df


def one_chunk(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with every column in one chunk, copied one column at a time: each column leaves `df`
    (emptied in place) as its copy is made, so no more than one column is ever held twice. A
    frame whose columns are chunked differently (a concatenation, then a column computed over
    all of it) is otherwise copied whole, at once, by the next `drop` or `select`."""
    cols = []
    for name in df.columns:
        cols.append(df.drop_in_place(name).rechunk())
    return pl.DataFrame(cols)


@cache
def _malloc_trim() -> Any:
    """glibc's `malloc_trim`, or None (another C library, or none found)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no such symbol; Windows has no CDLL(None)
        return None


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's `malloc_trim`; elsewhere
    nothing). numpy's arrays come from that heap (not polars' allocator), and glibc returns
    only the free space at its top by itself: the replay's arrays, made after the graph's
    transients and held through every what-if, kept the freed space under them resident (60 MB
    at 311 MB after the critical path). Microseconds; the pages freed stay mapped, so nothing
    changes but RSS."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
