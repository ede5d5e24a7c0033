"""One findings engine: every rule of the tool, in one registry.

Each rule reads a `Session`'s results and returns its findings (see `engine`). `summary` and
`report` show every rule; `copies`, `syncs`, `memory` and `roofline` show their own (`Rule.commands`);
`rules` lists them all; `--fail-on` takes any rule id. `analyse_findings(trace)` evaluates them
all on one trace (material findings, most severe first); importing this package registers `evaluate` with the Session (a floor below,
which never imports the rules), so `ses.findings` is every finding.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from traceanalyzer.findings import copy_rules, job_rules, memory_rules, overview_rules, roofline_rules, sync_rules
from traceanalyzer.findings.engine import Finding, Rule, ordered
from traceanalyzer.findings.savings import SCENARIOS
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace

__all__ = ["Finding", "Rule", "RULES", "RULES_BY_ID", "RULE_IDS", "evaluate", "rules_for", "analyse_findings"]

RULES: tuple[Rule, ...] = (
    overview_rules.RULES[:1]  # data_loading
    + sync_rules.RULES
    + copy_rules.RULES
    + overview_rules.RULES[1:]
    + roofline_rules.RULES
    + memory_rules.RULES
    + job_rules.RULES  # straggler_rank: a directory only; exposed_communication: a trace and a directory
)
# Each rule's what-if scenario (`savings`), unless the rule names its own.
RULES = tuple(
    replace(r, whatif=SCENARIOS[r.id]) if r.id in SCENARIOS and isinstance(r.whatif, str) else r for r in RULES
)
RULES_BY_ID = {r.id: r for r in RULES}
RULE_IDS = tuple(RULES_BY_ID)
assert len(RULE_IDS) == len(RULES), "rule ids must be unique"


def rules_for(command: str) -> tuple[Rule, ...]:
    """The rules a command shows: all of them for summary and report, else its own."""
    if command in ("summary", "report", "diff"):
        return RULES
    return tuple(r for r in RULES if command in r.commands)


def evaluate(
    ses: Session, rules: tuple[Rule, ...] | None = None, estimate: bool = True, full: bool = True
) -> list[Finding]:
    """Every material finding the rules give on `ses` (all rules when `rules` is None): those
    whose GPU time at stake reaches `min_finding_share` of the window, most severe first, then
    the most time at stake (see `engine.ordered`). `estimate` False leaves out the savings (the
    what-if replays, and the dependency graph they need), `full` False the evidence that needs
    an analysis of its own (`engine.Later`): the same findings and messages, in the same order."""
    floor = ses.options.materiality.min_finding_share  # each rule's run leaves out what is under it
    return ordered([f for r in (RULES if rules is None else rules) for f in r.run(ses, estimate, full, floor)])


def analyse_findings(trace: Trace, options: Any = None) -> list[Finding]:
    """Every finding on `trace` with `options` (an `Options` bundle or one group's options)."""
    return Session(trace, options).findings


Session.evaluator = evaluate
