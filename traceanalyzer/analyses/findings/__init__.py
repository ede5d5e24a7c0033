"""One findings engine: every rule of the tool, in one registry.

Each rule reads a `Session`'s results and returns its findings (see `engine`). `summary` and
`report` show every rule; `copies`, `syncs` and `memory` show their own (`Rule.commands`);
`rules` lists them all; `--fail-on` takes any rule id. `traceanalyzer.analyse_findings(trace)`
(in `session`) evaluates them all on one trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceanalyzer.analyses.findings import copy_rules, job_rules, memory_rules, overview_rules, sync_rules
from traceanalyzer.analyses.findings.engine import Finding, Rule

if TYPE_CHECKING:
    from traceanalyzer.session import Session

__all__ = ["Finding", "Rule", "RULES", "RULES_BY_ID", "RULE_IDS", "evaluate", "rules_for"]

RULES: tuple[Rule, ...] = (
    overview_rules.RULES[:1]  # data_loading
    + sync_rules.RULES
    + copy_rules.RULES
    + overview_rules.RULES[1:]
    + memory_rules.RULES
    + job_rules.RULES  # a directory of rank files only (job_rules.job_findings)
)
RULES_BY_ID = {r.id: r for r in RULES}
RULE_IDS = tuple(RULES_BY_ID)
assert len(RULE_IDS) == len(RULES), "rule ids must be unique"


def rules_for(command: str) -> tuple[Rule, ...]:
    """The rules a command shows: all of them for summary and report, else its own."""
    if command in ("summary", "report", "diff"):
        return RULES
    return tuple(r for r in RULES if command in r.commands)


def evaluate(ses: Session, rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """Every finding the rules give on `ses`, in registry order."""
    return [f for r in rules for f in r.run(ses)]
