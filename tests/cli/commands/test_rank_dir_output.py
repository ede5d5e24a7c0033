"""Directory mode that reads like one job (issue #24): a finding fired on several ranks is one
row with its ranks, `gaps DIR` lists the gaps per rank, `--fail-on` works on every command that
takes a directory, and `report DIR --html` writes the HTML page."""

from __future__ import annotations

import json

from click.testing import CliRunner

from traceanalyzer.cli import cli
from traceanalyzer.cli.main import main

DLRM = "dlrm_v100_8ranks"


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "100"})
    assert r.exit_code == 0, (r.output, r.exception)
    return r.stdout


def test_summary_dir_says_a_finding_once_with_its_ranks(SHARED_TRACES):
    path = SHARED_TRACES / DLRM
    doc = json.loads(_run("summary", path, "--format", "json"))
    fired = [f for f in doc["findings"] if f["rule"] == "exposed_communication"]
    ranks = sorted(f["evidence"]["rank"] for f in fired)
    assert len(fired) > 1  # it fires on several ranks of this job
    out = _run("summary", path)
    part = out.split("== Findings across ranks")[1].split("\n== ")[0]
    assert part.count("exposed_communication") == 1 and part.count("overlap communication") == 1
    assert f"(ranks {', '.join(map(str, ranks))})" in part
    worst = max(fired, key=lambda f: f["evidence"]["share"])
    assert f"worst rank {worst['evidence']['rank']}:" in part


def test_gaps_dir_lists_gaps_per_rank(SHARED_TRACES):
    path = SHARED_TRACES / DLRM
    doc = json.loads(_run("gaps", path, "--top", "3", "--format", "json"))
    rows = doc["gaps_per_rank"]
    by_rank: dict[int, list[float]] = {}
    for r in rows:
        by_rank.setdefault(r["rank"], []).append(r["duration_us"])
    assert sorted(by_rank) == list(range(8))
    assert all(len(v) <= 3 and v == sorted(v, reverse=True) and min(v) >= 100 for v in by_rank.values())
    # The same file read alone gives the same longest gap.
    (w0,) = sorted(path.glob("worker0_*"))
    alone = json.loads(_run("gaps", w0, "--format", "json"))["gaps"]
    assert abs(by_rank[0][0] - alone[0]["duration_us"]) < 0.01
    out = _run("gaps", path, "--top", "3")
    assert "== Gaps of at least 100 µs per rank" in out and out.split("== Gaps of")[1].splitlines()[1].startswith(
        "rank"
    )


def test_fail_on_on_every_directory_command(SHARED_TRACES, tmp_path):
    path = str(SHARED_TRACES / DLRM)
    for args in (["gaps", path], ["summary", path], ["report", path, "-o", str(tmp_path / "r")]):
        assert main([*args, "--fail-on", "exposed_communication"]) == 1, args


def test_report_dir_writes_html_with_the_skew_map(SHARED_TRACES, tmp_path):
    _run("report", SHARED_TRACES / DLRM, "-o", tmp_path, "--html")
    page = (tmp_path / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 1 and "Arrival skew across ranks" in page
    assert "![" in (tmp_path / "report.md").read_text() and (tmp_path / "skew_map.png").exists()


def test_gaps_dir_json_is_complete_without_top(SHARED_TRACES):
    # Without --top the JSON is complete: each rank's culprits are all of them, as in the JSON of
    # `gaps` on that rank's file (dlrm rank files have 31-42 culprits; cut at 20 before), while
    # the per-rank gap listing keeps its 20 a rank.
    path = SHARED_TRACES / DLRM
    doc = json.loads(_run("gaps", path, "--format", "json", "--no-cache"))
    rank = doc["per_rank"][0]
    single = json.loads(_run("gaps", rank["file"], "--format", "json", "--no-cache"))
    assert len(rank["culprits"]) == len(single["summary"]["culprits"]) > 20
    listed = [g for g in doc["gaps_per_rank"] if g["rank"] == rank["rank"]]
    assert len(listed) == len(single["gaps"])  # 13 gaps of at least 100 µs: under the 20 a rank
