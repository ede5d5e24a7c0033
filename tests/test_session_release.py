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
    s.release("activity", "classified", "dependency_model")  # the model was never built: nothing to store
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


def test_a_released_trace_is_not_read_again(SHARED_TRACES):
    """The gaps command lets the Trace go once its report is built: what was computed from it
    stays, and anything that would read it again raises rather than fail obscurely."""
    s = ta.Session.open(SHARED_TRACES / "a100_simple_add_syncs.json.gz")
    gaps, verdict = s.gaps, s.verdict
    s.release("trace")
    assert s.gaps is gaps and s.verdict is verdict
    for name in ("trace", "loaded"):
        with pytest.raises(ReleasedError, match=name):
            getattr(s, name)
    with pytest.raises(ReleasedError, match="trace"):
        _ = s.path
    with pytest.raises(ReleasedError, match="trace"):
        _ = s.syncs  # not computed before: it would read the trace
    with pytest.raises(AttributeError, match="no_such_attribute"):
        _ = s.no_such_attribute


# Traces the narrowed commands are checked on: each a way a Trace's columns are read differently.
NARROWED = (
    "a100_multistream_syncs.json.gz",
    "gb10_vllm_cudagraphs.pt.trace.json.gz",  # CUDA graphs
    "h100_owlv2_inference.json.gz",  # with_stack: Python frames, DataLoader ranges
    "mi250_rocm_minitoy.json.gz",  # ROCm
)


@pytest.mark.parametrize("name", [*NARROWED, "v100_resnet50_dataloader_workers4.pt.trace.json.gz"])
def test_the_gaps_command_reads_no_column_it_drops(SHARED_TRACES, name):
    """`gaps` drops the columns no gap reads (`UNREAD`) once the health checks and communication
    are built, before classifying: every gap, cause, culprit and the verdict are the same as
    from the whole trace (a column read after all would raise)."""
    from traceanalyzer.cli.commands.gaps import UNREAD, _narrow

    trace = ta.load(SHARED_TRACES / name)
    whole, narrow = ta.Session(trace), ta.Session(trace)
    _ = narrow.health, narrow.communication  # as the command: read before the columns go
    _narrow(narrow)
    for table, cols in UNREAD.items():
        assert not set(cols) & set(getattr(narrow.trace, table).columns)
        assert not set(cols) & set(getattr(narrow.loaded, table).columns)
    assert set(UNREAD["ops"]) & set(whole.trace.ops.columns)  # the whole trace keeps them
    a, b = whole.gaps, narrow.gaps
    for field in ("all_gaps_ns", "gaps_ns", "culprits_ns", "idle_by_cause_ns", "devices_ns", "steps_ns"):
        assert getattr(a, field).equals(getattr(b, field)), field
    assert whole.verdict == narrow.verdict


@pytest.mark.parametrize("name", [*NARROWED, "edge_cpu_only.pt.trace.json.gz"])  # the last: no GPU work
def test_the_summary_command_reads_nothing_it_lets_go(SHARED_TRACES, name):
    """`summary` (lean, as the command runs it) drops the columns nothing after the roofline,
    kernels and health reads (`summary.UNREAD`) and releases the dependency model, the critical
    path, the CPU activity and the classified pieces as it goes: its report is the same as
    from a Session that keeps everything (a block read after all would raise), and they are gone."""
    from traceanalyzer.cli.commands.summary import UNREAD, summary_report
    from traceanalyzer.render import json_format

    trace = ta.load(SHARED_TRACES / name)
    whole, lean = ta.Session(trace), ta.Session(trace)
    th = whole.options.thresholds(("gaps",))
    a = json_format.render(summary_report(whole, 0, th))
    b = json_format.render(summary_report(lean, 0, th, lean=True))
    assert a == b
    for table, cols in UNREAD.items():
        assert not set(cols) & set(getattr(lean.trace, table).columns)
    assert set(UNREAD["ops"]) & set(whole.trace.ops.columns)  # the whole trace keeps them
    for block in ("dependency_model", "critical_path", "activity", "classified"):
        assert block not in lean.__dict__, block
        with pytest.raises(ReleasedError, match=block):
            getattr(lean, block)
    assert "critical_path" in whole.computed() and "activity" in whole.computed()


def test_the_summary_command_narrows_a_cached_trace_only_when_it_builds_the_model(SHARED_TRACES):
    """With a cache, `summary` narrows the Trace too when the critical path or the findings are
    to be computed, and hands the store the narrowed one (what a stored result names); the Trace
    the cache writes keeps every column. With both cached it narrows nothing (the narrowing
    reads a cached Trace's every table)."""
    from traceanalyzer.cli.commands.summary import UNREAD, summary_report
    from traceanalyzer.render import json_format

    class Store:  # the store's interface (`jobs.cache`), holding what it is given
        MISSING = object()

        def __init__(self, held: dict) -> None:
            self.held, self.shared, self.put_names = dict(held), {}, []

        def get(self, name):
            return self.held.get(name, self.MISSING)

        def computing(self, name) -> None:
            pass

        def share(self, **objects) -> None:
            self.shared.update(objects)

        def put(self, name, value) -> None:
            self.put_names.append(name)
            self.held[name] = value

    trace = ta.load(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    whole = ta.Session(trace)
    th = whole.options.thresholds(("gaps",))
    expected = json_format.render(summary_report(whole, 0, th))
    store = Store({})
    first = ta.Session(trace, store=store)
    assert json_format.render(summary_report(first, 0, th, lean=True)) == expected
    assert store.shared["trace"] is first.trace is not trace and store.shared["loaded"] is first.trace
    assert not set(UNREAD["gpu"]) & set(first.trace.gpu.columns)
    assert set(UNREAD["gpu"]) <= set(trace.gpu.columns)  # the Trace as loaded (and written) keeps them
    assert "critical_path" in store.put_names  # released: still handed to the store
    again = ta.Session(trace, store=Store({k: whole.__dict__[k] for k in ("critical_path", "findings")}))
    assert json_format.render(summary_report(again, 0, th, lean=True)) == expected
    assert again.trace is trace  # nothing to build: not narrowed
