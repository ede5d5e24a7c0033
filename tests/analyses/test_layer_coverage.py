"""The layer unions and their coverage (`layer_coverage`): the banded measure of every layer is
the keyed one, and layers given as functions are built one at a time, twice each, to the same
indexes as the frames themselves."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.analyses.cpu_activity import THREAD
from traceanalyzer.analyses.intervals import coverage_index
from traceanalyzer.analyses.layer_coverage import covered_many, cumulative_unions, unband


def test_banded_coverage_is_the_keyed_one(SHARED_TRACES):
    ses = ta.Session.open(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    act, pieces = ses.activity, ses.classified.pieces
    assert act.bands is not None
    q = pieces.select(*THREAD, "cpu_a", "cpu_b")
    outs = [f"_u{k}" for k in range(len(act.unions))]
    # the unions are kept on the bands' axis (24 bytes a row); `cumulative` gives them keyed
    assert all(u.columns == ["_t", "_te", "_before"] for u in act.unions if u.height)
    keyed_ix = act.cumulative
    assert all(ix.columns[:5] == ["pid", "tid", "start_ns", "end_ns", "_before"] for ix in keyed_ix if ix.height)
    banded = covered_many(q, list(act.unions), THREAD, "cpu_a", "cpu_b", outs, act.bands)
    keyed = covered_many(q, list(keyed_ix), THREAD, "cpu_a", "cpu_b", outs)
    assert banded.equals(keyed)
    # a keyed index is the coverage index of the same intervals: each group's _before from 0
    for ix in keyed_ix:
        if ix.height:
            assert ix.equals(
                coverage_index(ix.select(*THREAD, "start_ns", "end_ns"), THREAD, True).with_columns(ix["_k"])
            )
    # the blocked time, put on the same bands for the instant each gap begins
    from traceanalyzer.analyses.gap_causes import _on_bands

    q1 = pieces.select(*THREAD, "start_ns", _gs1=pl.col("start_ns") + 1)
    on_bands = _on_bands(act)
    assert on_bands.columns == ["_t", "_te", "_before"]
    at = covered_many(q1, [on_bands], THREAD, "start_ns", "_gs1", ["_b"], act.bands)
    assert at.equals(covered_many(q1, [act.blocked], THREAD, "start_ns", "_gs1", ["_b"]))
    assert int((at["_b"] > 0).sum()) > 0  # some gaps begin inside a sync (a100_multistream_syncs)
    assert banded.height == pieces.height and int(banded[outs[-1]].sum()) > 0
    # a gap's layers cover no more than its CPU interval
    assert (banded[outs[-1]] <= (pieces["cpu_b"] - pieces["cpu_a"])).all()


@pytest.mark.parametrize("large", [False, True])
def test_layers_given_as_functions_are_built_one_at_a_time(large, monkeypatch):
    """A large layer is built twice, to be measured, then merged, never two held at once; a
    small one (under SMALL_ROWS rows: here, unless the bound is none) is kept between the two."""
    from traceanalyzer.analyses import layer_coverage

    if large:
        monkeypatch.setattr(layer_coverage, "SMALL_ROWS", 0)
    # thread (1, 1): [0, 10) then [5, 20) -> union [0, 20); thread (1, 2): [3, 4)
    frames = [
        pl.DataFrame({"pid": [1, 1], "tid": [1, 2], "start_ns": [0, 3], "end_ns": [10, 4]}),
        pl.DataFrame({"pid": [1], "tid": [1], "start_ns": [5], "end_ns": [20]}),
    ]
    calls = []

    def lazily(i):
        def build():
            calls.append(i)
            return frames[i]

        return build

    eager, eager_bands = cumulative_unions(list(frames), ["pid", "tid"])
    lazy, lazy_bands = cumulative_unions([lazily(0), lazily(1)], ["pid", "tid"])
    assert calls == ([0, 1, 0, 1] if large else [0, 1])  # measured in turn, then (rebuilt and) merged in turn
    assert all(a.equals(b) for a, b in zip(eager, lazy))
    assert eager_bands.keys.equals(lazy_bands.keys) and (eager_bands.span, eager_bands.lo) == (lazy_bands.span, 0)
    last = unband(lazy[-1], lazy_bands, ["pid", "tid"]).select("pid", "tid", "start_ns", "end_ns", "_before").rows()
    assert last == [(1, 1, 0, 20, 0), (1, 2, 3, 4, 0)]


def test_banded_coverage_is_the_same_stacked_or_one_index_at_a_time(SHARED_TRACES, monkeypatch):
    """Small indexes are searched at once, stacked on one axis, and the queries in q's order;
    large ones one at a time, the queries sorted and scattered back (forced here by a bound of
    no rows): the same coverage, and the keyed measure's, on a100_multistream_syncs."""
    from traceanalyzer.analyses import layer_coverage

    ses = ta.Session.open(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    act, pieces = ses.activity, ses.classified.pieces
    q = pieces.select(*THREAD, "cpu_a", "cpu_b")
    outs = [f"_u{k}" for k in range(len(act.unions))]
    stacked = covered_many(q, list(act.unions), THREAD, "cpu_a", "cpu_b", outs, act.bands)
    monkeypatch.setattr(layer_coverage, "SMALL_ROWS", 0)
    one_by_one = covered_many(q, list(act.unions), THREAD, "cpu_a", "cpu_b", outs, act.bands)
    assert stacked.equals(one_by_one)
    assert stacked.equals(covered_many(q, list(act.cumulative), THREAD, "cpu_a", "cpu_b", outs))
    assert int(stacked[outs[-1]].sum()) > 0


def test_small_unions_on_numpy_are_the_polars_ones(monkeypatch):
    """The numpy merge of a small layer (`_merged_small`) and its `_before` give the frames the
    polars sort, merge and sweep give: random overlapping layers over three threads, tied starts."""
    import random
    import types

    import numpy  # noqa: F401  the numpy path needs it imported

    from traceanalyzer.analyses import layer_coverage

    rng = random.Random(7)

    def layer(n):
        rows = [(rng.choice([1, 2]), rng.choice([5, 6]), rng.randrange(0, 400, 5)) for _ in range(n)]
        rows.sort()
        return pl.DataFrame(
            {
                "pid": [r[0] for r in rows],
                "tid": [r[1] for r in rows],
                "start_ns": [r[2] for r in rows],
                "end_ns": [r[2] + rng.randrange(0, 60) for r in rows],
            }
        )

    layers = [layer(n) for n in (40, 0, 25, 60, 1)]
    fast, fast_bands = cumulative_unions([f.clone() for f in layers], ["pid", "tid"])
    monkeypatch.setattr(layer_coverage, "sys", types.SimpleNamespace(modules={}))
    slow, slow_bands = cumulative_unions([f.clone() for f in layers], ["pid", "tid"])
    assert fast_bands.keys.equals(slow_bands.keys)
    assert (fast_bands.span, fast_bands.lo) == (slow_bands.span, slow_bands.lo)
    assert len(fast) == len(slow) == 5
    assert all(a.equals(b) for a, b in zip(fast, slow))
    assert fast[-1].height > 1  # something merged
