"""The what-if model in the cache (`analyses.model_state`): a command after one that built the
model replays the stored one instead of building it again, and prints what a fresh run prints;
a model read back replays every kind of scenario as the one built did."""

from __future__ import annotations

import re

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyzer.analyses.dependency_graph as dependency_graph
from traceanalyzer.analyses.model_state import model_state, restored
from traceanalyzer.analyses.scenario import Scenario
from traceanalyzer.cli import cli
from traceanalyzer.jobs import cache
from traceanalyzer.load import load
from traceanalyzer.session import Session

MODEL = "dependency_model"

TRACE = "a100_multistream_syncs.json.gz"


def _run(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


def _no_build(monkeypatch) -> None:
    """Building a dependency graph now fails the test: the model must come from the cache."""

    def boom(*a, **k):
        raise AssertionError("the model was built again")

    monkeypatch.setattr(dependency_graph, "build_graph", boom)


def _scenarios(ses: Session) -> list[Scenario]:
    """A scenario of each kind the replay takes: causes removed (sync cuts edges, gpu_wait zeroes
    lags), a kernel and an op sped up by name (the nodes' names come from the trace), an op dropped."""
    kernel = ses.kernels.table["kernel"][0]
    op = ses.ops.table.filter(~pl.col("name").str.contains("ProfilerStep", literal=True))["name"][0]
    return [
        Scenario.parse(("sync",)),
        Scenario.parse(("data_loading", "gpu_wait", "slow_launch", "peer_wait")),
        Scenario.parse((), (f"{re.escape(kernel[:30])}=2", f"^{re.escape(op)}$=1.5")),
        Scenario.parse((), (), (op,)),
    ]


@pytest.mark.parametrize(
    "name", [TRACE, "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz", "b200_eager_rank0.json.gz"]
)
def test_a_stored_model_replays_every_scenario_as_the_built_one(SHARED_TRACES, tmp_path, name):
    """Through the cache's own files (Arrow tables and the pickle), walked and not."""
    path = SHARED_TRACES / name
    ses = Session(load(path))
    scenarios = _scenarios(ses)
    built = ses.dependency_model
    unwalked = tmp_path / "unwalked"
    unwalked.mkdir()
    cache.dump(model_state(built), unwalked)
    path_built = ses.critical_path
    walked = tmp_path / "walked"
    walked.mkdir()
    cache.dump(model_state(built), walked)
    fresh = Session(load(path))
    for folder in (unwalked, walked):
        model = restored(fresh.trace, cache.load(folder))
        assert model.walked == (folder == walked)
        for sc in scenarios:
            a, b = built.what_if(sc), model.what_if(sc)
            assert a.steps_ns.equals(b.steps_ns) and a.predicted_median_step_ns == b.predicted_median_step_ns, sc
    again = restored(fresh.trace, cache.load(unwalked)).critical_path()
    assert again.segments.equals(path_built.segments) and again.by_kind.equals(path_built.by_kind)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        ("summary", ["whatif", "--without", "sync"]),  # the walked model, its path kept too
        ("summary", ["whatif", "--speedup", "nccl|gemm=1.5", "--drop", "aten::copy_"]),
        (["whatif", "--without", "data_loading"], ["path"]),  # not walked: the path walks it
        (["whatif", "--without", "data_loading"], ["syncs"]),
    ],
)
def test_a_command_after_one_that_built_the_model_replays_it(cached, trace, monkeypatch, first, then):
    first = [first] if isinstance(first, str) else first
    _run(*first, str(trace), "--format", "json")
    fresh = _run(*then, str(trace), "--format", "json", "--no-cache")
    _no_build(monkeypatch)
    assert _run(*then, str(trace), "--format", "json") == fresh


def test_a_walked_model_without_its_path_is_built_again(SHARED_TRACES):
    """A stored model was walked by a command whose critical path the store lacks (its entry
    lost): the path cannot be walked twice on it, so the model is built again for it."""

    class Store:  # the store's interface (`jobs.cache`), holding the walked model only
        MISSING = object()

        def __init__(self) -> None:
            self.kept: dict = {}

        def get(self, name):
            return self.kept.get(name, self.MISSING)

        def computing(self, name) -> None:
            pass

        def share(self, **objects) -> None:
            pass

        def put(self, name, value) -> None:
            if name == MODEL:
                self.kept[name] = value

    store = Store()
    trace = load(SHARED_TRACES / "a100_simple_add_syncs.json.gz")
    first = Session(trace, store=store)
    path = first.critical_path
    first.release(MODEL)  # handed to the store as it goes
    assert store.kept[MODEL].walked
    again = Session(trace, store=store)
    assert again.dependency_model.walked  # the stored one
    assert again.critical_path.segments.equals(path.segments)
