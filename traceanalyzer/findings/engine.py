"""What a rule is and what it returns.

A rule reads the results a `Session` holds (never the raw tables when an analysis already says
the thing), compares one number with its thresholds (fields of the `Options` bundle, named in
`Rule.thresholds`) and, when that number crosses them, returns one Finding per thing it found
(a site, a device) with the evidence numbers, the events behind it and a recommendation.

Severity: `high` when the measured value is at least twice as far past the threshold (twice the
threshold, or half of it for "below" rules), else `medium`; capture caveats are `info`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

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
    events: tuple[dict[str, Any], ...] = ()
    thresholds: dict[str, Any] = field(default_factory=dict)


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

    def run(self, ses: Session) -> list[Finding]:
        """The rule's findings, each stamped with the threshold values it was judged by."""
        values = {name: ses.options.value(name) for name in self.thresholds}
        return [
            Finding(f.rule, f.severity, f.message, f.evidence, f.recommendation, f.events, values)
            for f in self.check(ses)
        ]


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
