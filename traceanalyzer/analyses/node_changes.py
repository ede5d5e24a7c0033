"""What a what-if scenario changes per node of the dependency graph, on numpy arrays
(`NodeChanges`, built by `whatif.Model`): the durations and own times it gives, a slice of rows
at a time, in floats exact on integer ns, rounded as polars rounds (half to even). The same
rules were polars expressions over the node table (tests/analyses/test_whatif.py keeps them as
the reference): as arrays, a what-if at 311 MB takes half the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl


def member(ids: pl.Series, wanted: pl.Series) -> np.ndarray:
    """Per row of `ids` whether it is one of `wanted` (a null: no): ids that are row numbers
    (op_id, runtime_id) looked up in a table of as many flags, else a sorted search."""
    v = ids.fill_null(-1).to_numpy()  # in its own width (a cast to Int64 first cost 13 ms per 1 M)
    w = wanted.drop_nulls().cast(pl.Int64).to_numpy()
    if not len(v) or not len(w):
        return np.zeros(len(v), dtype=np.bool_)
    lo, hi = min(int(v.min()), int(w.min())), max(int(v.max()), int(w.max()))
    if lo >= -1 and hi < 4 * len(v):
        table = np.zeros(hi + 2, dtype=np.bool_)  # the last flag, False, is a null's (-1)
        table[w[w >= 0]] = True
        return table[v]
    return np.isin(v, w) & (ids.is_not_null().to_numpy())


def whole_ns(x: np.ndarray) -> np.ndarray:
    """Float ns as int64: below zero as 0, rounded half to even (as polars' `round`)."""
    return np.rint(np.maximum(x, 0.0)).astype(np.int64)


@dataclass
class NodeChanges:
    """What a scenario changes per node, as numpy arrays (n each; None: not changed), and the
    arithmetic that gives its durations and own times (as floats, exact on integer ns): `gone`,
    the time of a slice (`cpu`) in the causes removed, which leave it the rest (`keep`); `slow`,
    slow launches (no time left); `wait` taken off (a collective's wait for peers); per speed-up
    its GPU and CPU nodes, the waits and the scale; `dropped_ops`, the nodes of dropped ops (no time left), `unsynced` the slices of
    unsynced calls, which keep their time beyond `t_sync`, their sync layer (both: no own time,
    no sync edges, `dropped`)."""

    dur: np.ndarray  # the modelled durations (integers)
    cpu: np.ndarray  # the CPU slices
    gone: np.ndarray | None = None
    slow: np.ndarray | None = None
    wait: np.ndarray | None = None  # taken off every node (peer_wait, gpu_wait)
    speedups: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = field(default_factory=list)
    dropped_ops: np.ndarray | None = None
    unsynced: np.ndarray | None = None
    t_sync: np.ndarray | None = None

    @property
    def dropped(self) -> np.ndarray | None:
        """The nodes of dropped ops or unsynced calls (None: none)."""
        if self.dropped_ops is None or self.unsynced is None:
            return self.unsynced if self.dropped_ops is None else self.dropped_ops
        return self.dropped_ops | self.unsynced

    def keep(self, rows: slice | np.ndarray) -> np.ndarray:
        """The share of their time the causes removed leave nodes `rows` (1 off the CPU and in
        a wait: made per slice of rows, a node-long float array and its temporaries were 40 MB
        at 311 MB)."""
        d = self.dur[rows]
        m = self.cpu[rows] & (d > 0)
        keep = np.ones(len(d), dtype=np.float64)
        keep[m] = np.clip(1 - self.gone[rows][m] / d[m].astype(np.float64), 0, 1)
        return keep

    def durations(self, rows: slice) -> np.ndarray:
        """The durations of nodes `rows` under the scenario (float64)."""
        d = self.dur[rows].astype(np.float64)
        if self.gone is not None:
            d *= self.keep(rows)
        if self.slow is not None:
            d[self.slow[rows]] = 0.0
        if self.wait is not None:
            d -= self.wait[rows]
        for on_gpu, on_cpu, w, scale in self.speedups:
            w = w[rows]
            d = np.where(on_gpu[rows], w + (d - w) * scale, np.where(on_cpu[rows], d * scale, d))
        if self.dropped_ops is not None:
            d[self.dropped_ops[rows]] = 0.0
        if self.unsynced is not None:
            u = self.unsynced[rows]
            d[u] = np.maximum(d[u] - self.t_sync[rows][u], 0.0)
        return d

    def own_times(self, rows: np.ndarray, own: np.ndarray) -> np.ndarray:
        """The own times `own` (float64) of nodes `rows` under the scenario."""
        if self.gone is not None:
            own = own * self.keep(rows)
        for _, on_cpu, _, scale in self.speedups:
            own = np.where(on_cpu[rows], own * scale, own)
        for gone in (self.dropped_ops, self.unsynced):
            if gone is not None:
                own = np.where(gone[rows], 0.0, own)
        return own
