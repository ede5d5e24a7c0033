"""Rules over the `syncs` analysis.

Two different quantities, two names (see the README's definitions):
- `sync_idle_us`: GPU idle caused by syncs, the gaps `gaps` gives the cause `sync` (a sync's
  bubble plus idle while it still blocked); `sync_stalls` fires on its share of the window;
- `blocked_us`: CPU time spent inside synchronising calls. A CPU waiting on a busy GPU is the
  healthy state, so the per-site rules (`implicit_sync`, `explicit_sync`) fire on the GPU idle a
  site caused per step (its bubbles and its idle while blocked), and report its blocked time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analyses.intervals import filter_rows
from traceanalyzer.findings.engine import MAX_EVENTS, Finding, Later, Rule, counted, per_unit, severity, site

if TYPE_CHECKING:
    from traceanalyzer.session import Session

SYNC_ADVICE = (
    "avoid host syncs inside the loop: no .item(), .cpu(), .tolist(), print(tensor) or torch.cuda.synchronize() "
    "per step; keep values on the GPU, use non_blocking copies to pinned memory, and read metrics every N steps"
)


def _sync_stalls(ses: Session) -> list[Finding]:
    s = ses.syncs
    window_us = ses.gaps.window_us
    if s.note or not window_us:
        return []
    share = s.sync_idle_us / window_us
    th = ses.options.syncs.sync_stall_share
    if share < th:
        return []
    every = s.stall_apis
    apis = every.group_by("api").agg(pl.col("calls").sum()).sort(["calls", "api"], descending=[True, False])
    by_api = ", ".join(f"{r['api']} ×{r['calls']}" for r in apis.iter_rows(named=True))
    return [
        Finding(
            "sync_stalls",
            severity(share, th),
            f"syncs left the GPU idle {s.sync_idle_us:,.0f} µs in all ({share:.1%} of the {window_us / 1000:,.1f} ms "
            f"analysed): the CPU sat in synchronising calls ({by_api}) as the GPU ran dry; those calls held the CPU "
            f"{s.blocked_us:,.0f} µs in all (summed over threads)",
            {
                "sync_idle_us": s.sync_idle_us,
                "share": share,
                "window_us": window_us,
                "blocked_us": s.blocked_us,
                "sync_calls": int(every["calls"].sum()),
            },
            SYNC_ADVICE,
            Later(
                lambda: tuple(
                    s.stalls.with_columns(_idle=pl.col("bubble_us") + pl.col("idle_while_blocked_us"))
                    .sort("_idle", descending=True)
                    .head(MAX_EVENTS)
                    .select("api", "start_us", "blocked_us", "bubble_us", "idle_while_blocked_us", "op", "python_frame")
                    .to_dicts()
                )
            ),
            at_stake_us=s.sync_idle_us,
        )
    ]


def _sites(kind: str):
    def check(ses: Session) -> list[Finding]:
        s = ses.syncs
        if s.note or s.summary.is_empty():
            return []
        th = ses.options.syncs.sync_min_finding_us
        unit = per_unit(ses)
        out = []
        # the sites of one kind filtered by Series (a frame's `filter` is a query; two rules ask)
        for r in filter_rows(s.summary, s.summary.get_column("kind") == kind).iter_rows(named=True):
            # A CPU waiting on a busy GPU is the healthy state: a site is a finding for the GPU
            # idle it caused (its bubbles and the idle while it blocked), not for its blocked time.
            cost = (r["bubble_us"] + r["idle_while_blocked_us"]) / s.steps
            if cost < th:
                continue
            where = site(r)
            out.append(
                Finding(
                    f"{kind}_sync",
                    severity(cost, th),
                    f"{counted(r['sync_points'], s.steps, kind + ' sync', unit)} from {where} ({r['apis']}) left the GPU idle "
                    f"{cost / 1000:,.2f} ms per {unit}, holding the CPU {r['blocked_us_per_step'] / 1000:,.2f} ms per {unit}",
                    {
                        "site": where,
                        "op": r["op"],
                        "range": r["range"],
                        "python_frame": r["python_frame"],
                        "apis": r["apis"],
                        "sync_points_per_step": r["points_per_step"],
                        "blocked_us_per_step": r["blocked_us_per_step"],
                        "bubble_us_per_step": r["bubble_us_per_step"],
                        "sync_idle_us_per_step": cost,
                        "bubble_share": r["bubble_share"],
                    },
                    SYNC_ADVICE,
                    at_stake_us=cost * s.steps,
                )
            )
        return out

    return check


RULES = (
    Rule(
        "sync_stalls",
        "GPU idle caused by syncs (sync_idle_us) as a share of the window",
        ("sync_stall_share",),
        "remove per-step .item()/.cpu()/synchronize(); read metrics every N steps",
        _sync_stalls,
        ("syncs",),
    ),
    Rule(
        "implicit_sync",
        "A site where an op synchronised for user code (.item(), .cpu(), nonzero, ...): GPU idle it caused per step",
        ("sync_min_finding_us",),
        "keep the value on the GPU or read it every N steps",
        _sites("implicit"),
        ("syncs",),
    ),
    Rule(
        "explicit_sync",
        "A site of explicit synchronize() calls: GPU idle it caused per step",
        ("sync_min_finding_us",),
        "drop the synchronize() from the loop (time with CUDA events instead)",
        _sites("explicit"),
        ("syncs",),
    ),
)
