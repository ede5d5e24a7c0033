"""The Session computes each result once: a result released (`Session.release`) and asked for
again raises instead of being built a second time; and the gap results keep codes, not copies
(the cause as the registry's Enum, the activities around a gap as rows of `Trace.gpu`)."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.analyses.gap_causes import CAUSE_DTYPE, PIECE_COLUMNS
from traceanalyzer.causes import CAUSES
from traceanalyzer.session import ReleasedError


@pytest.fixture(scope="module")
def ses(SHARED_TRACES) -> ta.Session:
    return ta.Session.open(SHARED_TRACES / "a100_multistream_syncs.json.gz")


def test_a_released_result_is_not_computed_twice(SHARED_TRACES):
    s = ta.Session.open(SHARED_TRACES / "a100_simple_add_syncs.json.gz")
    gaps = s.gaps  # reads `classified`, which reads `activity`
    s.release("classified", "activity")
    assert s.gaps is gaps  # what was built from them stays
    with pytest.raises(ReleasedError, match="classified"):
        _ = s.classified
    with pytest.raises(ReleasedError, match="activity"):
        _ = s.blocking_calls  # read through `activity`
    s.release("dependency_model")  # never built: nothing to let go, but it is not built later either
    with pytest.raises(ReleasedError, match="dependency_model"):
        _ = s.dependency_model
    with pytest.raises(ValueError, match="not a result"):
        s.release("no_such_result")


def test_a_released_result_is_still_handed_to_the_store(SHARED_TRACES):
    """The gaps command lets `activity` and `classified` go before its report: the next command
    must still find them in the cache, so `release` puts them in the store first (once)."""

    class Store:  # the store's interface (`jobs.cache`), keeping nothing
        MISSING = object()
        loaded: frozenset = frozenset()

        def __init__(self) -> None:
            self.put_names: list[str] = []

        def get(self, name):
            return self.MISSING

        def computing(self, name) -> None:
            pass

        def share(self, **objects) -> None:
            pass

        def put(self, name, value) -> None:
            assert value is not None
            self.put_names.append(name)

    store = Store()
    s = ta.Session(ta.load(SHARED_TRACES / "a100_simple_add_syncs.json.gz"), store=store)
    _ = s.gaps
    s.release("activity", "classified", "dependency_model")  # the model is no result: never stored
    assert sorted(store.put_names) == ["activity", "classified"]
    s.save()  # at the command's end: what is left, not the released ones again
    assert store.put_names.count("activity") == 1 and "gaps" in store.put_names


def test_the_pieces_keep_what_their_readers_read(ses):
    p = ses.classified.pieces
    assert tuple(p.columns) == PIECE_COLUMNS
    assert p.schema["cause"] == CAUSE_DTYPE and list(CAUSE_DTYPE.categories) == list(CAUSES)
    # the codes compare as the names do
    assert p.filter(pl.col("cause") == "sync").height == p.filter(pl.col("cause").cast(pl.String) == "sync").height > 0


def test_every_gap_keeps_the_rows_of_its_neighbours(ses):
    g, gpu = ses.gaps, ses.trace.gpu
    assert "next_activity" not in g.all_gaps_ns.columns and "next_activity" in g.gaps_ns.columns
    # The activity after a gap starts where the gap ends on the same device (a gap cut by a step
    # window's edge has the next step's first activity later, or none); the one before ends where it starts.
    a = g.all_gaps_ns.filter(pl.col("next_gpu_id").is_not_null() & pl.col("prev_gpu_id").is_not_null())
    nxt = gpu[a["next_gpu_id"]]
    prv = gpu[a["prev_gpu_id"]]
    end = a["start_ns"] + a["duration_ns"]
    assert ((nxt["ts_ns"] >= end) & (nxt["device"] == a["device"])).all()
    assert ((prv["end_ns"] <= a["start_ns"]) & (prv["device"] == a["device"])).all()
    assert (nxt["ts_ns"] == end).mean() > 0.9
    # the listed gaps name the same rows
    listed = g.gaps_ns.join(
        g.all_gaps_ns.select("device", "start_ns", "next_gpu_id", "prev_gpu_id"), on=["device", "start_ns"]
    )
    names = gpu["name"]
    ids = listed.drop_nulls(["next_gpu_id"])
    assert ids["next_activity"].to_list() == names.gather(ids["next_gpu_id"]).to_list()


def test_kept_says_what_is_at_hand_without_computing_it(SHARED_TRACES):
    """`Session.kept`: a result computed, or held by the store (read from it then), is at hand;
    one neither computed nor stored is not, and asking computes nothing."""

    class Store:
        MISSING = object()

        def __init__(self, held: dict) -> None:
            self.held = held

        def get(self, name):
            return self.held.get(name, self.MISSING)

        def computing(self, name) -> None:
            raise AssertionError(f"{name} computed")

        def share(self, **objects) -> None:
            pass

    trace = ta.load(SHARED_TRACES / "a100_simple_add_syncs.json.gz")
    marker = object()
    s = ta.Session(trace, store=Store({"gaps": marker}))
    assert s.kept("gaps") and s.gaps is marker  # read from the store, not computed
    assert not s.kept("classified") and "classified" not in s.computed()
    plain = ta.Session(trace)
    assert not plain.kept("gaps")
    _ = plain.gaps
    assert plain.kept("gaps")
    plain.release("gaps")
    assert not plain.kept("gaps")
