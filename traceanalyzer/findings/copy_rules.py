"""Rules over the `copies` analysis: pageable host memory, many small copies, device-to-host
copies inside the step loop, copies a side stream could hide, device-to-device copy storms. Each names its top site (the op,
range and Python line that cost the most). A trace without ProfilerStep counts as one step.
Times are summed in integer ns (`CopiesResult.copies_ns`) and shown in µs."""

from __future__ import annotations

import sys
import weakref
from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import gpu_time
from traceanalyzer.analyses.arrays import union_covered
from traceanalyzer.analyses.intervals import filled, positions
from traceanalyzer.analyses.op_tree import is_row_number
from traceanalyzer.findings.engine import Finding, Later, Rule, counted, severity, site
from traceanalyzer.links import int64_arrays
from traceanalyzer.units import display_us, duration_us

if TYPE_CHECKING:
    from traceanalyzer.session import Session

PINNED_ADVICE = (
    "allocate host tensors with pin_memory=True (DataLoader(pin_memory=True)) and copy with non_blocking=True"
)


def _top_site(df: pl.DataFrame, by: str) -> dict:
    return chain.collect(  # one query (two eager steps were two)
        df.lazy()
        .group_by("op", "range", "python_frame", maintain_order=True)
        .agg(pl.col(by).fill_null(0).sum())
        .sort(by, descending=True, maintain_order=True)
    ).row(0, named=True)


def _copies(ses: Session) -> pl.DataFrame:
    """The copies (ns) with `_step`: their step, or 0 for every copy of a trace without steps."""
    c = ses.copies.copies_ns
    if c.is_empty() or "host_memory" not in c.columns:
        return pl.DataFrame()
    # a column added as a Series: no query (five rules ask)
    step = c["step"] if ses.trace.steps.height else pl.Series([0], dtype=pl.Int64).new_from_index(0, c.height)
    return c.hstack([step.alias("_step")])


GATHER_ROWS = 1 << 16  # up to this many GPU activities a copy's launch is read by row


# Each Session's blocking copies with the GPU idle while they held the CPU, worked out once: the
# pageable-copy and device-to-host rules ask for mostly the same calls (~1.5 ms each a DLRM rank).
_BLOCKED_IDLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _idle_while_blocked_us(ses: Session, copies: pl.DataFrame) -> float:
    """GPU idle on the copies' devices while their calls held the CPU: the GPU time a blocking
    copy cost (a CPU blocked on a busy GPU costs nothing). Each call's idle is its own (the
    idle pieces inside its span), so it is summed over `copies` from the Session's table."""
    if copies.is_empty() or not ses.trace.has_gpu_work:
        return 0.0
    idle = _BLOCKED_IDLE.get(ses)
    if idle is None:
        idle = _BLOCKED_IDLE[ses] = _blocked_idle(ses, ses.copies.copies_ns)
    return duration_us(int(idle["_idle_ns"].filter(idle["copy_id"].is_in(copies["copy_id"].implode())).sum()))


def _blocked_idle(ses: Session, copies: pl.DataFrame) -> pl.DataFrame:
    """copy_id, _idle_ns: each copy of `copies` whose call held the CPU, and the GPU idle on its
    device while it did."""
    gpu = ses.trace.gpu
    blocked = copies["blocked_ns"] > 0  # null where null, which `filter` drops (`fill_null` is a query)
    if gpu.height <= GATHER_ROWS and is_row_number(gpu["gpu_id"]):  # the launches by row: Series, no query
        at = copies["copy_id"].filter(blocked).cast(pl.UInt32)
        calls = pl.DataFrame(
            [gpu["gpu_id"][at].alias("copy_id"), copies["blocked_ns"].filter(blocked)]
            + [gpu[c][at].alias(n) for c, n in (("device", "device"), ("launch_ts_ns", "_a"), ("launch_end_ns", "_b"))]
        )
    else:
        calls = copies.select("copy_id", "blocked_ns").join(
            gpu.select(copy_id="gpu_id", device="device", _a="launch_ts_ns", _b="launch_end_ns"),
            on="copy_id",
            how="left",
        )
        calls = calls.filter(pl.col("blocked_ns").fill_null(0) > 0)
    pieces = ses.classified.pieces
    if (by_arrays := _idle_by_arrays(pieces, calls)) is not None:
        return by_arrays
    return gpu_time.idle_within(pieces, calls, "_a", "_b", "_idle_ns").select("copy_id", "_idle_ns")


def _idle_by_arrays(pieces: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame | None:
    """copy_id, _idle_ns: `gpu_time.idle_within`'s idle per call on numpy arrays, where numpy is
    imported (`arrays.union_covered`: each device's union of idle pieces, two searches), where
    its merge, index, as-of search and join were ~20 queries (~4 ms a DLRM rank); a call
    without a device or bounds counts nothing. None (`idle_within`) where a time or device is
    not an integer."""
    if "numpy" not in sys.modules:
        return None
    known = (calls["device"].is_not_null() & calls["_a"].is_not_null() & calls["_b"].is_not_null()).fill_null(False)
    q = int64_arrays([c.filter(known) for c in (calls["device"], calls["_a"], calls["_b"])])
    p = int64_arrays([pieces.get_column(c) for c in ("device", "start_ns", "end_ns")])
    if q is None or p is None or (idle := union_covered(*p, *q)) is None:
        return None
    at = positions(known)
    full = filled(0, calls.height).scatter(at, pl.Series(idle)) if at.len() else filled(0, calls.height)
    return pl.DataFrame([calls["copy_id"], full.alias("_idle_ns")])


def _pageable(ses: Session) -> list[Finding]:
    c = _copies(ses)
    if c.is_empty():
        return []
    pageable = c.filter(pl.col("host_memory") == "pageable")
    if pageable.is_empty():
        return []
    o = ses.options.copies
    # a Series' sum leaves nulls out (0 for none), as summing them as 0 did (`fill_null` is a query)
    blocked = duration_us(pageable["blocked_ns"].sum())
    duration = duration_us(pageable["duration_ns"].sum())
    moved = int(pageable["bytes"].sum())
    floor = o.copy_min_finding_us
    if blocked < floor and duration < floor and moved < o.pageable_copy_bytes:
        return []
    s = _top_site(pageable, "blocked_ns")
    sev = "high" if blocked >= 2 * floor or moved >= 2 * o.pageable_copy_bytes else "medium"
    return [
        Finding(
            "pageable_copies",
            sev,
            f"{pageable.height:,} copies to or from pageable host memory moved {moved / 2**20:,.1f} MiB, ran "
            f"{duration / 1000:,.1f} ms on the GPU and held the CPU {blocked / 1000:,.1f} ms (most from {site(s)})",
            {
                "copies": pageable.height,
                "bytes": moved,
                "duration_us": duration,
                "blocked_us": blocked,
                "top_site": site(s),
            },
            PINNED_ADVICE,
            Later(
                lambda: tuple(
                    display_us(
                        pageable.sort("blocked_ns", "bytes", descending=True, nulls_last=True)
                        .head(5)
                        .select("direction", "bytes", "start_ns", "duration_ns", "blocked_ns", "op", "python_frame"),
                        ses.copies.origin_ns,
                    ).to_dicts()
                )
            ),
            at_stake_us=duration + _idle_while_blocked_us(ses, pageable),
        )
    ]


def _many_small(ses: Session) -> list[Finding]:
    c = _copies(ses)
    if c.is_empty():
        return []
    o = ses.options.copies
    small = c.filter(
        pl.col("direction").is_in(["HtoD", "DtoH"])
        & (pl.col("bytes") < o.small_copy_bytes)
        & pl.col("_step").is_not_null()
    )
    if small.is_empty():
        return []
    many = chain.collect(  # one query (a group-by and a filter were two)
        small.lazy()
        .group_by("_step")
        .agg(n=pl.len(), t_ns=pl.col("duration_ns").sum(), b_ns=pl.col("blocked_ns").fill_null(0).sum())
        .filter(pl.col("n") >= o.many_small_per_step)
    )
    if many.is_empty():
        return []
    # Copy and blocked time over those steps: integer ns sums, per step in µs.
    copy_us = duration_us(int(many["t_ns"].sum())) / many.height
    blocked_us = duration_us(int(many["b_ns"].sum())) / many.height
    cost = copy_us + blocked_us
    if cost < o.copy_min_finding_us:
        return []
    s = _top_site(small, "duration_ns")
    n = float(many["n"].mean())
    return [
        Finding(
            "many_small_copies",
            severity(cost, o.copy_min_finding_us),
            f"{counted(int(many['n'].sum()), many.height, 'small host-device copy', 'step')} "
            f"(under {o.small_copy_bytes:,} bytes), "
            f"{copy_us:,.0f} µs of copy time and {blocked_us:,.0f} µs of blocked CPU per step "
            f"(most from {site(s)})",
            {
                "steps": many.height,
                "copies_per_step": n,
                "copy_us_per_step": copy_us,
                "blocked_us_per_step": blocked_us,
                "cost_us_per_step": cost,
                "top_site": site(s),
            },
            "batch them into one tensor and copy once",
            at_stake_us=duration_us(int(many["t_ns"].sum()))
            + _idle_while_blocked_us(ses, small.join(many.select("_step"), on="_step", how="semi")),
        )
    ]


def _device_to_host(ses: Session) -> list[Finding]:
    c = _copies(ses)
    if c.is_empty():
        return []
    dtoh = c.filter(
        (pl.col("direction") == "DtoH") & pl.col("_step").is_not_null() & pl.col("blocked_ns").is_not_null()
    )
    floor = ses.options.copies.copy_min_finding_us
    blocked = duration_us(dtoh["blocked_ns"].sum()) if dtoh.height else 0.0
    if not dtoh.height or blocked < floor:
        return []
    s = _top_site(dtoh, "blocked_ns")
    steps_with = dtoh["_step"].n_unique()
    return [
        Finding(
            "device_to_host_in_step",
            severity(blocked, floor),
            f"{counted(dtoh.height, steps_with, 'device-to-host copy', 'step')} inside the step loop hold the CPU "
            f"{blocked / steps_with / 1000:,.1f} ms per step (most from {site(s)}); each forces a sync",
            {
                "copies": dtoh.height,
                "copies_per_step": dtoh.height / steps_with,
                "blocked_us": blocked,
                "top_site": site(s),
            },
            "keep values on the GPU, or copy with non_blocking=True into pinned memory and read them a step later",
            at_stake_us=duration_us(int(dtoh["duration_ns"].sum())) + _idle_while_blocked_us(ses, dtoh),
        )
    ]


def _not_overlapped(ses: Session) -> list[Finding]:
    c = _copies(ses)
    if c.is_empty():
        return []
    # the host-device copies not hidden first: most traces have none, and then no stream is looked up
    hideable = c.filter(pl.col("direction").is_in(["HtoD", "DtoH"]) & (pl.col("exposed_ns") > 0))
    if hideable.is_empty():
        return []
    compute_streams = (
        ses.trace.gpu.lazy()
        .filter(pl.col("kind") == "kernel")
        .select("device", "stream")
        .unique()
        .with_columns(_compute=pl.lit(True))
    )
    hideable = chain.collect(  # one query, run as the eager calls were
        hideable.lazy()
        .join(compute_streams, on=["device", "stream"], how="left")
        .filter(pl.col("_compute").fill_null(False))
    )
    floor = ses.options.copies.copy_min_finding_us
    exposed = duration_us(hideable["exposed_ns"].sum()) if hideable.height else 0.0
    if not hideable.height or exposed < floor:
        return []
    s = _top_site(hideable, "exposed_ns")
    return [
        Finding(
            "copies_not_overlapped",
            severity(exposed, floor),
            f"{hideable.height:,} host-device copies run on a compute stream with {exposed / 1000:,.1f} ms not hidden "
            f"under compute (most from {site(s)})",
            {"copies": hideable.height, "exposed_us": exposed, "top_site": site(s)},
            "issue them on a side stream (torch.cuda.Stream) from pinned memory with non_blocking=True",
            at_stake_us=exposed,
        )
    ]


DTOD_ADVICE = (
    "find the ops that copy on the device (their sites below): .contiguous() / .clone() after a transpose or a "
    "slice, torch.cat / stack in a loop, dtype casts, copies into static buffers before a CUDA graph replay; keep "
    "layouts contiguous, preallocate and write in place (out=), and in compiled regions avoid graph breaks and "
    "inputs that are copied in at every call"
)


def _dtod(ses: Session) -> list[Finding]:
    c = _copies(ses)
    if c.is_empty() or not ses.gaps.has_gpu_work:
        return []
    dtod = c.filter(pl.col("direction") == "DtoD")
    if dtod.is_empty():
        return []
    busy = float(ses.gaps.devices["busy_us"].sum())
    if busy <= 0:
        return []
    duration = duration_us(int(dtod["duration_ns"].sum()))
    share = duration / busy
    th = ses.options.copies.dtod_copy_share
    if share < th:
        return []
    s = _top_site(dtod, "duration_ns")
    return [
        Finding(
            "dtod_copies",
            severity(share, th),
            f"{counted(dtod.height, 1, 'device-to-device copy', 'trace')} ran {duration / 1000:,.1f} ms on the GPU, "
            f"{share:.1%} of its busy time (most from {site(s)})",
            {
                "copies": dtod.height,
                "duration_us": duration,
                "bytes": int(dtod["bytes"].sum()),  # nulls left out
                "gpu_busy_us": busy,
                "share_of_busy": share,
                "top_site": site(s),
            },
            DTOD_ADVICE,
            tuple(
                display_us(dtod.sort("duration_ns", descending=True).head(5), ses.trace.meta.origin_ns)
                .select("bytes", "start_us", "duration_us", "op", "range", "python_frame")
                .to_dicts()
            ),
            at_stake_us=duration,
        )
    ]


RULES = (
    Rule(
        "pageable_copies",
        "Copies to or from pageable host memory (blocked or copy time, or bytes moved)",
        ("copy_min_finding_us", "pageable_copy_bytes"),
        "pin host memory (pin_memory=True) and copy with non_blocking=True",
        _pageable,
        ("copies",),
    ),
    Rule(
        "many_small_copies",
        "Many small host-device copies per step",
        ("small_copy_bytes", "many_small_per_step", "copy_min_finding_us"),
        "batch small copies into one tensor",
        _many_small,
        ("copies",),
    ),
    Rule(
        "device_to_host_in_step",
        "Device-to-host copies inside the step loop (each a sync)",
        ("copy_min_finding_us",),
        "keep values on the GPU; read them a step later",
        _device_to_host,
        ("copies",),
    ),
    Rule(
        "copies_not_overlapped",
        "Host-device copies on a compute stream, not hidden under compute",
        ("copy_min_finding_us",),
        "copy on a side stream from pinned memory",
        _not_overlapped,
        ("copies",),
    ),
    Rule(
        "dtod_copies",
        "Device-to-device copies taking a share of GPU busy time (a copy storm)",
        ("dtod_copy_share",),
        "contiguous layouts, in-place writes, no per-step copies into static buffers",
        _dtod,
        ("copies",),
    ),
)
