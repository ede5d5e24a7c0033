"""Directory mode has the contract of one file: --fail-on, stray files, damaged ranks, the
same JSON on every executor, fsspec URLs, the Parquet cache, and the report with its heat map."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyzer.cli import cli


@pytest.fixture(scope="module")
def dlrm_dir(SHARED_TRACES: Path) -> Path:
    return SHARED_TRACES / "dlrm_v100_8ranks"


def _run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_fail_on_fires_on_the_directory_when_it_fires_on_a_rank(dlrm_dir):
    worker0 = next(dlrm_dir.glob("worker0_*"))
    ask = ["--fail-on", "capture_caveats", "--fail-on", "low_gpu_utilization"]
    alone = _run("summary", worker0, *ask, "--format", "json")
    assert alone.exit_code == 1
    res = _run("summary", dlrm_dir, *ask, "--format", "json")
    assert res.exit_code == 1, res.output
    assert "capture_caveats (ranks [0, 1" in str(res.exception)
    # A rule no rank fires (memory_near_capacity needs memory events) keeps exit 0.
    assert _run("summary", dlrm_dir, "--fail-on", "memory_near_capacity", "--format", "json").exit_code == 0


def test_summary_dir_shows_findings_per_rank_and_differs_from_gaps(dlrm_dir):
    s = _run("summary", dlrm_dir, "--format", "json")
    g = _run("gaps", dlrm_dir, "--format", "json")
    assert s.exit_code == g.exit_code == 0
    doc = json.loads(s.output[s.output.index("{") :])
    assert doc["command"] == "summary" and "implicit_sync" in doc["fired_rules"]
    assert all(p["findings"] for p in doc["per_rank"])
    assert "rank_executor" not in doc["thresholds"] and doc["thresholds"]["straggler_min_us"] == 1000.0


def test_stray_file_skipped_and_truncated_rank_marked_in_every_format(dlrm_dir, tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    for p in dlrm_dir.iterdir():
        shutil.copy(p, d / p.name)
    (d / "config.json").write_text('{"lr": 0.1}')
    victim = next(d.glob("worker3_*"))
    data = gzip.decompress(victim.read_bytes())
    (d / victim.name.removesuffix(".gz")).write_bytes(data[: len(data) * 6 // 10])  # cut mid-event
    victim.unlink()
    res = _run("summary", d, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output[res.output.index("{\n") :])
    assert any("config.json: skipped, not a trace" in w for w in doc["warnings"])
    assert doc["skipped_files"][0]["file"].endswith("config.json")
    rows = {r["rank"]: r for r in doc["ranks"]}
    assert len(rows) == 8 and rows[3]["damaged"] and rows[3]["warning"]
    assert not any(r["damaged"] for k, r in rows.items() if k != 3)
    for fmt in ("table", "markdown", "csv"):
        out = _run("summary", d, "--format", fmt, *(["--wide"] if fmt == "table" else [])).output
        assert "config.json: skipped" in out  # on stderr
        assert "true" in out.lower()  # the damaged column of the per-rank table


def test_dask_executor_gives_the_same_json_as_the_local_one(dlrm_dir):
    pytest.importorskip("dask.distributed")
    local = _run("gaps", dlrm_dir, "--format", "json")
    engine = _run("gaps", dlrm_dir, "--format", "json", "--executor", "dask", "--dask-address", "inprocess")
    assert local.exit_code == engine.exit_code == 0, engine.output
    a = json.loads(local.output[local.output.index("{\n") :])
    b = json.loads(engine.output[engine.output.index("{\n") :])
    assert a == b


def test_fsspec_memory_url_and_parquet_cache(dlrm_dir, tmp_path):
    fsspec = pytest.importorskip("fsspec")
    from traceanalyzer.jobs.executors import analyse_dir

    fs = fsspec.filesystem("memory")
    for p in dlrm_dir.iterdir():
        fs.pipe(f"/dlrm/{p.name}", p.read_bytes())
    _, local, _ = analyse_dir(str(dlrm_dir))
    _, remote, _ = analyse_dir("memory://dlrm")
    assert remote.ranks.drop("file").equals(local.ranks.drop("file"))

    from traceanalyzer.options import Options

    opts = Options().with_values({"rank_cache": str(tmp_path / "cache")})
    _, first, _ = analyse_dir(str(dlrm_dir), opts)
    assert len(list((tmp_path / "cache").iterdir())) == 8
    _, again, _ = analyse_dir(str(dlrm_dir), opts)  # every rank from the cache
    assert again.ranks.equals(first.ranks) and again.matched.instances.equals(first.matched.instances)
    assert again.matched.exposed.equals(local.matched.exposed)


def test_report_dir_writes_markdown_and_the_skew_map(dlrm_dir, tmp_path):
    res = _run("report", dlrm_dir, "-o", tmp_path / "rep")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Collectives matched across ranks" in md and "skew_map.png" in md
    assert (tmp_path / "rep" / "skew_map.png").read_bytes()[:4] == b"\x89PNG"


def test_report_fails_on_like_summary(dlrm_dir, tmp_path, SHARED_TRACES):
    # The directory: low_gpu_utilization fires on the ranks (busy 21-62 %, under 60 % on some),
    # so --fail-on gives 1 after report.md is written; a rule that never fires there gives 0.
    res = _run("report", dlrm_dir, "-o", tmp_path / "job", "--fail-on", "low_gpu_utilization")
    assert res.exit_code == 1 and (tmp_path / "job" / "report.md").exists()
    assert _run("report", dlrm_dir, "-o", tmp_path / "job2", "--fail-on", "memory_growth").exit_code == 0
    # One trace: workers0 fires data_loading.
    w0 = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    res = _run("report", w0, "-o", tmp_path / "one", "--fail-on", "data_loading", "--width", "400", "--height", "300")
    assert res.exit_code == 1 and (tmp_path / "one" / "report.md").exists()
