"""What the listed syncs say of each call beyond its site: the device it synchronised, the GPU
work it waited for and its step (`analyses.syncs`; a rank's row, which lists no sync, skips them)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.trace import Trace

# The columns the lookups add, null where they are skipped.
LOOKED_UP = {"device": pl.Int64, "waited_for": pl.String, "waited_for_stream": pl.Int64, "step": pl.Int64}


def with_lookups(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """`calls` (runtime calls: runtime_id, pid, tid, ts_ns, end_ns) with LOOKED_UP."""
    calls = waited_for(trace, device_of_calls(trace, calls))
    return windows.step_of(calls, trace.steps, "ts_ns")


def without_lookups(calls: pl.DataFrame) -> pl.DataFrame:
    """`calls` with LOOKED_UP all null: for what reads none of them."""
    return calls.with_columns(pl.lit(None, dtype).alias(c) for c, dtype in LOOKED_UP.items())


def device_of_calls(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Add `device`: that of the call's own GPU activity (a memcpy), else of the latest work the
    same thread launched before it, else the trace's only (or first) device."""
    own = (
        trace.gpu.select("runtime_id", _own="device")
        .filter(pl.col("runtime_id").is_not_null())
        .unique("runtime_id", keep="first")
    )
    launched = (
        trace.gpu.select(pid="launch_pid", tid="launch_tid", _lts="launch_ts_ns", _ldev="device")
        .filter(pl.col("_lts").is_not_null())
        .sort("_lts")
    )
    devs = windows.devices(trace)
    calls = calls.join(own, on="runtime_id", how="left").sort("ts_ns")
    if launched.height:
        calls = calls.join_asof(
            launched, left_on="ts_ns", right_on="_lts", by=["pid", "tid"], strategy="backward", check_sortedness=False
        ).drop("_lts")
    else:
        calls = calls.with_columns(_ldev=pl.lit(None, pl.Int64))
    return calls.with_columns(device=pl.coalesce("_own", "_ldev", pl.lit(devs[0] if devs else None, pl.Int64))).drop(
        "_own", "_ldev"
    )


def waited_for(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """Add `waited_for` / `waited_for_stream`: the GPU activity on the call's device that ended
    last while the call was in progress."""
    gpu = (
        trace.gpu.select("device", _gend="end_ns", waited_for="name", waited_for_stream="stream")
        .filter(pl.col("device").is_not_null())
        .sort("_gend")
    )
    if gpu.is_empty() or calls.is_empty():
        return calls.with_columns(waited_for=pl.lit(None, pl.String), waited_for_stream=pl.lit(None, pl.Int64))
    j = calls.sort("end_ns").join_asof(
        gpu, left_on="end_ns", right_on="_gend", by="device", strategy="backward", check_sortedness=False
    )
    inside = pl.col("_gend") >= pl.col("ts_ns")
    return j.with_columns(
        waited_for=pl.when(inside).then(pl.col("waited_for")),
        waited_for_stream=pl.when(inside).then(pl.col("waited_for_stream")),
    ).drop("_gend")
