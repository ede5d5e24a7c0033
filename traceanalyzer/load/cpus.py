"""How many CPUs this process may use, in one place: the decoding threads (`load.native`), the
decoding processes (`load.parallel`) and a directory's rank workers (`jobs.plan`) all count them
so. Standard library only: `jobs.plan` asks before polars is imported."""

from __future__ import annotations

import os
from collections.abc import Iterable

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


def usable() -> list[int]:
    """The CPUs this process may run on, in order (all of them as one where that is not known)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return []


def pin(allowed: Iterable[int]) -> None:
    """Run every thread of this process, and those it starts later, on the CPUs `allowed` alone
    (Linux; else, or where not allowed, nothing changes). Threads started already are moved one
    by one: `sched_setaffinity(0, ...)` moves only the calling thread."""
    mask = set(allowed)
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, mask)
        except (AttributeError, OSError):  # gone meanwhile, not Linux, or not allowed
            pass
