"""The health of a whole job: every rank's health checks in one table, worst first."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.health import worst_first
from traceanalyzer.jobs.multirank import RankResult


def rank_health(results: list[RankResult]) -> pl.DataFrame:
    """Every rank's health checks, worst first (errors, then warnings, then info; by rank):
    rank, file, check, severity, message, unreliable. A rank with none has no row."""
    rows = [
        {"rank": r.rank if r.rank is not None else i, "file": r.path.replace("\\", "/").rsplit("/", 1)[-1], **h}
        for i, r in enumerate(results)
        for h in (r.health.iter_rows(named=True) if r.health.height else ())
    ]
    schema = {"rank": pl.Int64, "file": pl.String, "check": pl.String, "severity": pl.String}
    schema |= {"message": pl.String, "unreliable": pl.String}
    return worst_first(pl.DataFrame(rows, schema=schema), "rank", "check")
