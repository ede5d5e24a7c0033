"""Device memory from the allocator's `[memory]` events (traces captured with profile_memory).

Each event is one allocation (`bytes` > 0) or free (`bytes` < 0) on a device (`device_type`
0 = CPU, 1 = CUDA; `device_id`), with the allocator's totals after it (`total_allocated`,
`total_reserved`). The peak of a device is the event with the largest `total_allocated`.

An allocation is paired with its free by address: the next event on the same (device, addr).
It is alive at the peak when it came at or before the peak event and its free (if any) after.
An allocation belongs to the innermost op containing it in time on the allocating thread; the
op a user would name (`op`, e.g. `aten::conv2d` rather than its inner `aten::empty`) and the
record_function range around it come from `attribution.op_context`.

2021 traces carry neither addresses nor totals: allocated memory is then the running sum of
`bytes` from the trace start (memory allocated before the trace is unknown) and allocations
cannot be paired with frees, so live allocations and never-freed ones are not reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import windows
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.memory_timeline import MB, step_function
from traceanalyzer.analyses.op_tree import ancestors
from traceanalyzer.keys import grouped
from traceanalyzer.links import innermost_containing
from traceanalyzer.options import MemoryOptions, Options
from traceanalyzer.patterns import PROFILER_STEP
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown

NO_MEMORY_NOTE = (
    "no [memory] events in this trace: capture it with torch.profiler.profile(profile_memory=True) "
    "to see allocations, the peak and who made it"
)


@dataclass(frozen=True, repr=False)
class MemoryResult(Compact):
    """Device memory of a trace: peaks, who holds them, top allocating ops, growth, never freed."""

    trace_path: str
    options: MemoryOptions
    has_memory: bool
    has_totals: bool  # False for 2021 traces: allocated is relative to the trace start
    devices_ns: pl.DataFrame  # one row per device (peak_at_ns on the trace clock)
    live_at_peak_ns: pl.DataFrame  # allocations alive at each device's peak, largest first (at_ns, freed_at_ns)
    live_by_op: pl.DataFrame  # the same grouped by op
    top_ops: pl.DataFrame  # allocating ops: count, self/total bytes, freed bytes
    never_freed_ns: pl.DataFrame  # allocations with no free inside the trace, largest first
    steps: pl.DataFrame  # allocated/reserved at each step boundary, per device
    timeline_ns: pl.DataFrame  # device, t_ns, allocated_mb, reserved_mb: the step functions, change points kept
    has_addresses: bool = True  # False for 2021 traces: allocations cannot be paired with frees
    note: str | None = None
    origin_ns: int = 0  # the trace start

    # µs display views (units.Shown): times from the trace start
    devices = Shown("devices_ns")
    live_at_peak = Shown("live_at_peak_ns")
    never_freed = Shown("never_freed_ns")
    timeline = Shown("timeline_ns")


def device_label(device_type: pl.Expr, device_id: pl.Expr) -> pl.Expr:
    """`cuda:N`, `cpu` or `typeT:N` for the allocator's device type and id."""
    return (
        pl.when(device_type == 1)
        .then(pl.lit("cuda:") + device_id.cast(pl.String))
        .when(device_type == 0)
        .then(pl.lit("cpu"))
        .otherwise(pl.lit("type") + device_type.cast(pl.String) + pl.lit(":") + device_id.cast(pl.String))
    )


def _events(trace: Trace) -> pl.DataFrame:
    """Memory events in allocator order, with a per-device position and the allocated total."""
    m = (  # one query (`chain.collect`: six frame calls were six)
        trace.memory.lazy()
        .filter(pl.col("bytes").is_not_null())
        .with_row_index("event_id")
        .with_columns(
            pl.col("event_id").cast(pl.Int64), pl.col("device_type").fill_null(-1), pl.col("device_id").fill_null(-1)
        )
        .sort("ts_ns", "event_id")
        .with_columns(device=device_label(pl.col("device_type"), pl.col("device_id")))
        .with_columns(pos=pl.int_range(pl.len()).over("device"))
    )
    # Without totals (2021 schema) allocated memory is the running sum since the trace start.
    return chain.collect(
        m.with_columns(
            allocated=pl.coalesce(pl.col("total_allocated"), pl.col("bytes").cum_sum().over("device", order_by="pos")),
        )
    )


def _attribute(trace: Trace, ev: pl.DataFrame) -> pl.DataFrame:
    """Add `alloc_op_id` (innermost op around the event on its thread) and, per op id, the op a
    user would name (`op`, `op_id` of it for input shapes), the range and the Python line."""
    ev = innermost_containing(ev, trace.ops, "op_id", "alloc_op_id", point_end="ts_ns")
    ids = ev["alloc_op_id"]
    ctx = op_context(trace, ids).rename({"op_id": "alloc_op_id"})
    shapes = trace.ops.select(
        pl.col("op_id").alias("named_op_id"),
        input_dims=pl.col("input_dims").str.replace_all(r"\s+", ""),
    )
    inner = trace.ops.select(pl.col("op_id").alias("alloc_op_id"), pl.col("name").alias("inner_op"))
    return (
        ev.join(ctx, on="alloc_op_id", how="left")
        .join(shapes, on="named_op_id", how="left")
        .join(inner, on="alloc_op_id", how="left")
    )


def _pair(ev: pl.DataFrame) -> pl.DataFrame:
    """Allocations with their free: the next event on the same (device, addr) when it frees."""
    nxt = ev.sort("device", "addr", "pos").with_columns(
        _nb=pl.col("bytes").shift(-1).over("device", "addr"),
        _npos=pl.col("pos").shift(-1).over("device", "addr"),
        _nts=pl.col("ts_ns").shift(-1).over("device", "addr"),
    )
    return (
        nxt.filter(pl.col("bytes") > 0)
        .with_columns(
            free_pos=pl.when(pl.col("_nb") < 0).then(pl.col("_npos")),
            free_ts_ns=pl.when(pl.col("_nb") < 0).then(pl.col("_nts")),
        )
        .drop("_nb", "_npos", "_nts")
    )


def _ancestor_names(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """op_id -> every distinct name on its chain (itself included): for inclusive totals."""
    names = trace.ops.select(pl.col("op_id").alias("ancestor_id"), "name")
    return ancestors(trace.ops, op_ids).join(names, on="ancestor_id").select("op_id", "name").drop_nulls().unique()


def _top_ops(trace: Trace, ev: pl.DataFrame) -> pl.DataFrame:
    """Per op name: allocations made directly in it (self) and in it or its children (total),
    and the bytes freed directly in it."""
    allocs = ev.filter(pl.col("bytes") > 0)
    frees = ev.filter(pl.col("bytes") < 0)
    self_alloc = grouped(
        allocs, ["device", "inner_op"], pl.len().alias("self_allocs"), pl.col("bytes").sum().alias("self_alloc_bytes")
    ).rename({"inner_op": "name"})
    self_free = grouped(
        frees, ["device", "inner_op"], pl.len().alias("self_frees"), (-pl.col("bytes").sum()).alias("self_freed_bytes")
    ).rename({"inner_op": "name"})
    chain = _ancestor_names(trace, pl.concat([allocs["alloc_op_id"], frees["alloc_op_id"]]))
    on_chain = (
        ev.filter(pl.col("alloc_op_id").is_not_null())
        .select("device", "bytes", op_id="alloc_op_id")
        .join(chain, on="op_id", how="inner")
    )
    total = grouped(  # every event once per name on its chain: the names by their codes (`keys`)
        on_chain,
        ["device", "name"],
        (pl.col("bytes") > 0).sum().alias("total_allocs"),
        pl.col("bytes").clip(lower_bound=0).sum().alias("total_alloc_bytes"),
        (-pl.col("bytes").clip(upper_bound=0).sum()).alias("total_freed_bytes"),
    )
    out = (
        total.join(self_alloc, on=["device", "name"], how="full", coalesce=True)
        .join(self_free, on=["device", "name"], how="full", coalesce=True)
        .filter(pl.col("name").is_not_null() & ~pl.col("name").str.contains(PROFILER_STEP))
        .fill_null(0)
    )
    return (
        out.select(
            "device",
            op="name",
            allocs=pl.col("total_allocs"),
            total_alloc_mb=pl.col("total_alloc_bytes") / MB,
            self_alloc_mb=pl.col("self_alloc_bytes") / MB,
            total_freed_mb=pl.col("total_freed_bytes") / MB,
            self_freed_mb=pl.col("self_freed_bytes") / MB,
        )
        .filter(pl.col("total_alloc_mb") + pl.col("total_freed_mb") > 0)
        # ties (same bytes) by device and op, so that every run lists them in one order
        .sort("total_alloc_mb", "self_alloc_mb", "device", "op", descending=[True, True, False, False], nulls_last=True)
    )


def _step_boundaries(trace: Trace, ev: pl.DataFrame) -> pl.DataFrame:
    """Allocated and reserved memory at each step's start and end: the totals after the last
    event before that instant (the first event's state before it, when none came earlier)."""
    if trace.steps.is_empty() or ev.is_empty():
        return pl.DataFrame(schema={"device": pl.String, "step": pl.Int64})
    state = ev.select(
        "device",
        "ts_ns",
        "pos",
        _alloc=pl.col("allocated"),
        _res=pl.col("total_reserved"),
        _before=pl.col("allocated") - pl.col("bytes"),
    ).sort("ts_ns", "pos")
    first = state.group_by("device").agg(pl.all().sort_by("pos").first()).select("device", "_before")
    st = trace.steps.select("step", "start_ns", "end_ns")
    devs = ev.select("device").unique()
    q = devs.join(st, how="cross")

    def at(col: str, out: str) -> pl.DataFrame:
        j = q.sort(col).join_asof(
            state, left_on=col, right_on="ts_ns", by="device", strategy="backward", check_sortedness=False
        )
        j = j.join(first, on="device", how="left", suffix="_first")
        return j.select(
            "device",
            "step",
            pl.coalesce("_alloc", "_before_first").alias(f"{out}_alloc"),
            pl.col("_res").alias(f"{out}_res"),
        )

    s = at("start_ns", "start").join(at("end_ns", "end"), on=["device", "step"])
    in_step = (
        ev.join_where(st, pl.col("ts_ns") >= pl.col("start_ns"), pl.col("ts_ns") < pl.col("end_ns"))
        .group_by("device", "step")
        .agg(
            peak_alloc=pl.col("allocated").max(),
            allocs=(pl.col("bytes") > 0).sum(),
            alloc_bytes=pl.col("bytes").clip(lower_bound=0).sum(),
        )
    )
    return (
        s.join(in_step, on=["device", "step"], how="left")
        .sort("device", "step")
        .select(
            "device",
            "step",
            allocated_at_start_mb=pl.col("start_alloc") / MB,
            allocated_at_end_mb=pl.col("end_alloc") / MB,
            growth_mb=(pl.col("end_alloc") - pl.col("start_alloc")) / MB,
            peak_in_step_mb=pl.col("peak_alloc") / MB,
            reserved_at_end_mb=pl.col("end_res") / MB,
            allocs=pl.col("allocs").fill_null(0),
            alloc_mb=pl.col("alloc_bytes").fill_null(0) / MB,
        )
    )


def analyse_memory(trace: Trace, options: Options | MemoryOptions | None = None) -> MemoryResult:
    """The peak per device, who holds it, top allocating ops, growth per step, never freed."""
    opts = Options.of(options).memory
    ev = _events(trace)
    if ev.is_empty():
        empty = pl.DataFrame()
        tables = [empty] * 7
        return MemoryResult(
            trace.path, opts, False, False, *tables, note=NO_MEMORY_NOTE, origin_ns=trace.meta.origin_ns
        )
    has_totals = ev["total_allocated"].null_count() < ev.height
    has_addr = ev["addr"].null_count() < ev.height
    ev = _attribute(trace, ev)

    # The peak of each device: its first event with the largest allocated total.
    peak = (
        ev.sort("pos")
        .group_by("device")
        .agg(pl.all().sort_by("allocated", "pos", descending=[True, False]).first())
        .select(
            "device",
            "device_type",
            "device_id",
            peak_pos=pl.col("pos"),
            peak_ts_ns=pl.col("ts_ns"),
            peak_bytes=pl.col("allocated"),
            reserved_at_peak=pl.col("total_reserved"),
        )
    )
    per_dev = ev.group_by("device").agg(
        events=pl.len(),
        allocs=(pl.col("bytes") > 0).sum(),
        frees=(pl.col("bytes") < 0).sum(),
        alloc_bytes=pl.col("bytes").clip(lower_bound=0).sum(),
        freed_bytes=-pl.col("bytes").clip(upper_bound=0).sum(),
        max_reserved=pl.col("total_reserved").max(),
        first_ts=pl.col("ts_ns").min(),
        start_alloc=pl.col("allocated").sort_by("pos").first() - pl.col("bytes").sort_by("pos").first(),
        end_alloc=pl.col("allocated").sort_by("pos").last(),
    )
    capacity = pl.DataFrame(
        {
            "device_id": [d.id for d in trace.meta.devices],
            "capacity": [d.total_memory_bytes for d in trace.meta.devices],
        },
        schema={"device_id": pl.Int64, "capacity": pl.Int64},
    )

    if has_addr:
        pairs = _pair(ev)
        live = pairs.join(peak.select("device", "peak_pos"), on="device").filter(
            (pl.col("pos") <= pl.col("peak_pos"))
            & (pl.col("free_pos").is_null() | (pl.col("free_pos") > pl.col("peak_pos")))
        )
        never = pairs.filter(pl.col("free_pos").is_null())
    else:
        live = never = ev.clear().with_columns(free_ts_ns=pl.lit(None, pl.Int64))
    live_sum = live.group_by("device").agg(live_in_trace_bytes=pl.col("bytes").sum(), live_allocs=pl.len())
    never_sum = never.group_by("device").agg(never_freed_bytes=pl.col("bytes").sum(), never_freed=pl.len())

    devices = (
        peak.join(per_dev, on="device")
        .join(live_sum, on="device", how="left")
        .join(never_sum, on="device", how="left")
        .with_columns(_cap_id=pl.when(pl.col("device_type") == 1).then(pl.col("device_id")))
        .join(capacity.rename({"device_id": "_cap_id"}), on="_cap_id", how="left")
    )
    devices = windows.step_of(devices, trace.steps, "peak_ts_ns", "start_ns", "end_ns")
    devices = devices.sort("device_type", "device_id", descending=[True, False]).select(
        "device",
        peak_allocated_mb=pl.col("peak_bytes") / MB,
        peak_at_ns=pl.col("peak_ts_ns"),
        peak_step=pl.col("step"),
        reserved_at_peak_mb=pl.col("reserved_at_peak") / MB,
        # CPU allocations have no caching allocator: no reserved memory, no cache.
        cache_at_peak_mb=pl.when(pl.col("device_type") != 0).then(
            (pl.col("reserved_at_peak") - pl.col("peak_bytes")) / MB
        ),
        max_reserved_mb=pl.col("max_reserved") / MB,
        capacity_mb=pl.col("capacity") / MB,
        share_of_capacity=pl.col("peak_bytes") / pl.col("capacity"),
        reserved_share_of_capacity=pl.col("max_reserved") / pl.col("capacity"),
        live_in_trace_mb=pl.col("live_in_trace_bytes") / MB,
        before_trace_mb=(pl.col("peak_bytes") - pl.col("live_in_trace_bytes")) / MB,
        allocated_at_start_mb=pl.col("start_alloc") / MB,
        allocated_at_end_mb=pl.col("end_alloc") / MB,
        allocs="allocs",
        frees="frees",
        alloc_mb=pl.col("alloc_bytes") / MB,
        freed_mb=pl.col("freed_bytes") / MB,
        never_freed=pl.col("never_freed").fill_null(0) if has_addr else pl.col("never_freed"),
        never_freed_mb=(pl.col("never_freed_bytes").fill_null(0) if has_addr else pl.col("never_freed_bytes")) / MB,
    )

    def listing(df: pl.DataFrame) -> pl.DataFrame:
        return df.sort("bytes", "pos", descending=[True, False]).select(
            "device",
            mb=pl.col("bytes") / MB,
            bytes="bytes",
            at_ns=pl.col("ts_ns"),
            freed_at_ns=pl.col("free_ts_ns"),
            op="op",
            inner_op="inner_op",
            input_dims="input_dims",
            range="range",
            python_frame="python_frame",
            tid="tid",
        )

    live_list = listing(live)
    live_by_op = (
        live.group_by("device", "op", "range")
        .agg(allocs=pl.len(), mb=pl.col("bytes").sum() / MB)
        .join(live_sum, on="device")
        .with_columns(share_of_live=pl.col("mb") * MB / pl.col("live_in_trace_bytes"))
        .drop("live_in_trace_bytes", "live_allocs")
        .sort("mb", "device", "op", "range", descending=[True, False, False, False], nulls_last=True)
    )
    return MemoryResult(
        trace.path,
        opts,
        True,
        has_totals,
        devices_ns=devices,
        live_at_peak_ns=live_list,
        live_by_op=live_by_op,
        top_ops=_top_ops(trace, ev),
        never_freed_ns=listing(never),
        steps=_step_boundaries(trace, ev),
        timeline_ns=step_function(ev, opts.timeline_points),
        has_addresses=has_addr,
        note=None
        if has_totals
        else "this trace (2021 schema) has no allocator totals or addresses: allocated memory is counted from the trace start and allocations are not paired with frees",
        origin_ns=trace.meta.origin_ns,
    )
