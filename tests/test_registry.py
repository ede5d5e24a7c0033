"""Every registered analysis runs on degenerate traces: one with no events at all, and one
with CPU work only (no GPU activity, no ProfilerStep)."""

from __future__ import annotations

import json

import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.registry import ANALYSES


@pytest.fixture(scope="module")
def empty_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": []}))
    return load(path)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    b = TraceBuilder(devices=0)
    b.op("aten::add", 0, 10)
    b.op("aten::mul", 20, 10)
    b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 40, 30)
    return load(b.write(tmp_path_factory.mktemp("cpu")))


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_runs_on_an_empty_trace(name, empty_trace):
    assert ANALYSES[name](empty_trace) is not None


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_runs_on_a_cpu_only_trace(name, cpu_trace):
    assert ANALYSES[name](cpu_trace) is not None
