"""The cause registry is the one home of a cause: the classifier, the CPU layers, the culprits,
the verdict, the start-up, the colours and the docs all read it."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.synthetic import TraceBuilder
from traceanalyzer import causes
from traceanalyzer.analyses import cpu_activity, gap_causes, startup, verdict
from traceanalyzer.load.loader import load
from traceanalyzer.render import timeline_layout

ROOT = Path(__file__).resolve().parents[1]


def _generated(path: Path, long: bool) -> str:
    begin, end = causes.table_marker(long)
    text = path.read_text()
    assert begin in text and end in text, f"{path.name} lost its cause-table markers"
    return text.split(begin + "\n", 1)[1].split("\n" + end, 1)[0]


def test_the_readme_and_docs_cause_tables_are_the_registry():
    """Both tables are written by `scripts/refresh_docs.py --causes`; a cause added to the
    registry without refreshing them fails here."""
    assert _generated(ROOT / "README.md", long=False) == causes.markdown_table(long=False)
    assert _generated(ROOT / "docs" / "causes.md", long=True) == causes.markdown_table(long=True)
    rows = [line for line in causes.markdown_table(long=False).splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(causes.CAUSES)


def test_every_cause_has_one_record_read_by_every_user():
    ids = [c.id for c in causes.REGISTRY]
    assert len(ids) == len(set(ids))
    assert set(causes.MEANINGS) == set(causes.HINTS) == set(causes.COLOURS) == set(ids)
    # the modules that used to spell their own lists now hold the registry's
    assert gap_causes.CAUSES is causes.CAUSES and gap_causes.HINTS is causes.HINTS
    assert verdict.NOT_A_HEADLINE == ("kernel_spacing",)
    assert timeline_layout.CAUSE_COLORS is causes.COLOURS
    assert causes.ONE_TIME == ("runtime_call", "slow_launch")
    assert not hasattr(startup, "INIT_CAUSES")


def test_layers_are_tied_by_name_and_every_layer_counts_for_one_cause():
    """Each CPU layer of cpu_activity counts for exactly one cause, so a moment of thread time
    is never blamed twice nor dropped."""
    owners = [layer for _, layers in causes.by_layer_share() for layer in layers]
    assert sorted(owners) == sorted((*causes.LAYERS, causes.UNCOVERED))
    assert cpu_activity.LAYERS is causes.LAYERS
    # the order of equal shares is the layers' priority: data loading wins over a sync inside it
    assert [c for c, _ in causes.by_layer_share()] == [
        "data_loading",
        "sync",
        "runtime_call",
        "launch_latency",
        "cpu_bound",
        "untraced",
    ]


def test_a_layer_set_missing_from_cpu_activity_is_caught(tmp_path):
    """CpuActivity builds one set per registry layer, looked up by name."""
    b = TraceBuilder()
    b.kernel("k", ts=100, dur=10, launch_ts=90)
    path = b.write(tmp_path)
    act = cpu_activity.CpuActivity.of(load(path), "DataLoader")
    assert len(act.cumulative) == len(causes.LAYERS)


def test_hints_fit_the_trace():
    assert causes.hint("untraced", with_stack=True) != causes.hint("untraced")
    assert causes.hint("sync", with_stack=True) == causes.HINTS["sync"]
    assert verdict.advice_for("untraced", 0.5, True) == causes.hint("untraced", True)


def test_only_causes_with_a_culprit_reach_the_culprits_table():
    df = pl.DataFrame({"cause": list(causes.CAUSES)})
    assert df.filter(pl.col("cause").is_in(causes.WITH_CULPRIT))["cause"].to_list() == [
        c for c in causes.CAUSES if c != "kernel_spacing"
    ]
