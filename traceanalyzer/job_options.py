"""Options of the jobs floor: `diff` and the cross-rank comparison of a directory of rank files
(with how its per-rank map is executed). Composed into `traceanalyzer.options.Options` like
every other group."""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyzer.option_field import opt


@dataclass(frozen=True)
class DiffOptions:
    """Options of `diff`."""

    min_change_pct: float = opt(
        2.0,
        "a step-time change below this many percent is within noise even when steps do not vary",
        flag="--min-change",
    )


@dataclass(frozen=True)
class RankOptions:
    """Options of the cross-rank comparison (and of how its per-rank map is executed: the
    `EXECUTION_FIELDS`, which change no number and are left out of the JSON thresholds)."""

    straggler_min_us: float = opt(
        1000.0,
        "call a rank a straggler when it starts a step or a collective this many µs after the median rank",
        flag="--straggler-min",
    )
    straggler_last_share: float = opt(
        0.5,
        "straggler_rank fires when one rank arrives last at this share of the matched collectives or more "
        "(and late by --straggler-min on average)",
    )
    exposed_comm_share: float = opt(
        0.1,
        "exposed_communication fires when a rank's collective time that no compute hid reaches this share of its steps",
    )
    rank_jobs: int = opt(
        0,
        "directory mode: worker processes for the per-rank files (0: one per CPU, at most one per file)",
        flag="--jobs",
    )
    worker_min_mb: float = opt(
        16.0,
        "directory mode, local executor without --jobs: one more process per this many MB of trace JSON in the "
        "directory, up to one per CPU (a worker costs ~0.3 CPU-s to start; 8 small ranks run in one process); "
        "0: one per CPU",
    )
    rank_executor: str = opt(
        "local",
        "directory mode: run the per-rank files in a local process pool, or on Dask distributed (the dask extra)",
        flag="--executor",
        choices=("local", "dask"),
    )
    dask_address: str = opt(
        "",
        "with --executor dask: scheduler address (tcp://host:8786); empty: a local cluster, 'inprocess': threads here",
    )
    rank_cache: str = opt(
        "",
        "directory mode: folder (or fsspec URL's local cache) for per-rank results as Parquet, keyed by file content, "
        "tool version and options; re-runs skip ranks already done",
        flag="--cache-dir",
    )


EXECUTION_FIELDS = ("rank_jobs", "worker_min_mb", "rank_executor", "dask_address", "rank_cache")
