"""`sanitize` on small hand-built tables: each repair's count and repaired value worked out by hand
from the rule in its docstring (times in ns), including the cases its shortcuts (min/max checks
that skip the row-wise passes) must not miss."""

from __future__ import annotations

from collections import Counter

import polars as pl

from traceanalyzer.load.normalize import empty_frame
from traceanalyzer.load.sanitize import TIMED, sanitize

MS = 1_000_000
T0 = 1_700_000_000_000 * 1000  # a Kineto-like absolute start, in ns


def _tables(**timed: list[tuple[int | None, int | None]]) -> dict[str, pl.DataFrame]:
    """Every kind's table, empty but for the given (ts_ns, dur_ns) rows (other columns null)."""
    out = {k: empty_frame(k) for k in (*TIMED, "other")}
    for kind, rows in timed.items():
        schema = empty_frame(kind).schema
        data = {c: [None] * len(rows) for c in schema}
        data["ts_ns"] = [r[0] for r in rows]
        data["dur_ns"] = [r[1] for r in rows]
        data["name"] = [f"e{i}" for i in range(len(rows))]  # no two rows alike
        out[kind] = pl.DataFrame(data, schema=schema)
    return out


def test_clean_tables_are_returned_as_they_are():
    tables = _tables(op=[(T0, 100), (T0 + 50, 10)], gpu=[(T0 + 200, 30)])
    out, warnings = sanitize(tables, Counter())
    assert warnings == []
    assert all(out[k] is tables[k] for k in tables)  # nothing to repair: not even a copy


def test_dur_past_the_end_is_clipped_to_the_end_of_the_other_events():
    # starts span 0 .. 2 ms, so the limit is 2 ms + max(2 ms, 1 s) = 1.002 s after T0; the kernel's
    # 5 s dur runs past it and is clipped to the latest end among the others: the op at 2 ms + 3 ms.
    tables = _tables(op=[(T0, 1 * MS), (T0 + 2 * MS, 3 * MS)], gpu=[(T0 + 1 * MS, 5000 * MS), (T0 + 1 * MS, 10)])
    out, warnings = sanitize(tables, Counter())
    assert out["gpu"]["dur_ns"].to_list() == [4 * MS, 10]  # end 5 ms after T0, minus its start at 1 ms
    assert out["op"]["dur_ns"].to_list() == [1 * MS, 3 * MS]
    assert [w for w in warnings if "past the end" in w] == [
        "clipped 1 events whose dur runs past the end of the trace (dur longer than the whole trace)"
    ]


def test_largest_start_and_largest_dur_in_different_rows_clip_nothing():
    # The min/max shortcut sees ts max (T0 + 2 ms) + dur max (1.001 s) past the limit (T0 + 1.002 s),
    # but no single row is: the row-wise check must run and find none.
    tables = _tables(op=[(T0, 1001 * MS), (T0 + 2 * MS, 10)])
    out, warnings = sanitize(tables, Counter())
    assert out["op"]["dur_ns"].to_list() == [1001 * MS, 10]
    assert not [w for w in warnings if "past the end" in w]


def test_ts_too_large_to_be_a_time_counts_as_without_ts():
    tables = _tables(op=[(T0, 10), (1 << 62, 10), (-(1 << 62), 5), ((1 << 62) - 1, 1)])
    out, warnings = sanitize(tables, Counter())
    assert out["op"]["ts_ns"].to_list() == [T0, None, None, (1 << 62) - 1]
    assert "2 events have a ts too large to be a time; they count as without ts" in warnings


def test_missing_dur_is_counted_only_where_ts_is_known():
    tables = _tables(op=[(T0, None), (None, None), (T0 + 5, 3)], runtime=[(T0 + 1, None)])
    _, warnings = sanitize(tables, Counter())
    assert "2 events without dur were given zero duration" in warnings


def test_exact_duplicates_are_dropped_once():
    tables = _tables(op=[(T0, 10), (T0 + 20, 10)])
    op = tables["op"]
    tables["op"] = pl.concat([op, op.head(1)])  # the first row written twice
    out, warnings = sanitize(tables, Counter())
    assert out["op"]["ts_ns"].to_list() == [T0, T0 + 20]
    assert "dropped 1 exact duplicate events" in warnings
