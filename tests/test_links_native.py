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


def _by_polars_innermost(points, intervals, id_col, out_col, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setattr(links, "SMALL_ROWS", 0)
        m.setattr(links_native, "innermost_native", lambda *a: None)
        return links.innermost_containing(points, intervals, id_col, out_col, **kw)


def test_innermost_by_hand():
    # thread (1, 1): op 0 0-100 holds op 1 10-50; a call 20-30 lies in op 1, one 40-60 starts
    # in op 1 but ends after it: op 0; one 120-130 in none. Thread (1, 2): a call with no op.
    ops = links.nest(
        pl.DataFrame({"pid": [1, 1], "tid": [1, 1], "ts_ns": [0, 10], "end_ns": [100, 50], "op_id": [0, 1]}), "op_id"
    )
    calls = pl.DataFrame(
        {"pid": [1, 1, 1, 1], "tid": [1, 1, 1, 2], "ts_ns": [20, 40, 120, 20], "end_ns": [30, 60, 130, 30]}
    )
    out = links_native.innermost_native(calls, ops, "op_id", "op_id", ["pid", "tid"], "end_ns")
    assert out["op_id"].to_list() == [1, 0, None, None]


@pytest.mark.parametrize("seed", range(4))
def test_innermost_native_is_the_polars_version_on_random_threads(seed, monkeypatch):
    rng = random.Random(seed)
    ops = links.nest(_random(rng, 40_000), "op_id")
    calls = _random(rng, 40_000).drop("op_id")
    for point_end in ("end_ns", "ts_ns"):
        want = _by_polars_innermost(calls, ops, "op_id", "op_id", monkeypatch, point_end=point_end)
        got = links.innermost_containing(calls, ops, "op_id", "op_id", point_end=point_end)
        assert got.equals(want) and 0 < got["op_id"].null_count() < got.height
    # ids out of order, one parent dangling (its op left out): the same as the polars version
    shuffled = ops.sample(fraction=1.0, shuffle=True, seed=seed).filter(pl.col("op_id") != 5)
    want = _by_polars_innermost(calls, shuffled, "op_id", "op_id", monkeypatch)
    assert links.innermost_containing(calls, shuffled, "op_id", "op_id").equals(want)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_innermost_native_is_the_polars_version_on_every_shared_trace(path, monkeypatch):
    trace = load(path)
    calls = trace.runtime.drop("op_id")
    if calls.height and trace.ops.height:
        got = links_native.innermost_native(calls, trace.ops, "op_id", "op_id", ["pid", "tid"], "end_ns")
        assert got.equals(_by_polars_innermost(calls, trace.ops, "op_id", "op_id", monkeypatch))
