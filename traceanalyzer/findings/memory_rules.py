"""Rules over the `memory` analysis: a device near its capacity, allocated memory that grows in
every step, one op holding most of the memory alive at the peak. One finding per device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.findings.engine import Finding, Rule, severity

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
)
