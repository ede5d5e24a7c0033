"""Compact reprs and `_repr_html_` for notebooks (issue #24: `repr(ses.trace)` was 17 KB and
`repr(ses.gaps)` 11 KB)."""

from __future__ import annotations

import traceanalyzer as ta
from tests.synthetic import TraceBuilder


def test_reprs_are_short_and_have_html(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.kernel("a", 100, 1900, launch_ts=50)
    b.kernel("b", 6000, 3000, launch_ts=5890)
    ses = ta.Session.open(b.write(tmp_path))
    results = [ses.trace, ses, ses.gaps, ses.syncs, ses.copies, ses.kernels, ses.ops, ses.roofline, ses.memory]
    results += [ses.stages, ses.steps]
    for obj in results:
        text = repr(obj)
        assert len(text) < 700 and "\n" not in text, (type(obj).__name__, len(text))
        page = obj._repr_html_()
        assert page.startswith("<div><strong>") and "<table>" in page
    assert "gpu=2" in repr(ses.trace) and "steps=1" in repr(ses.trace)
    assert "gaps_ns=DataFrame(" in repr(ses.gaps)
    assert "table_ns=DataFrame(" in repr(ses.kernels) and "table_ns=DataFrame(" in repr(ses.ops)
