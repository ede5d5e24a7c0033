"""How many CPUs this process may use, in one place: the decoding threads (`load.native`), the
decoding processes (`load.parallel`) and a directory's rank workers (`jobs.plan`) all count them
so. Standard library only: `jobs.plan` asks before polars is imported."""

from __future__ import annotations

import os

WORKERS_ENV = "TRACEANALYZER_WORKERS"  # overrides the count; "1" turns parallel decoding off


def cpu_count() -> int:
    """CPUs this process may use: its affinity mask (`TRACEANALYZER_WORKERS` overrides)."""
    env = os.environ.get(WORKERS_ENV)
    if env and env.isdigit():
        return max(1, int(env))
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1
