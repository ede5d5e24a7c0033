"""A DIRECTORY of per-rank trace files given to `gaps` or `summary`: the cross-rank Report.

The files are analysed by the library (`traceanalyzer.ranks`: one pure function per file,
mapped in worker processes), compared by `multirank.cross_rank`, and `dir_report` builds the
Report.

For another command to accept a directory:

    from traceanalyzer.commands import ranks
    if ranks.is_rank_dir(path):
        emit(ranks.dir_report("summary", path, options, top, GROUPS), fmt, output)
        return
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.multirank import MultiRankResult, RankResult
from traceanalyzer.options import Options
from traceanalyzer.ranks import analyse_dir, is_rank_dir
from traceanalyzer.report import Report, Section

__all__ = ["dir_report", "is_rank_dir", "multirank_report"]


def dir_report(
    command: str,
    path: str,
    options: Options | None = None,
    top: int = 20,
    groups: tuple[str, ...] = (),
    jobs: int | None = None,
) -> Report:
    """The cross-rank Report for `command` (gaps, summary) over a directory of rank files."""
    opts = Options.of(options)
    results, mr = analyse_dir(path, opts, jobs)
    return multirank_report(command, path, results, mr, opts.thresholds(groups or ("patterns", "gaps", "ranks")), top)


def multirank_report(
    command: str, path: str, results: list[RankResult], mr: MultiRankResult, th: dict, top: int
) -> Report:
    """The Report of a whole job: per rank, the longest rank's idle, stragglers, collectives."""
    n = mr.ranks.height
    headline = f"{n} ranks"
    if mr.longest_rank is not None:
        row = mr.ranks.filter(pl.col("rank") == mr.longest_rank).row(0, named=True)
        top_cause = mr.longest_idle_by_cause.row(0, named=True) if mr.longest_idle_by_cause.height else None
        headline += (
            f"; longest step on rank {mr.longest_rank} ({row['step_time_us'] / 1000:,.2f} ms, GPU idle {row['idle_us'] / 1000:,.2f} ms"
            + (f", mostly {top_cause['cause']}" if top_cause else "")
            + ")"
        )
    if mr.stragglers.height:
        s = mr.stragglers.row(0, named=True)
        headline += (
            f"; straggler: rank {s['rank']}, {s['what']} late by {s['late_by_us'] / 1000:,.2f} ms ({s['cause']})"
        )
    else:
        headline += f"; no straggler (no rank late by {mr.options.straggler_min_us:g} µs or more)"
    headline += f". {mr.alignment_note}"

    def head(df: pl.DataFrame) -> pl.DataFrame:
        return df if not top else df.head(top)

    sections = (
        Section("Per rank: step time, GPU busy, idle by cause (µs)", mr.ranks, main=True),
        Section(f"Rank {mr.longest_rank}, the longest step: idle by cause", mr.longest_idle_by_cause),
        Section("Stragglers: ranks late to a step or a collective, and why", mr.stragglers, text=mr.alignment_note),
        Section(
            "Collective kernels, latest starters first",
            head(mr.collectives.sort("late_by_us", descending=True)) if mr.collectives.height else None,
        ),
    )
    warnings = tuple(f"{r.path}: {w}" for r in results for w in r.warnings)
    payload = {
        "ranks": mr.ranks,
        "longest_rank": mr.longest_rank,
        "longest_rank_idle_by_cause": mr.longest_idle_by_cause,
        "stragglers": mr.stragglers,
        "collectives": mr.collectives,
        "clocks_aligned": mr.clocks_aligned,
        "alignment_note": mr.alignment_note,
        "per_rank": [
            {
                "rank": r.rank,
                "rank_from": r.rank_source,
                "file": r.path,
                "devices": r.gaps.devices,
                "idle_by_cause": r.gaps.idle_by_cause,
                "culprits": head(r.gaps.culprits),
            }
            for r in sorted(results, key=lambda r: (r.rank is None, r.rank or 0))
        ],
    }
    return Report(command, path, th, sections, payload, headline=headline, warnings=warnings)
