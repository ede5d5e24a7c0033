"""One sortable int64 per (thread, instant) on the dependency graph's threads (`ThreadClock`):
the slices of `graph_nodes` are found and looked up on it, by one sort of a single column and
binary searches (or a native merge) in sorted keys, instead of sorts and hash joins on (pid, tid,
time)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from traceanalyzer.analyses.cpu_activity import THREAD
from traceanalyzer.analyses.layer_coverage import Bands
from traceanalyzer.analyses.replay import native_kernel
from traceanalyzer.links import CLIMB_LEVELS

KEY_LIMIT = 1 << 62  # thread number x span must stay below it (room for the differences)


@dataclass(frozen=True)
class ThreadClock:
    """One sortable int64 per (thread, instant) on the graph's threads: thread number x span +
    (t - lo), thread numbers in (pid, tid) order, so that keys sort as (pid, tid, t) do.
    `threads`: pid, tid, _th (the thread number)."""

    threads: pl.DataFrame
    lo: int
    span: int

    @classmethod
    def of(cls, threads: pl.DataFrame, times: list[pl.DataFrame]) -> ThreadClock | None:
        """The clock of `threads` (sorted by pid, tid) for every instant of `times` (frames of
        one `lo` and one `hi` column each, their min and max), or None when one key per
        (thread, instant) would not fit an int64 or a time is null."""
        # (by Series: a frame's select is a polars query each, ~0.5 ms for ten small frames)
        cols = [(df.to_series(0), df.to_series(1)) for df in times if df.height]
        if not cols or not threads.height or any(a.null_count() or b.null_count() for a, b in cols):
            return None
        los, his = [a.min() for a, _ in cols], [b.max() for _, b in cols]
        if any(x is None for x in los) or any(x is None for x in his):
            return None
        lo, span = int(min(los)), int(max(his)) - int(min(los)) + 1
        if threads.height * span >= KEY_LIMIT:
            return None
        return cls(threads.with_row_index("_th").with_columns(pl.col("_th").cast(pl.Int64)), lo, span)

    def number(self, df: pl.DataFrame) -> pl.Series:
        """The thread number of each row of `df` (pid, tid; null on a thread not in the graph)."""
        th = self.numbers(df)
        return pl.select(pl.when(pl.lit(th) >= 0).then(pl.lit(th))).to_series().alias("_th")

    def numbers(self, df: pl.DataFrame) -> np.ndarray:
        """`number` as an int64 array, -1 on a thread not in the graph. The graph has a few
        threads: where their pids and tids fit 31 and 32 bits, each row's (pid, tid) is one int64
        code searched in the threads' sorted codes (a join on the two columns, per table of a
        million rows, cost ~10 ms each); else that join."""
        th = self.threads
        p, t = th["pid"].to_numpy(), th["tid"].to_numpy()
        if not len(p) or p.min() < 0 or p.max() >= 1 << 31 or t.min() < 0 or t.max() >= 1 << 32:
            keys = df.select(pl.col(c).cast(th.schema[c]) for c in THREAD)
            got = keys.join(th, on=THREAD, how="left", maintain_order="left")["_th"]
            return got.fill_null(-1).to_numpy().astype(np.int64, copy=False)
        codes = p * (1 << 32) + t  # sorted: the threads are in (pid, tid) order
        q = _thread_codes(df)
        pos = np.searchsorted(codes, q)
        np.minimum(pos, len(codes) - 1, out=pos)
        return np.where(codes[pos] == q, pos, -1)

    def key(self, th: pl.Series, t: pl.Series) -> pl.Series:
        """The key of thread number `th` at `t` (null where `th` is)."""
        return pl.select((th.cast(pl.Int64) * self.span + (t - self.lo)).alias("_key")).to_series()

    def until(self, index: pl.DataFrame, bands: Bands | None = None) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """For a coverage index (`intervals.coverage_index` over pid, tid: disjoint intervals
        with `_before`, or on the `bands` of `layer_coverage.cumulative_unions`), the time it
        covers up to each instant: f(th, t) -> int64 per instant, as `intervals.covered` counts
        it (the last interval starting at or before t on the thread). On numpy arrays: a binary
        search and gathers, no frame per call."""
        keys, th_i, start, end, before = self.index_arrays(index, bands)
        fn = native_kernel("covered_until")

        def at(th: np.ndarray, t: np.ndarray) -> np.ndarray:
            if not len(keys):
                return np.zeros(len(t), dtype=np.int64)
            q = np.ascontiguousarray(th * self.span + (t - self.lo), dtype=np.int64)
            if fn is not None and (len(q) < 2 or bool((q[1:] >= q[:-1]).all())):
                # sorted queries (a thread's slice boundaries): one merge, natively
                out = np.empty(len(q), dtype=np.int64)
                fn(q, np.ascontiguousarray(t, dtype=np.int64), keys, th_i, start, end, before, self.span, out)
                return out
            pos = np.searchsorted(keys, q, side="right") - 1
            p = np.maximum(pos, 0)
            found = (pos >= 0) & (th_i[p] == th)
            return np.where(found, before[p] + np.minimum(t, end[p]) - start[p], 0)

        return at

    def index_arrays(self, index: pl.DataFrame, bands: Bands | None = None) -> tuple[np.ndarray, ...]:
        """A coverage index on the clock: its intervals' start keys (sorted), thread numbers,
        start_ns, end_ns and `_before`, as contiguous int64 arrays (those of threads in the
        graph). An index on `bands` (`_t`, `_te`, `_before`) is read there: each band's thread
        number looked up once, no keyed copy of the index (`layer_coverage.unband`)."""
        if bands is not None and "_t" in index.columns:
            t, te, before = (index[c].cast(pl.Int64).to_numpy() for c in ("_t", "_te", "_before"))
            k = t // bands.span
            off = k * bands.span - bands.lo
            start, end = t - off, te - off
            del t, te, off
            th_i = self.numbers(bands.keys)[k]  # the keys' rows are their band numbers
            del k
            if not bool((th_i >= 0).all()):
                keep = th_i >= 0
                th_i, start, end, before = th_i[keep], start[keep], end[keep], before[keep]
        else:
            number = self.numbers(index)
            ix = index.select("start_ns", "end_ns", "_before").filter(pl.lit(number >= 0))
            th_i = number[number >= 0]
            del number
            start, end, before = (ix[c].cast(pl.Int64).to_numpy() for c in ("start_ns", "end_ns", "_before"))
            del ix
        keys = th_i * self.span + (start - self.lo)
        if len(keys) > 1 and not bool((keys[1:] >= keys[:-1]).all()):
            order = np.argsort(keys, kind="stable")
            keys, th_i, start, end, before = (a[order] for a in (keys, th_i, start, end, before))
        return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (keys, th_i, start, end, before))

    def points(self, slices: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """The slices' (`_th`, ts_ns, end_ns) start keys and ends, as `innermost` searches them."""
        sth = slices["_th"].cast(pl.Int64).to_numpy()
        skey = np.ascontiguousarray(sth * self.span + (slices["ts_ns"].cast(pl.Int64).to_numpy() - self.lo))
        return skey, np.ascontiguousarray(slices["end_ns"].cast(pl.Int64).to_numpy())

    def innermost(
        self,
        slices: pl.DataFrame,
        intervals: pl.DataFrame,
        id_col: str,
        number: np.ndarray | None = None,
        points: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> pl.Series:
        """`links.innermost_containing` for the graph's slices (`_th`, ts_ns, end_ns, in key
        order): per slice the id of the innermost interval (ts_ns, end_ns, `id_col`, parent_id,
        pid, tid, `depth` if known) containing it, named `id_col`. The same rule: the latest
        interval starting at or before the slice's start (of those starting together, the
        shortest, then the deepest, then the largest id), climbing to its parent while it
        ended before the slice did; but on the clock's keys, on int64 arrays: the slices are
        searched where they are (no sort of a million slices and back, no as-of join by
        thread), the intervals sorted once. `points`: the slices' `points`, if made already (one
        pair for the calls and the ops)."""
        n = slices.height
        deep = ["depth"] if "depth" in intervals.columns else []
        number = self.numbers(intervals) if number is None else number  # (given: its rows' thread numbers)
        iv = intervals.select("ts_ns", "end_ns", id_col, *deep).filter(
            pl.lit(number >= 0) & pl.col(id_col).is_not_null()
        )
        th = number[(number >= 0) & intervals.select(pl.col(id_col).is_not_null()).to_series().to_numpy()]
        del number
        key = th * self.span + (iv["ts_ns"].cast(pl.Int64).to_numpy() - self.lo)
        ids = iv[id_col].cast(pl.Int64).to_numpy()
        # a null depth sorts first, as polars sorts nulls (depths are >= 0)
        depth = iv["depth"].cast(pl.Int64).fill_null(-1).to_numpy() if deep else None
        order = _innermost_last(key, iv["end_ns"].cast(pl.Int64).to_numpy(), depth, ids)
        key, cand_ids = np.ascontiguousarray(key[order]), np.ascontiguousarray(ids[order])
        del iv, ids, depth, order, th
        skey, point_end = self.points(slices) if points is None else points
        by_id = _by_id(intervals.drop_nulls(id_col), id_col)
        fn = native_kernel("innermost")
        if fn is not None and n:
            # one merge of the two sorted key arrays and the climb, natively (0.2 s -> ms at 311 MB),
            # written as int32 where the ids are (no cast of the result: 1.8 M values at 311 MB)
            out = np.empty(n, dtype=np.int32 if intervals.schema[id_col] == pl.Int32 else np.int64)
            fn(skey, point_end, key, cand_ids, self.span, *by_id, CLIMB_LEVELS, out)
        else:
            cand = np.full(n, -1, dtype=np.int64)
            if len(key) and n:
                pos = np.searchsorted(key, skey, side="right") - 1
                p = np.maximum(pos, 0)
                # the candidate must be on the slice's own thread (keys of one thread share a band)
                same = (pos >= 0) & (key[p] // self.span == skey // self.span)
                cand = np.where(same, cand_ids[p], -1)
                del pos, p, same
            out = _climb(cand, point_end, *by_id)
        found = pl.Series(out)
        return found.set(found < 0, None).alias(id_col).cast(intervals.schema[id_col])


def _thread_codes(df: pl.DataFrame) -> np.ndarray:
    """pid x 2^32 + tid per row of `df` where its pid and tid fit 31 and 32 bits, else -1 (a
    null among them), on the columns read in place as int64. A table of a million rows: one
    array made, not four."""
    pid, tid = (df.get_column(c).cast(pl.Int64).fill_null(-1).to_numpy() for c in THREAD)
    q = np.left_shift(pid, 32)
    q += tid
    if len(pid) and (pid.min() < 0 or pid.max() >= 1 << 31 or tid.min() < 0 or tid.max() >= 1 << 32):
        q[(pid < 0) | (pid >= 1 << 31) | (tid < 0) | (tid >= 1 << 32)] = -1
    return q


def _innermost_last(key: np.ndarray, end: np.ndarray, depth: np.ndarray | None, ids: np.ndarray) -> np.ndarray:
    """The order of intervals by start key, and among those starting together the innermost
    last: the longest first (end descending), then by depth, then by id, then by position (a
    stable lexsort of the four). One sort of the keys (timsort, fast on their sorted runs; none
    where they are in order); the lexsort only for the intervals that share a start key, put back in the positions their keys hold (a lexsort of
    four keys over every interval was 50 ms per table at 311 MB)."""
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):  # in key order already (the loader's): no sort
        order, k = np.arange(len(key)), key
    else:
        order = np.argsort(key, kind="stable")  # timsort: the intervals come in long sorted runs
        k = key[order]
    fn = native_kernel("innermost_ties")
    if fn is not None:  # each run of equal keys sorted alone, natively (`ties.rs`)
        del k
        order = np.ascontiguousarray(order, dtype=np.int64)
        cols = (key, end, np.zeros(0, np.int64) if depth is None else depth, ids)
        fn(order, *(np.ascontiguousarray(c, dtype=np.int64) for c in cols))
        return order
    tie = np.zeros(len(k), dtype=np.bool_)
    same = k[1:] == k[:-1]
    tie[1:] |= same
    tie[:-1] |= same
    del k, same
    at = np.flatnonzero(tie)
    if len(at):
        sub = np.sort(order[at])  # by position: the lexsort's last tie-break
        by = [ids[sub], -end[sub], key[sub]] if depth is None else [ids[sub], depth[sub], -end[sub], key[sub]]
        order[at] = sub[np.lexsort(by)]
    return order


def _by_id(iv: pl.DataFrame, id_col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals' ids in order (distinct), with their end and parent (-1: none)."""
    ids = iv[id_col].cast(pl.Int64).to_numpy()
    end = iv["end_ns"].cast(pl.Int64).to_numpy()
    parent = iv["parent_id"].cast(pl.Int64).fill_null(-1).to_numpy()
    if not iv[id_col].is_sorted():
        order = np.argsort(ids, kind="stable")
        ids, end, parent = ids[order], end[order], parent[order]
    return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (ids, end, parent))


def _climb(cand: np.ndarray, point_end: np.ndarray, ids: np.ndarray, end: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """From each candidate id (-1: none), up the parents until one ends at or after the
    point's end (`links.innermost_containing`'s climb: at most its number of levels; an id not
    among the intervals ends the climb with none), by binary search in the sorted ids; -1: none."""
    rownum = len(ids) > 0 and ids[0] == 0 and ids[-1] == len(ids) - 1  # sorted and unique: 0..n-1
    out = np.full(len(cand), -1, dtype=np.int64)
    rows = np.flatnonzero(cand >= 0)
    c = cand[rows]
    for _ in range(CLIMB_LEVELS):
        if not len(rows) or not len(ids):
            break
        # ids that are row numbers (op_id, runtime_id) are their own positions: no search
        p = np.clip(c, 0, len(ids) - 1) if rownum else np.minimum(np.searchsorted(ids, c, side="left"), len(ids) - 1)
        found = ids[p] == c
        ok = found & (end[p] >= point_end[rows])
        out[rows[ok]] = c[ok]
        more = found & ~ok & (parent[p] >= 0)
        rows, c = rows[more], parent[p][more]
    return out
