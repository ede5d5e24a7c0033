"""op_context on a small trace: the whole-trace table, filtered, gives each call's rows."""

import polars as pl
import pytest

from traceanalyzer.analyses import attribution
from traceanalyzer.load import load


@pytest.mark.parametrize(
    "name", ["dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz", "a100_multistream_syncs.json.gz"]
)
def test_whole_trace_context_equals_per_call(SHARED_TRACES, name):
    t = load(str(SHARED_TRACES / name))
    asked = [
        t.gpu["op_id"],  # launches (copies, kernels, roofline)
        t.ops["parent_id"],  # with nulls and repeats
        pl.Series([5, 5, None, 10**9, 3], dtype=pl.Int32),  # an id past the last op has no row
        pl.Series([], dtype=pl.Int64),
    ]
    for ids in asked:
        got = attribution.op_context(t, ids)
        assert got.equals(attribution._op_context(t, ids))
        assert got["op_id"].is_sorted()
    assert "op_context" in t.__dict__["_derived"]  # made once (Trace.derived), then filtered


def test_large_trace_asks_per_call(SHARED_TRACES, monkeypatch):
    monkeypatch.setattr(attribution, "WHOLE_CONTEXT_OPS", 10)
    t = load(str(SHARED_TRACES / "a100_multistream_syncs.json.gz"))
    got = attribution.op_context(t, t.gpu["op_id"])
    assert "op_context" not in t.__dict__.get("_derived", {})
    assert got.height and got.height <= t.gpu["op_id"].drop_nulls().n_unique()
