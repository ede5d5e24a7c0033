"""scripts/output_diff.py on hand-made JSON pairs: normalised paths, kinds, list alignment, the
table of listed changes and the matching (the real outputs are scripts/compare_outputs.py's job)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "output_diff", Path(__file__).resolve().parents[1] / "scripts" / "output_diff.py"
)
od = importlib.util.module_from_spec(_spec)
sys.modules["output_diff"] = od  # dataclasses look their module up
_spec.loader.exec_module(od)


def kinds(a: object, b: object) -> set[tuple[str, str]]:
    return {(d.path, d.kind) for d in od.differences(a, b)}


def test_identical_outputs_have_no_difference():
    doc = {"a": [1, {"b": 2.5}], "c": None}
    assert od.differences(doc, doc) == []


def test_keys_new_gone_and_order():
    assert kinds({"a": 1, "b": 2}, {"b": 2, "a": 1}) == {("(root)", "order")}
    assert kinds({"t": {"x": 1}}, {"t": {"x": 1, "peak_tflops": None}}) == {("t.peak_tflops", "new")}
    assert kinds({"t": {"x": 1, "old": 3}}, {"t": {"x": 1}}) == {("t.old", "gone")}
    # A new section is one difference, not one per key inside it.
    assert kinds({}, {"critical_path": {"steps": [1, 2], "shares": {}}}) == {("critical_path", "new")}


def test_list_indices_become_brackets():
    a = {"findings": [{"rule": "x", "v": 1}, {"rule": "y", "v": 2}]}
    b = {"findings": [{"rule": "x", "v": 1, "saving_us": 3.0}, {"rule": "y", "v": 5, "saving_us": 1.0}]}
    assert kinds(a, b) == {("findings[].saving_us", "new"), ("findings[].v", "value")}
    assert [d.detail for d in od.differences(a, b) if d.kind == "value"] == ["2 -> 5"]


def test_digits_are_floats_equal_to_1e_12_relative():
    # 17624.85800000001 -> 17624.858 (a float sum made exact): 5.7e-16 relative.
    assert kinds({"x": 17624.85800000001}, {"x": 17624.858}) == {("x", "digits")}
    assert kinds({"x": 0.8451289846397214}, {"x": 0.8451289846397213}) == {("x", "digits")}
    # 1e-9 relative is a changed number; so is an int that became a float, or a bool.
    assert kinds({"x": 1000.0}, {"x": 1000.000001}) == {("x", "value")}
    assert kinds({"x": 1}, {"x": 1.0}) == {("x", "value")}
    assert kinds({"x": True}, {"x": 1}) == {("x", "value")}


def test_reordered_list_aligned_by_identity():
    a = [{"rule": "a", "n": 1}, {"rule": "b", "n": 2}, {"rule": "c", "n": 3}]
    b = [{"rule": "c", "n": 3}, {"rule": "a", "n": 1}, {"rule": "b", "n": 2}]
    assert kinds({"f": a}, {"f": b}) == {("f", "order")}


def test_element_added_at_the_front_is_one_new_element():
    a = [{"rule": "a", "n": 1}, {"rule": "b", "n": 2}]
    b = [{"rule": "z", "n": 9}, {"rule": "a", "n": 1}, {"rule": "b", "n": 2}]
    diffs = od.differences({"f": a}, {"f": b})
    assert {(d.path, d.kind) for d in diffs} == {("f[]", "new")}
    assert diffs[0].detail == "'\"z\"'"
    assert kinds({"f": b}, {"f": a}) == {("f[]", "gone")}


def test_identity_by_a_pair_of_keys_when_no_key_is_unique():
    a = [
        {"cause": "sync", "op": "x", "us": 1},
        {"cause": "sync", "op": "y", "us": 1},
        {"cause": "cpu", "op": "x", "us": 3},
    ]
    b = [a[2], a[0]]  # (cause, op) names each element; ("sync", "y") is gone
    diffs = od.differences({"c": a}, {"c": b})
    assert {(d.path, d.kind) for d in diffs} == {("c[]", "gone"), ("c", "order")}
    assert [d.detail for d in diffs if d.kind == "gone"] == ['\'["sync", "y"]\'']


def test_left_over_elements_paired_by_first_field():
    # Two findings of one rule whose messages (their only unique field) changed: each is that
    # finding with another message; a rule only in the base is gone.
    a = [{"rule": "s", "message": "m1"}, {"rule": "s", "message": "m2"}, {"rule": "d", "message": "m3"}]
    b = [{"rule": "s", "message": "m1 reworded"}, {"rule": "s", "message": "m2 reworded"}]
    diffs = od.differences({"f": a}, {"f": b})
    assert sorted((d.path, d.kind) for d in diffs) == [
        ("f[]", "gone"),
        ("f[].message", "value"),
        ("f[].message", "value"),
    ]


def test_lists_of_scalars():
    assert kinds({"r": ["a", "b", "c"]}, {"r": ["a", "c"]}) == {("r[]", "gone")}
    assert kinds({"r": ["a", "b"]}, {"r": ["b", "a", "d"]}) == {("r", "order"), ("r[]", "new")}
    # Repeated values have no identity: a length change is a value change of the list.
    assert kinds({"r": [1, 1, 2]}, {"r": [1, 1]}) == {("r", "value")}
    assert kinds({"r": []}, {"r": [{"x": 1}, {"x": 2}]}) == {("r[]", "new")}
    # Same length, no identity: element by element.
    assert kinds({"r": [1, 1, 2]}, {"r": [1, 1, 3]}) == {("r[]", "value")}


TABLE = """# What changed

## Fields that differ from c8ac698

Prose is ignored.

| Command | Field | Change | Why |
|---|---|---|---|
| `summary` | `critical_path` | new | the critical path (issue 25) |
| `*` | `thresholds.min_finding_share`, `thresholds.high_finding_share` | new | materiality flags |
| `copies`, `syncs` | `summary.blocked_us` | digits | integer sums of ns |

### A subsection belongs to the list

| Command | Field | Change | Why |
|---|---|---|---|
| `gaps` | `summary.idle_by_cause.*` | value, new, gone | slow_launch narrowed |
| `summary` | `findings` | order | by saving |
| `summary` | `findings[]` | new, gone | the materiality floor |

## Another section

| Command | Field | Change | Why |
|---|---|---|---|
| `summary` | `everything` | any | not part of the list |
"""


def test_parse_the_table():
    rows = od.parse_listed(TABLE)
    assert [(r.commands, r.patterns, sorted(r.kinds)) for r in rows] == [
        (("summary",), ("critical_path",), ["new"]),
        ((), ("thresholds.min_finding_share", "thresholds.high_finding_share"), ["new"]),
        (("copies", "syncs"), ("summary.blocked_us",), ["digits"]),
        (("gaps",), ("summary.idle_by_cause.*",), ["gone", "new", "value"]),
        (("summary",), ("findings",), ["order"]),
        (("summary",), ("findings[]",), ["gone", "new"]),
    ]
    assert rows[0].reason == "the critical path (issue 25)"
    assert rows[0].line == 9
    assert rows[3].line == 17  # the line in the file, for "Rows no output needed"


@pytest.mark.parametrize(
    "command, path, kind, covered",
    [
        ("summary", "critical_path", "new", True),
        ("gaps", "critical_path", "new", False),  # another command
        ("summary", "critical_path", "gone", False),  # another kind
        ("summary", "critical_pathways", "new", False),  # a pattern ends at a key's end
        ("summary", "critical_path.steps[].x", "new", True),  # everything below the pattern
        ("ops", "thresholds.high_finding_share", "new", True),  # `*`: every command
        ("copies", "summary.blocked_us", "digits", True),
        ("copies", "summary.blocked_us", "value", False),  # digits do not cover a changed number
        ("gaps", "summary.idle_by_cause.slow_launch", "gone", True),  # `*` is one key
        ("gaps", "summary.idle_by_cause.slow_launch", "digits", True),  # value covers digits
        ("gaps", "summary.idle_by_cause", "order", False),
        ("summary", "findings", "order", True),
        ("summary", "findings[].rule", "value", False),  # order covers no changed element
        ("summary", "everything", "value", False),  # the other section is not the list
        ("summary", "findings[]", "gone", True),  # a whole finding
        ("summary", "findings[].saving_us", "new", False),  # `x[]` covers whole elements, not keys in them
        ("summary", "critical_path", "value", False),
    ],
)
def test_matching(command, path, kind, covered):
    rows = od.parse_listed(TABLE)
    left, used = od.unlisted(command, [od.Difference(path, kind)], rows)
    assert (not left) is covered
    assert bool(used) is covered


@pytest.mark.parametrize(
    "table, message",
    [
        ("# x\n", "no heading"),
        ("## Fields that differ from x\n\n| Command | Field | Change | Why |\n|---|---|---|---|\n", "no rows"),
        ("## Fields that differ from x\n| `a` | `b` | renamed | why |\n", "unknown change"),
        ("## Fields that differ from x\n| `a` | `b` | new |  |\n", "needs its reason"),
        ("## Fields that differ from x\n| a | `b` | new | why |\n", "backticks"),
        ("## Fields that differ from x\n| `a` | `b` | new |\n", "4 cells"),
    ],
)
def test_bad_tables_are_refused(table, message):
    with pytest.raises(ValueError, match=message):
        od.parse_listed(table)


def test_every_row_that_covers_a_difference_counts_as_used():
    rows = od.parse_listed(TABLE)
    diffs = [od.Difference("summary.blocked_us", "digits"), od.Difference("thresholds.min_finding_share", "new")]
    left, used = od.unlisted("copies", diffs, rows)
    assert left == [] and used == {10, 11}
    left, used = od.unlisted("ops", diffs, rows)
    assert left == [od.Difference("summary.blocked_us", "digits")] and used == {10}
