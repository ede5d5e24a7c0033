"""How many processes a directory of rank files is analysed on (the local executor), decided
before polars loads: the command line reads it to size this process's polars pool, the
executor to start its workers.

A worker costs its start-up, ~0.25-0.35 CPU-s (Python, polars and the analyses imported, their
first calls), whatever it then analyses; a small rank costs ~0.11 CPU-s (a 0.9 MB DLRM rank,
2026-12-01). So one more process is started per `min_bytes` of trace JSON in the directory (the
`--worker-min-mb` option), up to one per CPU and one per file: 8 DLRM ranks (7.8 MB) run in this
process alone (1.4 CPU-s instead of 1.7, ~0.2 s more wall on an idle 2-CPU machine), 64 of them
or four 11 MB mi300x ranks on every CPU. This module imports neither polars nor the analyses.
"""

from __future__ import annotations

import math
import os

from traceanalyzer.job_options import RankOptions
from traceanalyzer.load.cpus import cpu_count
from traceanalyzer.load.urls import is_url

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_WORKER_MIN_MB: float = RankOptions.worker_min_mb  # the default of `--worker-min-mb`


def min_bytes(worker_min_mb: float) -> int:
    """`--worker-min-mb` in bytes (MB of 10^6 bytes)."""
    return int(worker_min_mb * 1_000_000)


def json_bytes(path: str) -> int | None:
    """A file's JSON size without reading it: its size, or for gzip the size its trailer states
    (ISIZE, mod 4 GiB: lifted to at least the compressed size, as the loader does); None for a
    URL or a file that cannot be read (the size is then unknown)."""
    if is_url(path):
        return None
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(2) != GZIP_MAGIC or size < 18:
                return size
            fh.seek(-4, os.SEEK_END)
            isize = int.from_bytes(fh.read(4), "little")
    except OSError:
        return None
    while isize < size:
        isize += 1 << 32
    return isize


def processes(paths: list[str], jobs: int = 0, min_bytes: int = 0) -> int:
    """How many processes (this one and its workers) analyse `paths`: `jobs` when given (at most
    one per file), else one per CPU and per file, and with `min_bytes` one per `min_bytes` of
    JSON at most (all of them where a size is unknown)."""
    if jobs:
        return max(1, min(jobs, len(paths)))
    n = max(1, min(cpu_count(), len(paths)))
    if n == 1 or min_bytes <= 0:
        return n
    sizes = [json_bytes(p) for p in paths]
    if any(s is None for s in sizes):
        return n
    return max(1, min(n, math.ceil(sum(sizes) / min_bytes)))


def local_files(directory: str) -> list[str] | None:
    """The plain files of a local directory (not those starting with "."), or None for a URL."""
    if is_url(directory):
        return None
    try:
        return [e.path for e in os.scandir(directory) if e.is_file() and not e.name.startswith(".")]
    except OSError:
        return None


# A rank this large gains from polars' threads when it is analysed alone (the size below which a
# rank's queries run on polars' in-memory engine: `executors.IN_MEMORY_ENGINE_BYTES`).
THREADED_RANK_BYTES = 128 << 20


def one_polars_thread(paths: list[str], jobs: int = 0, min_bytes: int = 0) -> bool:
    """Whether this process should run polars on one thread for `paths`: when it shares the
    ranks with workers (the ranks are the parallelism), or when every rank is small (a second
    thread spins between small queries: 8 DLRM ranks alone, 1.4 against 2.0-2.9 CPU-s). Only a
    process left alone with a large rank keeps polars' threads."""
    if processes(paths, jobs, min_bytes) > 1:
        return True
    sizes = [json_bytes(p) for p in paths]
    return all(s is not None and s < THREADED_RANK_BYTES for s in sizes)
