"""A DIRECTORY of per-rank trace files given to `gaps` or `summary`.

Every file is analysed alone by `analyse_rank_file` (a pure function of one path: the unit a
cluster engine maps), in worker processes, `--jobs` at a time (default: one per CPU), each
holding one trace at a time; only the small per-rank results come back. Then
`multirank.cross_rank` compares them and `dir_report` builds the Report.

For another command to accept a directory:

    from traceanalyzer.commands import ranks
    if ranks.is_rank_dir(path):
        emit(ranks.dir_report("summary", path, GapOptions(), top), fmt, output)
        return
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.analyses.multirank import (
    MultiRankOptions,
    MultiRankResult,
    RankResult,
    cross_rank,
    rank_from_name,
    rank_result,
)
from traceanalyzer.errors import TraceReadError
from traceanalyzer.options import GapOptions, thresholds
from traceanalyzer.report import Report, Section

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def is_rank_dir(path: str | os.PathLike[str]) -> bool:
    return Path(path).is_dir()


def rank_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files of a directory (`*.json`, `*.json.gz`), in rank order where the name
    holds one (`worker3`, `rank_3`), else by name."""
    files = [p for p in Path(path).iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    if not files:
        raise TraceReadError(str(path), "directory holds no trace files (*.json, *.json.gz)")
    return sorted(files, key=lambda p: (rank_from_name(p.name) is None, rank_from_name(p.name) or 0, p.name))


def analyse_rank_file(
    path: str, gap_options: GapOptions | None = None, options: MultiRankOptions | None = None
) -> RankResult:
    """The per-file unit of work: load one rank's trace and reduce it to its RankResult."""
    from traceanalyzer.load import load

    return rank_result(load(path), gap_options, options)


def _init_worker() -> None:
    # The ranks already use every CPU: each worker decodes its file on one.
    os.environ["TRACEANALYZER_WORKERS"] = "1"


def run_ranks(
    paths: Sequence[str | os.PathLike[str]], fn: Callable[..., Any], *args: Any, jobs: int | None = None
) -> list[Any]:
    """`[fn(path, *args) for path in paths]`, in worker processes, results in input order.
    `fn` must be a module-level function (it is pickled by name)."""
    from traceanalyzer.load.parallel import cpu_count

    paths = [str(p) for p in paths]
    jobs = max(1, min(jobs or cpu_count(), len(paths)))
    if jobs == 1:
        return [fn(p, *args) for p in paths]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=_init_worker) as pool:
        return list(pool.map(fn, paths, *[[a] * len(paths) for a in args]))


def analyse_dir(
    path: str, gap_options: GapOptions | None = None, options: MultiRankOptions | None = None, jobs: int | None = None
) -> tuple[list[RankResult], MultiRankResult]:
    results = run_ranks(rank_files(path), analyse_rank_file, gap_options, options, jobs=jobs)
    return results, cross_rank(results, options)


def dir_report(
    command: str,
    path: str,
    gap_options: GapOptions | None = None,
    top: int = 20,
    options: MultiRankOptions | None = None,
    jobs: int | None = None,
) -> Report:
    """The cross-rank Report for `command` (gaps, summary) over a directory of rank files."""
    gopts = gap_options or GapOptions()
    mopts = options or MultiRankOptions()
    results, mr = analyse_dir(path, gopts, mopts, jobs)
    return multirank_report(command, path, results, mr, gopts, top)


def multirank_report(
    command: str, path: str, results: list[RankResult], mr: MultiRankResult, gap_options: GapOptions, top: int
) -> Report:
    th = {**thresholds(gap_options), **thresholds(mr.options)}
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
