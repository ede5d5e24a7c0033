"""Counts in finding messages are whole numbers: "9 implicit syncs per step" when the count
divides evenly over the steps, "14 implicit syncs in 5 steps" when not, never "2.8 syncs"."""

from __future__ import annotations

import re

import pytest

from traceanalyzer.findings.engine import counted
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.session import Session


def test_counted_in_whole_numbers():
    assert counted(10, 5, "implicit sync", "step") == "2 implicit syncs per step"
    assert counted(14, 5, "implicit sync", "step") == "14 implicit syncs in 5 steps"
    assert counted(1, 1, "device-to-host copy", "step") == "1 device-to-host copy per step"
    assert counted(6, 4, "device-to-host copy", "step") == "6 device-to-host copies in 4 steps"
    assert counted(16, 1, "implicit sync", "trace") == "16 implicit syncs"


# a decimal number followed (at most one word between) by a counted noun, not by a unit
FRACTIONAL_COUNT = re.compile(
    r"\b\d+\.\d+ (?!ms\b|µs\b|s\b|MB\b|MiB\b|GB\b)(?:[a-z-]+ )?(syncs?|copies|copy|kernels?|launches|calls?|steps?)\b"
)


@pytest.mark.parametrize(
    "name",
    [
        "h100_owlv2_inference.json.gz",
        "a100_simple_add_syncs.json.gz",
        "v100_resnet50_dataloader_workers0.pt.trace.json.gz",
    ],
)
def test_no_fractional_counts_in_findings(SHARED_TRACES, name):
    ses = Session(load(str(SHARED_TRACES / name)), Options())
    messages = [f.message for f in ses.findings]
    assert messages
    assert [m for m in messages if FRACTIONAL_COUNT.search(m)] == []
    # the sync-site messages begin with a whole count
    syncs = [m for m in messages if " implicit sync" in m or " explicit sync" in m]
    assert all(re.match(r"^\d[\d,]* (implicit|explicit) syncs? ", m) for m in syncs), syncs
