"""`pool_thread.on_pool_thread`: a callable run on polars' own thread, its queries run in place."""

from __future__ import annotations

import dataclasses
import resource
import threading

import polars as pl
import pytest

from traceanalyzer.pool_thread import on_pool_thread


def _switches_over_selects(n: int) -> int:
    """This thread's voluntary context switches over n selects of two columns (a select of
    several columns evaluates them on polars' pool)."""
    df = pl.DataFrame({"a": range(300), "b": range(300)})
    df.select("a", "b")
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    for _ in range(n):
        df.select(pl.col("a") + 1, pl.col("b"))
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before


def test_the_callable_runs_on_a_polars_thread_where_queries_need_no_hand_over():
    assert on_pool_thread(lambda: threading.current_thread() is threading.main_thread()) is False
    # From the main thread each query is handed to the pool and waited for (it sleeps and is
    # woken: two voluntary switches a query); on the pool thread it runs at once (none).
    assert _switches_over_selects(50) >= 50
    assert on_pool_thread(lambda: _switches_over_selects(50)) <= 5


def test_what_the_callable_raises_is_raised_to_the_caller():
    def broken() -> None:
        raise ValueError("rank 3: no events")

    with pytest.raises(ValueError, match="rank 3: no events") as info:
        on_pool_thread(broken)
    assert info.traceback[-1].name == "broken"  # where it was raised, not polars' wrapping
    assert on_pool_thread(lambda: on_pool_thread(lambda: 41) + 1) == 42  # nested: runs in place


def test_a_rank_analysed_there_is_the_rank_analysed_on_the_main_thread(SHARED_TRACES):
    from traceanalyzer.jobs import executors, rank_io

    path = str(next((SHARED_TRACES / "dlrm_v100_8ranks").glob("worker3_*")))
    unit = executors.analyse_rank_file(path)  # 0.9 MB of JSON: on the pool thread
    raw = executors._inflate(rank_io.read_bytes(path), path)
    here = executors._analysed(path, raw, raw, None)
    assert unit.idle_gaps.height and unit.findings.height  # a rank with something to compare
    for f in dataclasses.fields(unit):
        a, b = getattr(unit, f.name), getattr(here, f.name)
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b, f.name
