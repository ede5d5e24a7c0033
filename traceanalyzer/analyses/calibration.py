"""The calibration of a dependency graph: the lags and own times that make a replay with nothing
changed give the captured times (`dependency_graph` says why every edge has lag min(0, slack)
and the binding edge the rest). One native pass (`_native.calibrate`, `native/src/calibrate.rs`)
when built, else the same rules on numpy arrays (`_calibrate_np`, the reference it is tested
against in tests/analyses/test_calibrate.py).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyzer.analyses.graph_table import narrow
from traceanalyzer.analyses.replay import int64_values, native_kernel

INT32 = 2**31  # node and edge indexes below it are int32 (the native pass reads them so)


def _binding(group: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """Per group (int64 code per edge), the edge of the latest `ready`, the lowest index of
    equal ones; in group order. One stable sort of the group codes and a maximum per run (a
    lexsort of group, ready and index was three sorts more)."""
    if not len(group):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(group, kind="stable")  # each group's edges in index order
    g, r = group[order], ready[order]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    del g
    counts = np.diff(np.append(starts, len(order)))
    run = np.repeat(np.arange(len(starts)), counts)
    at_max = np.flatnonzero(r == np.maximum.reduceat(r, starts)[run])
    del r
    first = np.ones(len(at_max), dtype=np.bool_)
    first[1:] = run[at_max][1:] != run[at_max][:-1]
    return order[at_max[first]]


def calibrate(
    nodes: pl.DataFrame, edges: pl.DataFrame, use_native: bool | None = None, start_first: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Lags and own times that make a replay with nothing changed give the captured times, and
    the edges in (destination, source) order (`start_first`: the start edges so, then the
    `to_end` edges so: a stable partition, so each node's start edges and its end edges keep
    their order, and the replay's adjacency needs no index of the start edges). `nodes` are numbered 0..n-1 in row order; node
    times are gathered by position, so the wide node table (names and all) is never joined or
    sorted. The native pass (`_native.calibrate`: one pass over the edges, one over the nodes, a
    counting sort) when built and enabled and no node time is null, else `_calibrate_np` on
    int64 arrays; `use_native` forces one (True: native, which must be built)."""
    ts, end = int64_values(nodes["ts_ns"]), int64_values(nodes["end_ns"])
    dur = int64_values(nodes["dur_ns"])
    n, m = len(ts), edges.height
    fs = np.ascontiguousarray(edges["from_start"].to_numpy(), dtype=np.bool_)
    te = np.ascontiguousarray(edges["to_end"].to_numpy(), dtype=np.bool_)
    fn = native_kernel("calibrate", force=bool(use_native)) if use_native is not False else None
    if use_native and fn is None:
        raise RuntimeError("the native calibration is not built (pip install -e .)")
    nulls = nodes.select(pl.col("ts_ns", "end_ns", "dur_ns").null_count()).sum_horizontal().item()
    if fn is not None and not nulls and n < INT32 and m < INT32:
        # the node indexes as the graph holds them, int32 (read in place), and so the order
        src, dst = (np.ascontiguousarray(edges[c].cast(pl.Int32).to_numpy(), dtype=np.int32) for c in ("src", "dst"))
        own_np, lag_np, by_dst = np.empty(n, np.int64), np.empty(m, np.int64), np.empty(m, np.int32)
        fn(
            ts,
            end,
            dur,
            src,
            dst,
            fs.view(np.uint8),
            te.view(np.uint8),
            own_np,
            lag_np,
            by_dst,
            start_first=start_first,
        )
        # the order as polars' index type (a permutation below 2^31: the same bits), so that none
        # of the six gathers below converts it (6.5 M indexes at 311 MB)
        idx = by_dst.view(np.uint32) if pl.get_index_type() == pl.UInt32 else by_dst
        own, lag, order = pl.Series(own_np), pl.Series("lag_ns", lag_np), pl.Series(idx)
        del idx
        del own_np, lag_np, by_dst  # (the Series hold them: the lags go once narrowed)
    else:
        src, dst = int64_values(edges["src"]), int64_values(edges["dst"])
        own, lag, order = _calibrate_np(nodes, ts, end, dur, src, dst, fs, te)
        if start_first and te.any():  # (the native pass does it in place)
            at = order.to_numpy()
            late = te[at]
            order = pl.Series(np.concatenate([at[~late], at[late]]))
            del at, late
        order = order.cast(pl.get_index_type())  # once, not in each gather
    del ts, end, dur, src, dst, fs, te
    # the lags Int32 where every one fits (as the graph holds them) before they are put in order:
    # gathered as int64, then narrowed, they were 13 MB more at calibrate's peak (311 MB)
    lag = narrow(lag.to_frame(), ["lag_ns"]).to_series()
    # the edges in their new order a column at a time, each let go once gathered: the whole
    # table gathered at once was held beside the old one (+27 MB at 311 MB; `build_graph`
    # hands its table to this call alone)
    # (from_start and to_end, where they say the edge is a launch's and a sync's, as
    # `build_graph` makes them, compared again in order rather than gathered: a boolean gather
    # goes a bit at a time, 10 ms for the two at 311 MB)
    by_kind = _ends_by_kind(edges)
    cols = [edges[c] for c in ("src", "dst", "etype", *(c for c in ENDS if c not in by_kind))] + [lag]
    del edges, lag
    out = []
    while cols:
        out.append(cols.pop(0).gather(order))
    etype = out[2]
    ends = [(etype == by_kind[c]).alias(c) for c in ENDS if c in by_kind]
    out = [*out[:3], *ends, *out[3:]] if len(ends) == 2 else out
    return nodes.with_columns(own_ns=own.alias("own_ns")), pl.DataFrame(out)


ENDS = {"from_start": "launch", "to_end": "sync"}  # an edge's ends, the kind of edge they go with


def _ends_by_kind(edges: pl.DataFrame) -> dict[str, str]:
    """The end columns of `edges` (from_start, to_end) that say exactly whether an edge is of
    their kind (`ENDS`), each with its kind: both or neither (then they are gathered)."""
    etype = edges["etype"]
    if not isinstance(etype.dtype, pl.Enum) or not set(ENDS.values()) <= set(etype.dtype.categories.to_list()):
        return {}
    if etype.null_count() or any(edges[c].null_count() for c in ENDS):
        return {}
    same = all(edges[c].equals(etype == kind) for c, kind in ENDS.items())
    return dict(ENDS) if same else {}


def _calibrate_np(
    nodes: pl.DataFrame,
    ts: np.ndarray,
    end: np.ndarray,
    dur: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    fs: np.ndarray,
    te: np.ndarray,
) -> tuple[pl.Series, pl.Series, pl.Series]:
    """`calibrate` on numpy arrays (the fallback and the reference of the native pass): own
    times, lags and the edges' order. On int64 arrays, one per quantity (a frame of the edges
    with every helper column held 140 MB at 311 MB)."""
    n = len(ts)
    is_sync = np.zeros(n, dtype=np.bool_)
    is_sync[dst[te]] = True
    # the modelled end of a node: start + duration, a sync's captured end
    mend = np.where(is_sync, end, ts + dur)
    ref = np.where(fs, ts[src], mend[src])
    del mend
    target = np.where(te, end[dst], ts[dst])
    lag0 = np.minimum(target - ref, 0)
    ready = ref + lag0
    # a sync's own time: what the call took after the latest work it waited for ended
    maxref = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(maxref, dst[te], ref[te])
    del ref
    m = pl.Series(maxref).set(pl.Series(~is_sync), None)  # null: no to_end edge
    del maxref
    t, e_, d = pl.Series(ts), pl.Series(end), nodes["dur_ns"]
    own = pl.select(
        pl.when(m.is_not_null()).then((e_ - pl.max_horizontal(t, m)).clip(0, e_ - t)).otherwise(d)
    ).to_series()
    del m, t, e_, d
    own_np = own.cast(pl.Int64).to_numpy().copy()
    # the edge that binds each node's start (or a sync's end): the latest ready, first by index
    # (one stable order by destination, to_end, ready descending, edge; a group_by of sorted
    # lists took 170 MB per 1M edges). `target` depends on (dst, to_end) only.
    best = _binding(dst * 2 + te, ready)
    b_dst, b_te, b_ready, b_target = dst[best], te[best], ready[best], target[best]
    del ready, target
    own_ready = (ts + own_np)[b_dst]
    # the binding edge carries the rest; for a sync whose own time binds, the own time does
    own_binds = b_te & (own_ready >= b_ready)
    rest = np.zeros(len(src), dtype=np.int64)
    rest[best] = np.where(own_binds, 0, np.maximum(b_target - b_ready, 0))
    if own_binds.any():
        fix = b_dst[own_binds]
        own_np[fix] = own_np[fix] + np.maximum(b_target[own_binds] - own_ready[own_binds], 0)
        own = pl.Series(own_np, dtype=pl.Int64)
    del b_dst, b_te, b_ready, b_target, own_ready, own_binds, own_np
    lag = pl.Series("lag_ns", lag0 + rest, dtype=pl.Int64)
    del lag0, rest
    # by destination, then source: one stable order of the two as one int64 (node numbers are
    # below 2^31), then a gather (the rows equal in both are the same edge, or copies of one, so
    # their order changes nothing)
    by_dst = pl.Series(np.argsort(dst * max(n, 1) + src, kind="stable") if n < 1 << 31 else np.lexsort((src, dst)))
    return own, lag, by_dst
