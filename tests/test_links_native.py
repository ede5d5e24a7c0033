"""`links.nest` natively (`_native.nest`) gives the polars version's depth and parent for every
row: on random threads full of ties, zero-length and crossing intervals, and on the ops of the
shared traces; two rows alike in start, end and id are left to the polars version."""

from __future__ import annotations

import random

import numpy  # noqa: F401 - the native version reads the columns through numpy
import polars as pl
import pytest

from tests.conftest import SHARED_TRACES_DIR
from traceanalyzer import links, links_native
from traceanalyzer.load import native
from traceanalyzer.load.loader import load

pytestmark = pytest.mark.skipif(not native.enabled(), reason="the native module is not built, or turned off")
TRACES = sorted(p for p in SHARED_TRACES_DIR.glob("*.json*") if p.is_file())


def _by_polars(df: pl.DataFrame, id_col: str, monkeypatch) -> pl.DataFrame:
    with monkeypatch.context() as m:
        m.setattr(links, "SMALL_ROWS", 0)
        m.setattr(links_native, "nest_native", lambda *a: None)
        return links.nest(df, id_col)


def test_by_hand():
    # thread (1, 1): a 0-100 holds b 10-50 (which holds c 20-30) and d 50-60, which starts
    # where b ends; e 60-60 is zero-length at d's end. Thread (1, 2): f 0-10 alone.
    df = pl.DataFrame(
        {
            "pid": [1, 1, 1, 1, 1, 1],
            "tid": [1, 1, 1, 1, 1, 2],
            "ts_ns": [0, 10, 20, 50, 60, 0],
            "end_ns": [100, 50, 30, 60, 60, 10],
            "op_id": [0, 1, 2, 3, 4, 5],
        }
    )
    out = links_native.nest_native(df, "op_id", ["pid", "tid"])
    assert out["depth"].to_list() == [0, 1, 2, 1, 1, 0]
    assert out["parent_id"].to_list() == [None, 0, 1, 0, 0, None]


def _random(rng: random.Random, n: int) -> pl.DataFrame:
    ts = [rng.randrange(0, 20_000) for _ in range(n)]
    return pl.DataFrame(
        {
            "pid": [rng.choice([3, 4]) for _ in range(n)],
            "tid": [rng.choice([1, 2, 9]) for _ in range(n)],
            "ts_ns": ts,
            "end_ns": [t + rng.choice([0, 0, 1, 5, rng.randrange(1, 3_000)]) for t in ts],
            "op_id": pl.Series(range(n), dtype=pl.Int32),
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_native_is_the_polars_version_on_random_threads(seed, monkeypatch):
    df = _random(random.Random(seed), 70_000)
    want = _by_polars(df, "op_id", monkeypatch)
    got = links.nest(df, "op_id")
    assert got.equals(want) and got["depth"].max() > 3 and got["parent_id"].null_count() < df.height


def test_rows_alike_are_left_to_the_polars_version():
    df = pl.DataFrame({"pid": [1, 1], "tid": [1, 1], "ts_ns": [0, 0], "end_ns": [5, 5], "op_id": [7, 7]})
    assert links_native.nest_native(df, "op_id", ["pid", "tid"]) is None


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_native_is_the_polars_version_on_every_shared_trace(path, monkeypatch):
    ops = load(path).ops.drop("depth", "parent_id")
    if ops.height >= 2:
        assert links_native.nest_native(ops, "op_id", ["pid", "tid"]).equals(_by_polars(ops, "op_id", monkeypatch))
