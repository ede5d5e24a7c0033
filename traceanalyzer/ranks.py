"""A job's directory of per-rank trace files, analysed one file at a time.

`analyse_rank_file(path, options)` is a pure function of one path (the unit a cluster engine
maps: Ray, Dask, a batch array); it loads the file, reduces it to its small `RankResult` and
lets the trace go. `run_ranks` maps it over a directory in worker processes, each holding one
trace at a time; `multirank.cross_rank` then compares the results.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from traceanalyzer.analyses.multirank import MultiRankResult, RankResult, cross_rank, rank_from_name, rank_result
from traceanalyzer.errors import TraceReadError
from traceanalyzer.options import Options

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def is_rank_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a directory (of per-rank files) rather than one trace."""
    return Path(path).is_dir()


def rank_files(path: str | os.PathLike[str]) -> list[Path]:
    """The trace files of a directory (`*.json`, `*.json.gz`), in rank order where the name
    holds one (`worker3`, `rank_3`), else by name."""
    files = [p for p in Path(path).iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES)]
    if not files:
        raise TraceReadError(str(path), "directory holds no trace files (*.json, *.json.gz)")
    return sorted(files, key=lambda p: (rank_from_name(p.name) is None, rank_from_name(p.name) or 0, p.name))


def analyse_rank_file(path: str, options: Options | None = None) -> RankResult:
    """The per-file unit of work: load one rank's trace and reduce it to its RankResult."""
    from traceanalyzer.load import load

    return rank_result(load(path), options)


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
    path: str | os.PathLike[str], options: Options | None = None, jobs: int | None = None
) -> tuple[list[RankResult], MultiRankResult]:
    """Every rank file of a directory analysed alone, then compared across ranks."""
    opts = Options.of(options)
    results = run_ranks(rank_files(path), analyse_rank_file, opts, jobs=jobs)
    return results, cross_rank(results, opts)
