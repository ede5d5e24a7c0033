"""One trace, one story: a number that two outputs print under one name is the same number.

On every shared trace: the GPU idle `gaps` blames on syncs equals the syncs' bubbles plus their
idle while blocked and the `sync_stalls` evidence; the report shows what the commands show with
the same options; `diff` of a trace against itself changes nothing; a rule fires exactly when
its evidence crosses its threshold. Hypothesis checks the first property on random traces.
"""

from __future__ import annotations

import dataclasses
import importlib
import json

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceanalyzer as ta
from tests.conftest import SHARED_TRACES_DIR
from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli
from traceanalyzer.cli.incident import build_report
from traceanalyzer.findings import RULES_BY_ID
from traceanalyzer.jobs.diff import analyse_diff
from traceanalyzer.options import GROUP_OF, GROUPS, Options

ALL_TRACES = (
    sorted(p for p in SHARED_TRACES_DIR.rglob("*") if p.is_file() and ".json" in p.name)
    if SHARED_TRACES_DIR.is_dir()
    else []
)
GPU_TRACES = [p for p in ALL_TRACES if not p.name.startswith("edge_")]
_SESSIONS: dict[str, ta.Session] = {}


def _session(path) -> ta.Session:
    if str(path) not in _SESSIONS:
        _SESSIONS[str(path)] = ta.Session.open(path)
    return _SESSIONS[str(path)]


def test_option_names_are_unique_across_the_bundle():
    names = [f.name for cls in GROUPS.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) == len(GROUP_OF)


@pytest.mark.parametrize("path", ALL_TRACES, ids=[p.name for p in ALL_TRACES])
def test_sync_idle_is_one_number(path):
    ses = _session(path)
    if not ses.trace.has_gpu_work:
        assert ses.gaps.idle_us("sync") == 0.0 and ses.syncs.sync_idle_us == 0.0
        return
    gaps_sync = ses.gaps.idle_us("sync")
    s = ses.syncs
    table = s.syncs.filter(pl.col("kind") != "gpu_wait")
    from_table = float(table["bubble_us"].sum() + table["idle_while_blocked_us"].sum()) if table.height else 0.0
    assert gaps_sync == pytest.approx(s.sync_idle_us, abs=1.0)
    assert gaps_sync == pytest.approx(from_table, abs=1.0)
    # The rule reads the same number: forced to fire (threshold 0), its evidence is gaps' figure.
    forced = ta.Session(ses.trace, Options().with_values({"sync_stall_share": 0.0, "min_finding_share": 0.0}))
    found = [f for f in forced.findings_of((RULES_BY_ID["sync_stalls"],))]
    if s.note:  # no synchronising call at all
        assert not found and gaps_sync == 0.0
    else:
        assert found[0].evidence["sync_idle_us"] == pytest.approx(gaps_sync, abs=1.0)
        assert found[0].evidence["window_us"] == pytest.approx(ses.gaps.window_us)


@pytest.mark.parametrize("path", GPU_TRACES, ids=[p.name for p in GPU_TRACES])
def test_diff_of_a_trace_against_itself_changes_nothing(path):
    ses = _session(path)
    r = analyse_diff(ses, ses)
    assert r.verdict == "within noise" and r.change_pct == 0
    assert (r.summary["delta"].drop_nulls().abs() < 1e-9).all()
    assert not r.findings_appeared and not r.findings_resolved


def test_a_trace_without_profiler_step_counts_as_one_step(SHARED_TRACES):
    # a100_simple_add_syncs has no ProfilerStep; its raw JSON holds 19 memcpys/memsets and 37
    # synchronising calls (cudaMemcpy and cudaStreamSynchronize, counted by the syncs analysis).
    ses = _session(SHARED_TRACES / "a100_simple_add_syncs.json.gz")
    assert ses.trace.steps.is_empty()
    m = dict(zip(*analyse_diff(ses, ses).summary.select("metric", "before").to_dict(as_series=False).values()))
    assert m["step_count"] == 1
    assert m["copies_per_step"] == 19 and m["syncs_per_step"] == 37
    assert ses.copies.copies.height == 19 and ses.syncs.per_step["syncs"].to_list() == [37]


def test_gb10_counts_per_detected_step(SHARED_TRACES):
    # No ProfilerStep: its 10 `execute_context_…` ranges are the steps, for diff too.
    ses = _session(SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz")
    m = dict(zip(*analyse_diff(ses, ses).summary.select("metric", "before").to_dict(as_series=False).values()))
    assert m["step_count"] == 10
    in_steps = ses.copies.copies.filter(pl.col("step").is_not_null()).height
    assert m["copies_per_step"] == pytest.approx(in_steps / 10)


@pytest.mark.parametrize("name", ["b200_eager_rank0.json.gz"])
def test_traces_without_profiler_step_count_every_copy_and_sync(SHARED_TRACES, name):
    ses = _session(SHARED_TRACES / name)
    assert ses.trace.steps.is_empty() and ses.step_source == "auto: none found, one step"
    m = dict(zip(*analyse_diff(ses, ses).summary.select("metric", "before").to_dict(as_series=False).values()))
    assert m["step_count"] == 1 and m["copies_per_step"] == ses.copies.copies.height
    stalls = ses.syncs.syncs.filter(pl.col("kind") != "gpu_wait").height if not ses.syncs.note else 0
    assert m["syncs_per_step"] == stalls


def _md_table_after(markdown: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after `## heading`, as rows of cell text."""
    lines = markdown.split(f"## {heading}\n", 1)[1].splitlines()
    rows = [ln for ln in lines if ln.startswith("|")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split(" | ")])
    head, body = rows[0], rows[2:]
    return [dict(zip(head, r)) for r in body]


def test_report_shows_what_the_commands_show_with_the_same_options(SHARED_TRACES, tmp_path):
    trace = str(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    flags = ["--launch-latency", "50", "--min-gap", "5"]
    runner = CliRunner()
    gaps = json.loads(runner.invoke(cli, ["gaps", trace, *flags, "--format", "json"]).stdout)
    syncs = json.loads(runner.invoke(cli, ["syncs", trace, "--launch-latency", "50", "--format", "json"]).stdout)
    summary = json.loads(runner.invoke(cli, ["summary", trace, *flags, "--format", "json"]).stdout)
    out = tmp_path / "rep"
    result = runner.invoke(cli, ["report", trace, *flags, "-o", str(out)])
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    idle = {r["cause"]: r["idle_us"] for r in _md_table_after(md, "Idle by cause")}
    assert idle == {c: f"{v:,.0f}" for c, v in gaps["summary"]["idle_by_cause"].items()}
    assert f"{syncs['summary']['sync_idle_us']:,.0f} µs" in md
    # The findings are the summary's, with the same options.
    for f in summary["findings"]:
        assert f"**\\[{f['severity']}\\] {f['rule']}**" in md  # brackets escaped: no link reference
    assert summary["thresholds"]["launch_latency_us"] == 50 and gaps["thresholds"]["min_gap_us"] == 5


def test_report_computes_each_analysis_once(SHARED_TRACES, monkeypatch, tmp_path):
    from traceanalyzer import session as session_module

    calls: dict[str, int] = {}

    def counting(name, fn):
        def wrapped(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return fn(*a, **k)

        return wrapped

    # Patched where they are defined (the Session imports some inside its properties, reading
    # the module's attribute at call time) and in the Session's module where it imports them.
    for module, name in (
        ("gap_causes", "classify_gaps"),
        ("gaps", "analyse_gaps"),
        ("syncs", "analyse_syncs"),
        ("copies", "analyse_copies"),
        ("stages", "analyse_stages"),
        ("memory", "analyse_memory"),
    ):
        home = importlib.import_module(f"traceanalyzer.analyses.{module}")
        wrapped = counting(name, getattr(home, name))
        monkeypatch.setattr(home, name, wrapped)
        if hasattr(session_module, name):
            monkeypatch.setattr(session_module, name, wrapped)
    ses = ta.Session(ta.load(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"))
    build_report(ses, width=600, height=400)
    assert calls == {name: 1 for name in calls} and {"classify_gaps", "analyse_stages"} <= set(calls)


# -- a rule fires exactly when its evidence crosses its threshold ------------------------------

# rule -> (evidence key, threshold, "above" | "below")
SINGLE = {
    "sync_stalls": ("share", "sync_stall_share", "above"),
    "data_loading": ("share", "data_loading_share", "above"),
    "no_tensor_cores": ("share", "no_tensor_cores_share", "above"),
    "low_gpu_utilization": ("busy_share", "low_gpu_utilization", "below"),
}


@pytest.mark.parametrize("path", GPU_TRACES, ids=[p.name for p in GPU_TRACES])
def test_rules_fire_exactly_at_their_thresholds(path):
    ses = _session(path)
    for rule_id, (key, threshold, side) in SINGLE.items():
        rule = RULES_BY_ID[rule_id]
        # Force the rule to fire to read its evidence, then put the threshold on either side.
        forced_value = 0.0 if side == "above" else 1.01
        forced = rule.run(ta.Session(ses.trace, Options().with_values({threshold: forced_value})))
        if not forced:
            continue  # nothing to measure on this trace (no GPU work, no kernels, no stages)
        value = forced[0].evidence[key]
        default = ses.options.value(threshold)
        # Every finding, material or not: the materiality floor is tested on its own.
        fires = {f.rule for f in ta.Session(ses.trace, Options().with_values({"min_finding_share": 0.0})).findings}
        if side == "above":
            assert (rule_id in fires) == (value >= default), (rule_id, value, default)
        else:
            assert (rule_id in fires) == (value < default), (rule_id, value, default)


def test_pageable_copies_fires_where_copies_finds_blocking_pageable_copies(SHARED_TRACES):
    ses = _session(SHARED_TRACES / "a100_multistream_syncs.json.gz")
    pageable = ses.copies.copies.filter(pl.col("host_memory") == "pageable")
    blocked = float(pageable["blocked_us"].sum())
    assert pageable.height == 75 and blocked == pytest.approx(758_700, rel=1e-3)
    f = next(f for f in ses.findings if f.rule == "pageable_copies")
    assert f.evidence["blocked_us"] == pytest.approx(blocked) and f.evidence["copies"] == 75
    above = {"copy_min_finding_us": blocked + 1, "pageable_copy_bytes": int(pageable["bytes"].sum()) + 1}
    quiet = ta.Session(ses.trace, Options().with_values(above))
    assert pageable["duration_us"].sum() < blocked + 1
    assert not quiet.findings_of((RULES_BY_ID["pageable_copies"],))


# -- the same on random traces ------------------------------------------------------------------

kernel = st.tuples(st.integers(0, 5_000), st.integers(1, 300), st.integers(0, 200))  # start, dur, launch lead
sync = st.tuples(st.integers(0, 5_000), st.integers(1, 800))  # cudaStreamSynchronize start, dur
loader = st.tuples(st.integers(0, 5_000), st.integers(1, 800))  # DataLoader range start, dur


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(kernel, min_size=1, max_size=12), st.lists(sync, max_size=4), st.lists(loader, max_size=3), st.booleans()
)
def test_sync_idle_reconciles_on_random_traces(tmp_path_factory, kernels, syncs, loaders, with_steps):
    b = TraceBuilder()
    if with_steps:
        b.step(1, 0, 2_500).step(2, 2_500, 3_000)
    for ts, dur in loaders:
        b.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur)
    for ts, dur in syncs:
        b.runtime("cudaStreamSynchronize", ts, dur)
    for ts, dur, lead in kernels:
        b.kernel("k", ts=ts + 300, dur=dur, launch_ts=ts + 300 - lead)
    ses = ta.Session(ta.load(b.write(tmp_path_factory.mktemp("r"))))
    gaps_sync = ses.gaps.idle_us("sync")
    assert gaps_sync == pytest.approx(ses.syncs.sync_idle_us, abs=1e-6)
    assert sum(ses.gaps.idle_us(c) for c in ses.gaps.idle_by_cause["cause"]) == pytest.approx(
        ses.gaps.idle_us(), abs=1e-6
    )
    r = analyse_diff(ses, ses)
    assert (r.summary["delta"].drop_nulls().abs() < 1e-9).all()


def test_exposed_communication_is_one_number_per_rank_and_step(SHARED_TRACES):
    # The single-file figures (summary/gaps JSON `communication`) are the directory mode's per
    # rank: the same collective kernels, the same compute union, the same step windows.
    from traceanalyzer.jobs.executors import analyse_dir
    from traceanalyzer.jobs.multirank import rank_from_name

    folder = SHARED_TRACES / "mi300x_ddp_resnet_4ranks"
    job = analyse_dir(str(folder))[1].matched.exposed
    for path in sorted(folder.iterdir()):
        ses = ta.Session.open(path)
        mine = ses.communication.per_step.select("step", "comm_us", "exposed_us")
        rank = ses.trace.meta.rank if ses.trace.meta.rank is not None else rank_from_name(path.name)
        theirs = job.filter(pl.col("rank") == rank).select("step", "comm_us", "exposed_us")
        assert mine.height == 3 and mine.equals(theirs)
