"""Rules over the `memory` analysis: a device near its capacity, allocated memory that grows in
every step, one op holding most of the memory alive at the peak (one finding per device); and
over the gaps: device memory allocated and freed in every step (allocator churn)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analyses.intervals import series_of
from traceanalyzer.analyses.windows import step_count
from traceanalyzer.findings.engine import Finding, Rule, counted, per_unit, severity
from traceanalyzer.patterns import DEVICE_ALLOC_API, matches
from traceanalyzer.units import display_us, duration_us

if TYPE_CHECKING:
    from traceanalyzer.session import Session


def _near_capacity(ses: Session) -> list[Finding]:
    m = ses.memory
    if not m.has_memory:
        return []
    th = ses.options.memory.near_capacity_share
    out = []
    for d in m.devices.iter_rows(named=True):
        reserved = d["reserved_share_of_capacity"]
        share = reserved if reserved is not None else d["share_of_capacity"]
        if share is None or share < th:
            continue
        used_mb = d["max_reserved_mb"] or d["peak_allocated_mb"]
        out.append(
            Finding(
                "memory_near_capacity",
                "high" if share >= (1 + th) / 2 else "medium",
                f"{d['device']}: memory near the device's capacity: {used_mb:,.0f} MiB reserved of "
                f"{d['capacity_mb']:,.0f} MiB ({share:.0%}); an out-of-memory error is close",
                {"device": d["device"], "share": share, "used_mb": used_mb, "capacity_mb": d["capacity_mb"]},
                "free cached blocks between phases, shrink the batch, use activation checkpointing or a lower precision",
            )
        )
    return out


def _growth(ses: Session) -> list[Finding]:
    m = ses.memory
    if not m.has_memory or m.steps.is_empty():
        return []
    o = ses.options.memory
    per = m.steps.group_by("device").agg(
        n=pl.len(),
        rising=(pl.col("growth_mb") > 0).all(),
        growth=pl.col("growth_mb").sum(),
        mean=pl.col("growth_mb").mean(),
    )
    fired = per.filter(
        (pl.col("n") >= o.min_growth_steps)
        & (pl.col("growth") >= o.min_finding_mb)
        & pl.col("rising")
        & (pl.col("mean") >= o.growth_mb_per_step)
    )
    return [
        Finding(
            "memory_growth",
            severity(g["mean"], o.growth_mb_per_step),
            f"{g['device']}: allocated memory rose in every one of {g['n']} steps ({g['mean']:,.1f} MiB per step, "
            f"{g['growth']:,.1f} MiB in all): a leak suspect",
            {"device": g["device"], "steps": g["n"], "growth_mb_per_step": g["mean"], "growth_mb": g["growth"]},
            "look for tensors kept across steps (a loss summed without .item(), a list of outputs, a cache that grows)",
        )
        for g in fired.sort("device").iter_rows(named=True)
    ]


def _dominant_op(ses: Session) -> list[Finding]:
    m = ses.memory
    if not m.has_memory or not m.has_addresses or m.live_by_op.is_empty():
        return []
    o = ses.options.memory
    top = m.live_by_op.sort(["mb", "op"], descending=[True, False]).unique("device", keep="first").sort("device")
    big = top.filter((pl.col("share_of_live") >= o.dominant_op_share) & (pl.col("mb") >= o.min_finding_mb))
    return [
        Finding(
            "memory_dominant_op",
            severity(t["share_of_live"], o.dominant_op_share),
            f"{t['device']}: {t['op'] or '(outside any op)'}{' in ' + t['range'] if t['range'] else ''} holds "
            f"{t['share_of_live']:.0%} of the memory allocated in the trace and alive at the peak ({t['mb']:,.1f} MiB)",
            {"device": t["device"], "op": t["op"], "range": t["range"], "share": t["share_of_live"], "mb": t["mb"]},
            "see `traceanalyzer memory` for the allocations alive at the peak and their Python lines",
        )
        for t in big.iter_rows(named=True)
    ]


ALLOC_ADVICE = (
    "the caching allocator is disabled or defeated: check that PYTORCH_NO_CUDA_MEMORY_CACHING is not set; set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_HIP_ALLOC_CONF on ROCm) so fragmented blocks are "
    "not freed and re-allocated; create tensors once outside the loop and reuse them (no torch.cuda.empty_cache() "
    "per step, no new buffers of changing shapes every step)"
)


def _allocator_churn(ses: Session) -> list[Finding]:
    """Device malloc/free calls in the steady state, and the GPU idle time they caused (the
    runtime_call gaps `gaps` blames on them), as a share of the steady-state idle time."""
    g = ses.gaps
    if not g.has_gpu_work:
        return []
    steady_idle = g.steady_idle_us()
    # Series compared and filtered (a frame's `filter` was a query), the pattern tried once per
    # distinct call name (`patterns.matches`); a null phase, cause or name is no match
    phase, cause, api, duration = series_of(g.all_gaps_ns, ["phase", "cause", "call_api", "duration_ns"])
    churning = (phase == "steady") & (cause == "runtime_call") & matches(api, DEVICE_ALLOC_API)
    churn = duration.filter(churning)
    idle = duration_us(int(churn.sum())) if churn.len() else 0.0
    th = ses.options.memory.allocator_churn_share
    if not steady_idle or idle / steady_idle < th:
        return []
    share = idle / steady_idle
    t = ses.trace
    calls = t.runtime.filter(pl.col("name").str.contains(DEVICE_ALLOC_API))
    if g.startup_end_ns is not None:  # the steady state: from where the start-up ends
        calls = calls.filter(pl.col("ts_ns") >= g.startup_end_ns)
    apis = calls.group_by("name").agg(n=pl.len()).sort("n", descending=True)
    call_us = duration_us(int(calls["dur_ns"].sum())) if calls.height else 0.0
    said = ", ".join(f"{r['name']} ×{r['n']:,}" for r in apis.iter_rows(named=True))
    unit = per_unit(ses)
    window = g.steady_window_us
    return [
        Finding(
            "allocator_churn",
            severity(share, th),
            f"{counted(calls.height, step_count(t), 'device malloc/free call', unit)} in the steady state ({said}), "
            f"{call_us / 1000:,.1f} ms in all: they left the GPU idle {idle / 1000:,.1f} ms, "
            f"{share:.0%} of its steady-state idle time ({idle / window:.1%} of the steady-state window)",
            {
                "calls": calls.height,
                "call_us": call_us,
                "idle_us": idle,
                "share_of_idle": share,
                "steady_idle_us": steady_idle,
                "window_us": window,
                "by_api": {r["name"]: r["n"] for r in apis.iter_rows(named=True)},
            },
            ALLOC_ADVICE,
            tuple(
                display_us(g.all_gaps_ns.filter(churning).sort("duration_ns", descending=True).head(5), g.origin_ns)
                .select("start_us", "duration_us", "call_api", "op", "python_frame")
                .to_dicts()
            ),
            at_stake_us=idle,
        )
    ]


RULES = (
    Rule(
        "memory_near_capacity",
        "Reserved (else allocated) memory near the device's capacity",
        ("near_capacity_share",),
        "smaller batch, checkpointing, lower precision",
        _near_capacity,
        ("memory",),
    ),
    Rule(
        "memory_growth",
        "Allocated memory rising in every step",
        ("growth_mb_per_step", "min_growth_steps", "min_finding_mb"),
        "find what keeps tensors alive across steps",
        _growth,
        ("memory",),
    ),
    Rule(
        "memory_dominant_op",
        "One op holding most of the memory alive at the peak",
        ("dominant_op_share", "min_finding_mb"),
        "shrink or free that op's outputs",
        _dominant_op,
        ("memory",),
    ),
    Rule(
        "allocator_churn",
        "Device memory allocated and freed in the steady state (cudaMalloc/cudaFree, hipMalloc/hipFree) leaving "
        "the GPU idle, as a share of its steady-state idle",
        ("allocator_churn_share",),
        "keep the caching allocator on and reuse buffers (expandable_segments, no per-step tensors)",
        _allocator_churn,
        ("memory",),
    ),
)
