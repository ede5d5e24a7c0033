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
        .select(*cols, start_us=(pl.col("ts_ns") - origin_ns) / 1000.0, duration_us=pl.col("dur_ns") / 1000.0)
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
        return f"{total:,} {_nouns(total, noun)}"
    if steps and total % steps == 0:
        return f"{total // steps:,} {_nouns(total // steps, noun)} per step"
    return f"{total:,} {_nouns(total, noun)} in {steps:,} steps"


def _nouns(n: int, noun: str) -> str:
    if n == 1:
        return noun
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"


def per_unit(ses: Session) -> str:
    """What per-step figures are per: `step`, or `trace` when it counts as one step."""
    return "step" if ses.trace.steps.height else "trace"
