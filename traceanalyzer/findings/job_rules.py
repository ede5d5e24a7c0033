"""Rules over a whole multi-rank job (a directory of rank files), not over one trace.

They are registered like every rule (`rules` lists them, `--fail-on` takes their ids), but a
single trace cannot show them: their `check` on a Session returns nothing, and `job_findings`
evaluates them on the `MultiRankResult` that `multirank.cross_rank` builds.

- `straggler_rank`: one rank arrives last at `straggler_last_share` of the matched collectives
  or more, late by `straggler_min_us` or more on average (vs the median rank).
- `exposed_communication`: a rank's collective time that no compute kernel hid reaches
  `exposed_comm_share` of its step time (summed over steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.findings.engine import Finding, Rule, severity

if TYPE_CHECKING:
    from traceanalyzer.jobs.multirank import MultiRankResult


def _none(_ses) -> list[Finding]:
    return []  # a job-level rule: see job_findings


STRAGGLER_ADVICE = (
    "look at what the late rank does before the collectives (its cause below and its own `gaps`): uneven data "
    "(sharding, padding), a slower input pipeline or host, extra work on that rank (logging, checkpointing, "
    "evaluation on rank 0); the other ranks' waiting disappears when it arrives on time"
)
EXPOSED_ADVICE = (
    "overlap communication with compute: DDP bucket sizes (bucket_cap_mb) and gradient-as-bucket-view, FSDP "
    "prefetching (forward_prefetch, backward_prefetch), async collectives waited on later; when the exposed time is "
    "mostly waiting for peers, fix the straggler first; when it is transfer, compress or shard less"
)

RULES = (
    Rule(
        "straggler_rank",
        "One rank arrives last at most collectives, and the others wait for it",
        ("straggler_min_us", "straggler_last_share"),
        STRAGGLER_ADVICE,
        _none,
    ),
    Rule(
        "exposed_communication",
        "Collective time that compute does not hide",
        ("exposed_comm_share",),
        EXPOSED_ADVICE,
        _none,
    ),
)


def _stamp(f: Finding, rule: Rule, mr: MultiRankResult) -> Finding:
    values = {n: getattr(mr.options, n) for n in rule.thresholds}
    return Finding(f.rule, f.severity, f.message, f.evidence, f.recommendation, f.events, values)


def job_findings(mr: MultiRankResult) -> list[Finding]:
    """The job-level findings of a compared job."""
    out: list[Finding] = []
    opts = mr.options
    m = mr.matched
    if m is not None and m.stragglers.height:
        s = m.stragglers.row(0, named=True)
        if s["share_last"] >= opts.straggler_last_share and s["mean_late_by_us"] >= opts.straggler_min_us:
            cause = m.straggler_cause.row(0, named=True) if m.straggler_cause.height else None
            why = f"; while peers waited it was mostly {cause['cause']} ({cause['share']:.0%})" if cause else ""
            out.append(
                Finding(
                    "straggler_rank",
                    severity(s["mean_late_by_us"], opts.straggler_min_us),
                    f"rank {s['rank']} arrived last at {s['times_last']} of {m.instances.height} collectives "
                    f"({s['share_last']:.0%}), {s['mean_late_by_us']:,.0f} µs after the median rank on average; "
                    f"the others waited {s['caused_wait_us']:,.0f} µs for it in all{why}",
                    {k: s[k] for k in s} | {"collectives": m.instances.height},
                    STRAGGLER_ADVICE,
                    tuple(m.straggler_cause.head(5).to_dicts()),
                )
            )
    if m is not None and m.exposed.height:
        step_us = {r["rank"]: (r["step_time_us"] or 0) * max(r["steps"], 1) for r in mr.ranks.iter_rows(named=True)}
        per = m.exposed.group_by("rank").agg(pl.col("exposed_us", "exposed_wait_us", "comm_us").sum()).sort("rank")
        for r in per.iter_rows(named=True):
            window = step_us.get(r["rank"]) or 0
            share = r["exposed_us"] / window if window else 0.0
            if share >= opts.exposed_comm_share:
                cause = "waiting for peers" if r["exposed_wait_us"] * 2 >= r["exposed_us"] else "transfer"
                out.append(
                    Finding(
                        "exposed_communication",
                        severity(share, opts.exposed_comm_share),
                        f"rank {r['rank']}: {r['exposed_us']:,.0f} µs of its {r['comm_us']:,.0f} µs of collectives ran "
                        f"with no compute beside them ({share:.1%} of its steps), mostly {cause} "
                        f"({r['exposed_wait_us']:,.0f} µs waiting for peers)",
                        {**r, "share": share, "step_time_us": window},
                        EXPOSED_ADVICE,
                    )
                )
    by_id = {r.id: r for r in RULES}
    return [_stamp(f, by_id[f.rule], mr) for f in out]
