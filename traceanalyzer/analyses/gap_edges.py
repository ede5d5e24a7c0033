"""The GPU activities around each idle gap (`gap_causes` classifies the gap by the one after it):
the one that ended when the gap began, the one that started when it ended, and the columns of
that next activity and of its launch, gathered by row."""

from __future__ import annotations

import sys

import polars as pl

from traceanalyzer.analyses.cpu_activity import rows_at
from traceanalyzer.analyses.intervals import SMALL_ROWS, series_of
from traceanalyzer.links import int64_arrays
from traceanalyzer.trace import Trace


def edge_activities(trace: Trace, pieces: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """prev_gpu_id, next_gpu_id of the pieces (device, prev_end_ns, next_start_ns): the activity
    on the device that ended last at the gap's start (the latest to start among those ending
    then), and the one launched first among those starting at its end (ties: the lower gpu_id).

    Each device's times are shifted into a band of their own (as `intervals._merge_sweep`
    does), so that both lookups are on one int64 key: the activities' keys sorted with their
    tie-breaks (an arg sort, then gathers), the first or last of each key kept, and a join of
    that key alone. Joins of (device, time) pairs hashed row-encoded keys of every activity
    and every piece, and copied the pieces (~80 MB at 1 GB). Falls back to them when the bands
    would overflow int64."""
    # the columns picked by name and the keys made by Series arithmetic (a frame's `select` and
    # `filter` are a polars query each, ~30-60 µs on a small rank's few hundred activities)
    gpu = trace.gpu[["gpu_id", "device", "ts_ns", "end_ns", "launch_ts_ns"]]
    if gpu.get_column("device").null_count():
        gpu = gpu.filter(pl.col("device").is_not_null())
    times = [gpu.get_column(c) for c in ("ts_ns", "end_ns")]
    times += [pieces.get_column(c) for c in ("prev_end_ns", "next_start_ns")]
    lo = min((v for c in times if (v := c.min()) is not None), default=None)
    hi = max((v for c in times if (v := c.max()) is not None), default=None)
    dev = gpu.get_column("device")
    d_lo, d_hi = dev.min(), dev.max()
    if lo is None or d_lo is None or (int(d_hi) - int(d_lo) + 1) * (int(hi) - int(lo) + 1) >= 1 << 62:
        return _edge_activities_by_join(gpu, pieces)
    span = int(hi) - int(lo) + 1
    if gpu.height + pieces.height < SMALL_ROWS and (found := _edges_numpy(gpu, pieces, int(d_lo), int(lo), span)):
        return found

    def key(df: pl.DataFrame, t: str) -> pl.Series:
        return ((df.get_column("device").cast(pl.Int64) - int(d_lo)) * span + df.get_column(t) - int(lo)).alias("_key")

    def table(t: str, ties: str, last: bool, nulls_last: bool) -> pl.DataFrame:
        k = key(gpu, t)
        order = pl.DataFrame([k, gpu.get_column(ties), gpu.get_column("gpu_id")]).select(
            pl.arg_sort_by(["_key", ties, "gpu_id"], nulls_last=nulls_last)
        )
        # gathered by `[]` (`gather` is a polars query), each key against its neighbour by slices
        # (`shift`, `ne_missing`, `is_not_null` were a query each)
        k, ids = k[order.to_series()], gpu.get_column("gpu_id")[order.to_series()]
        del order
        n = k.len()
        if not n or k.null_count():
            keep = k.ne_missing(k.shift(-1 if last else 1)) & k.is_not_null()
        elif last:  # the last row of each key: its key differs from the next row's
            keep = (k.slice(0, n - 1) != k.slice(1)).append(pl.Series([True]))
        else:  # the first of each key: its key differs from the row before's
            keep = pl.Series([True]).append(k.slice(1) != k.slice(0, n - 1))
        return pl.DataFrame([k.filter(keep), ids.filter(keep).alias("_id")])

    def look(t: str, found: pl.DataFrame) -> pl.Series:
        k = key(pieces[["device", t]], t).to_frame()
        return k.join(found, on="_key", how="left", maintain_order="left").get_column("_id")

    # as `sort(end_ns, ts_ns)` then the last of each (device, end_ns); `sort(ts_ns,
    # launch_ts_ns, nulls_last)` then the first of each (device, ts_ns): stable sorts
    prev = look("prev_end_ns", table("end_ns", "ts_ns", last=True, nulls_last=False))
    nxt = look("next_start_ns", table("ts_ns", "launch_ts_ns", last=False, nulls_last=True))
    return prev.alias("prev_gpu_id"), nxt.alias("next_gpu_id")


def _edges_numpy(
    gpu: pl.DataFrame, pieces: pl.DataFrame, d_lo: int, lo: int, span: int
) -> tuple[pl.Series, pl.Series] | None:
    """`edge_activities`' two lookups on numpy arrays, its steps one for one (the same sorts with
    their tie-breaks, the last or first row of each key, a search for the pieces' keys); None (the
    polars steps: two sorts and two joins, ~0.3 ms a small rank) without numpy or where a time
    is null. A null launch time sorts last among equal starts, as `nulls_last` does."""
    cols = int64_arrays(series_of(gpu, ["device", "ts_ns", "end_ns", "gpu_id"]))
    ends = int64_arrays(series_of(pieces, ["device", "prev_end_ns", "next_start_ns"]))
    if cols is None or ends is None:
        return None
    np = sys.modules["numpy"]
    dev, ts, end, gid = cols
    if gpu.get_column("launch_ts_ns").null_count():  # the mask and the values in one query
        held = gpu.select(_n=pl.col("launch_ts_ns").is_null(), _v=pl.col("launch_ts_ns").fill_null(0).cast(pl.Int64))
        no_launch, launch = held.get_column("_n").to_numpy(), held.get_column("_v").to_numpy()
    else:
        (launch,) = int64_arrays(series_of(gpu, ["launch_ts_ns"])) or (None,)
        if launch is None:
            return None
        no_launch = np.zeros(len(launch), dtype=bool)
    band = (dev - d_lo) * span - lo
    at_end, at_start = band + end, band + ts
    # `sort(end_ns, ts_ns)`, the last of each (device, end_ns); `sort(ts_ns, launch_ts_ns,
    # nulls_last)`, the first of each (device, ts_ns); gpu_id breaks the remaining ties
    by_end = np.lexsort((gid, ts, at_end))
    k_end = at_end[by_end]
    last = np.ones(len(k_end), dtype=bool)
    last[:-1] = k_end[1:] != k_end[:-1]
    by_start = np.lexsort((gid, launch, no_launch, at_start))
    k_start = at_start[by_start]
    first = np.ones(len(k_start), dtype=bool)
    first[1:] = k_start[1:] != k_start[:-1]
    pdev, prev_end, next_start = ends
    pband = (pdev - d_lo) * span - lo
    id_type = gpu.schema["gpu_id"]
    out = []
    for keys, ids, q, name in (
        (k_end[last], gid[by_end][last], pband + prev_end, "prev_gpu_id"),
        (k_start[first], gid[by_start][first], pband + next_start, "next_gpu_id"),
    ):
        pos = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
        hit = keys[pos] == q if len(keys) else np.zeros(len(q), dtype=bool)
        value = pl.Series(name, ids[pos] if len(keys) else np.zeros(len(q), np.int64)).cast(id_type)
        out.append(value.zip_with(pl.Series(hit), pl.Series([None], dtype=id_type).new_from_index(0, len(q))))
    return out[0], out[1]


def _edge_activities_by_join(gpu: pl.DataFrame, pieces: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """`edge_activities` by joins on (device, time)."""
    prev = (
        gpu.sort("end_ns", "ts_ns", "gpu_id", maintain_order=True)
        .unique(["device", "end_ns"], keep="last")
        .select("device", prev_end_ns=pl.col("end_ns"), prev_gpu_id=pl.col("gpu_id"))
    )
    nxt = (
        gpu.sort("ts_ns", "launch_ts_ns", "gpu_id", nulls_last=True, maintain_order=True)
        .unique(["device", "ts_ns"], keep="first")
        .select("device", next_start_ns="ts_ns", next_gpu_id="gpu_id")
    )
    keys = pieces.select("device", "prev_end_ns", "next_start_ns")
    p = keys.join(prev, on=["device", "prev_end_ns"], how="left", maintain_order="left").get_column("prev_gpu_id")
    n = keys.join(nxt, on=["device", "next_start_ns"], how="left", maintain_order="left").get_column("next_gpu_id")
    return p, n


def next_activity(trace: Trace, pieces: pl.DataFrame) -> pl.DataFrame:
    """The pieces (device, next_gpu_id: see `edge_activities`) with the columns of the activity
    a gap ending there waited for, gathered by row.

    Work whose launch is not in the trace but whose correlation id is below every traced
    runtime call's was queued before profiling began: it counts as queued before the gap."""
    first_corr = trace.runtime["correlation"].min() if trace.runtime.height else None  # nulls left out
    before = (
        pl.col("launch_ts_ns").is_null()
        & pl.col("_correlation").is_not_null()
        & (pl.col("_correlation") > 0)  # id 0 is "no correlation" (AMD), not an early launch
        & (pl.col("_correlation") < first_corr)
        if first_corr is not None
        else pl.lit(False)
    )
    cols = rows_at(
        trace.gpu,
        "gpu_id",
        pieces["next_gpu_id"],
        next_name="name",
        next_stream="stream",
        _correlation="correlation",
        launch_api="launch_api",
        launch_ts_ns="launch_ts_ns",
        launch_end_ns="launch_end_ns",
        launch_pid="launch_pid",
        launch_tid="launch_tid",
        launch_op_id="op_id",
        launch_runtime_id="runtime_id",
    )
    found = pl.col("next_gpu_id").is_not_null()
    return pieces.hstack(cols).with_columns(launched_before_trace=pl.when(found).then(before)).drop("_correlation")
