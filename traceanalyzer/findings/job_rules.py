"""Rules over a whole multi-rank job (a directory of rank files), not over one trace.

They are registered like every rule (`rules` lists them, `--fail-on` takes their ids), but a
single trace cannot show them: their `check` on a Session returns nothing, and `job_findings`
evaluates them on the `MultiRankResult` that `multirank.cross_rank` builds.

- `straggler_rank`: one rank arrives last at `straggler_last_share` of the matched collectives
  or more, late by `straggler_min_us` or more on average (vs the median rank).
- `exposed_communication`: a rank's collective time that no compute kernel hid reaches
  `exposed_comm_share` of its step time (summed over steps). The one rule with this id also
  fires on a single trace: there its `check` reads the Session's `communication` table (the same
  exposed time, per step, from that rank alone; whether it was waiting for peers or transfer
  needs the other ranks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.findings.engine import Finding, Later, Rule, ordered, severity
from traceanalyzer.units import display_us, duration_us

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


def _exposed_single(ses) -> list[Finding]:
    """One trace: the collective time no compute kernel hid, as a share of the step windows."""
    comm = ses.communication
    if comm.per_step_ns.is_empty():
        return []
    wins = windows.step_windows(ses.trace)
    window = duration_us(int((wins["end_ns"] - wins["start_ns"]).sum())) if wins.height else 0.0
    exposed, total = comm.exposed_us, comm.comm_us
    th = ses.options.value("exposed_comm_share")
    if window <= 0 or exposed / window < th:
        return []
    share = exposed / window
    n = max(comm.per_step_ns.height, 1)
    per = "per step" if ses.trace.steps.height else "in the trace"
    return [
        Finding(
            "exposed_communication",
            severity(share, th),
            f"{exposed / 1000:,.1f} ms of the {total / 1000:,.1f} ms of collectives ran with no compute beside them: "
            f"{share:.1%} of the step windows ({window / 1000:,.1f} ms"
            + (f", {exposed / n / 1000:,.1f} ms {per} over {n} steps" if ses.trace.steps.height else "")
            + "); whether that was waiting for peers or the transfer needs the other ranks (`summary DIR`)",
            {"exposed_us": exposed, "comm_us": total, "share": share, "window_us": window, "steps": n},
            EXPOSED_ADVICE,
            Later(lambda: tuple(comm.per_step.sort("exposed_us", descending=True).head(5).to_dicts())),
            at_stake_us=exposed,
        )
    ]


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
        _exposed_single,
    ),
)


def _stamp(f: Finding, rule: Rule, mr: MultiRankResult) -> Finding:
    values = {n: getattr(mr.options, n) for n in rule.thresholds}
    return Finding(f.rule, f.severity, f.message, f.evidence, f.recommendation, f.events, values, f.at_stake_us)


def job_findings(mr: MultiRankResult) -> list[Finding]:
    """The job-level findings of a compared job, most severe first, then most time at stake."""
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
    if m is not None and m.exposed_ns.height:
        # A rank's step time summed over its steps, and its exposed time: integer ns, shown in µs.
        step_ns = {r["rank"]: (r["step_time_ns"] or 0) * max(r["steps"], 1) for r in mr.ranks_ns.iter_rows(named=True)}
        per_ns = (
            m.exposed_ns.group_by("rank").agg(pl.col("exposed_ns", "exposed_wait_ns", "comm_ns").sum()).sort("rank")
        )
        for r_ns, r in zip(per_ns.iter_rows(named=True), display_us(per_ns, 0).iter_rows(named=True), strict=True):
            window = step_ns.get(r["rank"]) or 0
            share = r_ns["exposed_ns"] / window if window else 0.0
            if share >= opts.exposed_comm_share:
                cause = "waiting for peers" if r_ns["exposed_wait_ns"] * 2 >= r_ns["exposed_ns"] else "transfer"
                out.append(
                    Finding(
                        "exposed_communication",
                        severity(share, opts.exposed_comm_share),
                        f"rank {r['rank']}: {r['exposed_us']:,.0f} µs of its {r['comm_us']:,.0f} µs of collectives ran "
                        f"with no compute beside them ({share:.1%} of its steps), mostly {cause} "
                        f"({r['exposed_wait_us']:,.0f} µs waiting for peers)",
                        {**r, "share": share, "step_time_us": duration_us(window)},
                        EXPOSED_ADVICE,
                        at_stake_us=r["exposed_us"],
                    )
                )
    by_id = {r.id: r for r in RULES}
    return ordered([_stamp(f, by_id[f.rule], mr) for f in out])
