"""The crossing events of a CPU table: the native count (`_native.crossing_events`), the numpy
sweep of a small table and the polars sorts per thread give the same number, on random tables
with crossings built in and on the ops and runtime calls of every shared trace."""

from __future__ import annotations

import random

import numpy  # noqa: F401 - the native and the small-table counts read the columns through numpy
import polars as pl
import pytest

from tests.conftest import SHARED_TRACES_DIR
from traceanalyzer.analyses import crossing
from traceanalyzer.load import native
from traceanalyzer.load.loader import load

pytestmark = pytest.mark.skipif(not native.enabled(), reason="the native module is not built, or turned off")
TRACES = sorted(p for p in SHARED_TRACES_DIR.glob("*.json*") if p.is_file())


def _by_polars(df: pl.DataFrame, monkeypatch) -> int:
    """The count by polars sorts, one thread at a time (neither the small-table nor the native path)."""
    with monkeypatch.context() as m:
        m.setattr(crossing, "SMALL_TABLE_ROWS", -1)
        m.setattr(crossing, "native_loop", lambda name, rows: None)
        return crossing.crossing_events(df)


def test_by_hand():
    # thread (1, 1): 0-10, then 5-20 starts inside it and ends after it (1); 6-8 nests.
    # thread (1, 2): 0-10, 1-2 nests, 3-12 crosses 0-10, the furthest end (2); 12-13 starts at its
    # end: no crossing. Thread (2, 1) repeats thread (1, 1)'s first event alone: none.
    df = pl.DataFrame(
        {
            "pid": [1, 1, 1, 1, 1, 1, 1, 2],
            "tid": [1, 1, 1, 2, 2, 2, 2, 1],
            "ts_ns": [0, 5, 6, 0, 1, 3, 12, 0],
            "end_ns": [10, 20, 8, 10, 2, 12, 13, 10],
        }
    ).sample(fraction=1.0, shuffle=True, seed=3)
    fn = native.kernel("crossing_events", force=True)
    assert fn(*(df[c].to_numpy() for c in ["pid", "tid", "ts_ns", "end_ns"])) == 2


@pytest.mark.parametrize("seed", range(4))
def test_native_is_the_polars_count_on_random_tables(seed, monkeypatch):
    rng = random.Random(seed)
    n = 5_000
    ts = [rng.randrange(0, 100_000) for _ in range(n)]
    df = pl.DataFrame(
        {
            "pid": [rng.choice([7, 8]) for _ in range(n)],
            "tid": [rng.choice([1, 2, 3]) for _ in range(n)],
            "ts_ns": ts,
            "end_ns": [t + rng.choice([0, 1, rng.randrange(1, 500)]) for t in ts],
        }
    )
    want = _by_polars(df, monkeypatch)
    assert want > 0
    monkeypatch.setattr(crossing, "SMALL_TABLE_ROWS", -1)
    assert crossing._crossing_native(df) == want


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_native_is_the_polars_count_on_every_shared_trace(path, monkeypatch):
    trace = load(path)
    for table in (trace.ops, trace.runtime):
        if table.height >= 2:
            assert crossing._crossing_native(table) == _by_polars(table, monkeypatch)
