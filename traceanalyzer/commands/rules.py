"""Every finding rule: its id, what it checks, its thresholds (flags of `summary`) and advice."""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.analyses.findings import RULES
from traceanalyzer.cli_options import build, dataclass_options, output_options
from traceanalyzer.commands.common import emit
from traceanalyzer.options import FindingOptions, thresholds
from traceanalyzer.report import Report, Section


def rules_table(options: FindingOptions) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rule": [r.id for r in RULES],
            "checks": [r.title for r in RULES],
            "thresholds": [", ".join(f"{n}={getattr(options, n)}" for n in r.thresholds) or "-" for r in RULES],
            "advice": [r.advice for r in RULES],
        }
    )


@click.command("rules")
@dataclass_options(FindingOptions)
@output_options
def command(fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """List every finding rule with its threshold and advice."""
    options = build(FindingOptions, kwargs)
    table = rules_table(options)
    report = Report(
        "rules",
        "-",
        thresholds(options),
        (Section("Rules (ids for `summary --fail-on`)", table, main=True),),
        {"rules": table},
        headline=f"{table.height} rules; thresholds are flags of `traceanalyzer summary`",
    )
    emit(report, fmt, output)
