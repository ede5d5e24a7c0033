"""What a rule is and what it returns.

A rule reads the results a `Session` holds (never the raw tables when an analysis already says
the thing), compares one number with its thresholds (fields of the `Options` bundle, named in
`Rule.thresholds`) and, when that number crosses them, returns one Finding per thing it found
(a site, a device) with the evidence numbers, the events behind it and a recommendation.

Severity: `high` when the measured value is at least twice as far past the threshold (twice the
threshold, or half of it for "below" rules), else `medium`; capture caveats are `info`.

Time at stake: a finding about GPU time says how much (`at_stake_us`: the GPU idle its cause left,
or the GPU time of the work it would shorten; never CPU time blocked on a busy GPU), and
`Rule.run` adds its share of the analysed window (`at_stake_share`). Severity follows it: a
finding is `high` only when its time at stake reaches `high_finding_share` of the window;
findings under `min_finding_share` are left out (`materiality`), and `ordered` sorts the rest by
severity, then time at stake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.analyses.scenario import Scenario
from traceanalyzer.units import us_expr
from traceanalyzer.wording import plural

if TYPE_CHECKING:  # the session imports the rules; rules only read a session they are given
    from traceanalyzer.session import Session

MAX_EVENTS = 5


@dataclass(frozen=True)
class Finding:
    """One thing a rule found: `evidence` holds the numbers compared with `thresholds`."""

    rule: str
    severity: str  # high | medium | info
    message: str
    evidence: dict[str, Any]
    recommendation: str
    events: tuple[dict[str, Any], ...] = ()  # a rule may hand a `Later` of them (see `Later`)
    thresholds: dict[str, Any] = field(default_factory=dict)
    at_stake_us: float | None = None  # GPU time at stake (None: the finding is not about GPU time)
    at_stake_share: float | None = None  # of the analysed window (`Rule.run` fills it in)
    # What fixing it would save per step, by the what-if replay of the rule's scenario
    # (`Rule.whatif`): µs, share of the replayed median step, confidence (high | medium | low),
    # and the scenario replayed, or, with saving_us None, why it cannot be estimated.
    saving_us: float | None = None
    saving_share: float | None = None
    saving_confidence: str | None = None
    saving_note: str = ""


@dataclass(frozen=True)
class Later:
    """An evidence value that needs an analysis of its own (the pipeline stages, say), not the
    ones the rule's test and message read: `Rule.run` computes it for findings shown in full, and
    leaves the key out where only the rule, severity and message are read (`full=False`: a
    rank's row in directory mode). A finding's `events` may be one too (`full=False`: none):
    on a small rank the few queries that pick and shape them cost more than the rule's test."""

    compute: Callable[[], Any]


# What a rule's fix amounts to: (scenario to replay, confidence), or why it cannot be estimated.
WhatIfSpec = Callable[["Session", Finding], "tuple[Scenario, str] | str"]
MODEL_ERROR_LIMIT = 0.02  # a replay of the capture off by more than this: every estimate is `low`


@dataclass(frozen=True)
class Rule:
    """A check over a Session. `commands`: the commands besides `summary` and `report` that
    show its findings (`copies` shows the copy rules, say)."""

    id: str
    title: str
    thresholds: tuple[str, ...]  # option field names (unique across the Options bundle)
    advice: str
    check: Callable[[Session], list[Finding]]
    commands: tuple[str, ...] = ()
    whatif: WhatIfSpec | str = "no what-if scenario for this rule"  # the fix as a scenario, or why none

    def run(self, ses: Session, estimate: bool = True, full: bool = True, floor: float = 0.0) -> list[Finding]:
        """The rule's findings, each stamped with the threshold values it was judged by and the
        saving its what-if scenario predicts (`estimate` False: no saving, no replay; nothing
        else in a finding depends on it). `full` False: no `Later` evidence either (the same
        findings, severities and messages). `floor`: findings whose time at stake is not
        `material` are left out before their `Later` evidence and their what-if replay are
        worked out (at 311 MB a third of the replays' time went to a finding then dropped)."""
        values = {name: ses.options.value(name) for name in self.thresholds}
        window = ses.gaps.window_us if ses.trace.has_gpu_work else 0.0
        high = ses.options.materiality.high_finding_share
        out = []
        for f in self.check(ses):
            share = f.at_stake_us / window if f.at_stake_us is not None and window > 0 else None
            if not material(share, floor):  # left out: nothing more to work out
                continue
            sev = "medium" if f.severity == "high" and share is not None and share < high else f.severity
            evidence = {
                k: v.compute() if isinstance(v, Later) else v
                for k, v in f.evidence.items()
                if full or not isinstance(v, Later)
            }
            events = f.events
            if isinstance(events, Later):
                events = events.compute() if full else ()
            found = Finding(f.rule, sev, f.message, evidence, f.recommendation, events, values, f.at_stake_us, share)
            out.append(self.estimate(ses, found) if estimate else found)
        return out

    def estimate(self, ses: Session, f: Finding) -> Finding:
        """`f` with `saving_*` from replaying the rule's scenario for it (see `analyses.whatif`)."""
        spec = self.whatif if isinstance(self.whatif, str) else self.whatif(ses, f)
        if isinstance(spec, str):
            return replace(f, saving_note=spec)
        scenario, confidence = spec
        w = ses.whatif(scenario)
        if w.saving_us is None:
            return replace(f, saving_note=f"{scenario.describe()}: no steps to replay")
        if w.model_error is None or w.model_error > MODEL_ERROR_LIMIT:
            confidence = "low"
        share = w.saving_us / w.replayed_median_step_us if w.replayed_median_step_us else None
        return replace(
            f, saving_us=w.saving_us, saving_share=share, saving_confidence=confidence, saving_note=scenario.describe()
        )


SEVERITY_ORDER = ("high", "medium", "info")


def material(share: float | None, floor: float) -> bool:
    """Whether a finding whose GPU time at stake is `share` of the window reaches `floor` (one
    not about GPU time, whose share is unknown, does); `floor` 0 keeps all."""
    return share is None or share >= floor


def ordered(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then the most GPU time at stake; registry order breaks ties."""
    return sorted(
        findings,
        key=lambda f: (
            SEVERITY_ORDER.index(f.severity) if f.severity in SEVERITY_ORDER else len(SEVERITY_ORDER),
            -(f.at_stake_us or 0.0),
        ),
    )


def severity(value: float, threshold: float, below: bool = False) -> str:
    """`high` when `value` is at least twice as far past `threshold` as the threshold itself."""
    if below:
        return "high" if value <= threshold / 2 else "medium"
    return "high" if threshold > 0 and value >= 2 * threshold else "medium"


def events_of(df: pl.DataFrame, origin_ns: int, *cols: str) -> tuple[dict, ...]:
    """Up to MAX_EVENTS rows of an event table (ts_ns, dur_ns) as start_us / duration_us."""
    return tuple(
        df.head(MAX_EVENTS)
        .select(*cols, us_expr("ts_ns", origin_ns).alias("start_us"), us_expr("dur_ns", origin_ns).alias("duration_us"))
        .to_dicts()
    )


def site(row: dict) -> str:
    """Where something happened, in words: op, range and Python line."""
    return (
        (row.get("op") or "a call outside any op")
        + (f" in {row['range']}" if row.get("range") else "")
        + (f" at {row['python_frame']}" if row.get("python_frame") else "")
    )


def counted(total: int, steps: int, noun: str, unit: str) -> str:
    """A count in whole numbers: "9 implicit syncs per step" when it divides evenly, else
    "14 implicit syncs in 5 steps" (never "2.8 syncs"); just "16 implicit syncs" per trace."""
    if unit != "step":
        return plural(total, noun)
    if steps and total % steps == 0:
        return f"{plural(total // steps, noun)} per step"
    return f"{plural(total, noun)} in {steps:,} steps"


def per_unit(ses: Session) -> str:
    """What per-step figures are per: `step`, or `trace` when it counts as one step."""
    return "step" if ses.trace.steps.height else "trace"
