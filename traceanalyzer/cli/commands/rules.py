"""Every finding rule: its id, what it checks, its thresholds (flags of `summary`, and of the
command that shows it), the commands that show it, and its advice."""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.analyses.gap_causes import CAUSES, HINTS, MEANINGS
from traceanalyzer.cli.commands.common import emit
from traceanalyzer.cli.options import build_options, option_flags, output_options
from traceanalyzer.findings import RULES
from traceanalyzer.options import Options
from traceanalyzer.report import Report, Section

GROUPS = ("syncs", "copies", "steps", "memory", "findings")


def rules_table(options: Options) -> pl.DataFrame:
    """rule, checks, thresholds (name=value), shown_by, advice: one row per rule."""
    return pl.DataFrame(
        {
            "rule": [r.id for r in RULES],
            "checks": [r.title for r in RULES],
            "thresholds": [", ".join(f"{n}={options.value(n)}" for n in r.thresholds) or "-" for r in RULES],
            "shown_by": [", ".join(("summary", "report", *r.commands)) for r in RULES],
            "advice": [r.advice for r in RULES],
        }
    )


def causes_table() -> pl.DataFrame:
    """cause, meaning, advice: the gap causes `gaps` gives, one row each."""
    return pl.DataFrame(
        {"cause": list(CAUSES), "meaning": [MEANINGS[c] for c in CAUSES], "advice": [HINTS[c] for c in CAUSES]}
    )


def rules_text(table: pl.DataFrame) -> str:
    """One block per rule, for a terminal: the advice in full, wrapped by the renderer."""
    blocks = [
        f"{r['rule']}: {r['checks']}\n    thresholds: {r['thresholds']}\n    shown by: {r['shown_by']}"
        f"\n    -> {r['advice']}"
        for r in table.iter_rows(named=True)
    ]
    return "\n\n".join(blocks)


@click.command("rules")
@option_flags(*GROUPS)
@output_options
def command(fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """List every finding rule with its thresholds, the commands that show it, and its advice."""
    options = build_options(kwargs, *GROUPS)
    table = rules_table(options)
    report = Report(
        "rules",
        "-",
        options.thresholds(GROUPS),
        (
            Section("Rules (ids for `summary --fail-on`)", table, text=rules_text(table), main=True, show_table=False),
            Section("Gap causes (the `cause` of every GPU idle gap)", causes_table()),
        ),
        {"rules": table, "causes": causes_table()},
        headline=f"{table.height} rules; thresholds are flags of `traceanalyzer summary`",
    )
    emit(report, fmt, output)
