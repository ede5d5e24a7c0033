"""Multi-rank analysis on the 8-rank DLRM job (one step per rank) and on inline traces.

Expected numbers come from the raw JSON (stdlib json) or from analysing each file alone."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer import load
from traceanalyzer.analyses.gaps import analyse_gaps
from traceanalyzer.jobs.executors import analyse_dir, rank_files
from traceanalyzer.jobs.multirank import MultiRankOptions, cross_rank, rank_result


@pytest.fixture(scope="module")
def dlrm_dir(SHARED_TRACES: Path) -> Path:
    return SHARED_TRACES / "dlrm_v100_8ranks"


@pytest.fixture(scope="module")
def dlrm(dlrm_dir):
    results, mr, _ = analyse_dir(str(dlrm_dir), jobs=2)
    return results, mr


def _raw(path: Path) -> list[dict]:
    return json.load(gzip.open(path))["traceEvents"]


def _step_window_us(events: list[dict]) -> float:
    """GPU-extended ProfilerStep window, as the TensorBoard plugin defines it: from the step's
    start to the later of its end and the end of the last GPU activity whose runtime call
    started inside it (one step per file here)."""
    step = next(e for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    s, e_ = step["ts"], step["ts"] + step["dur"]
    launched = {
        ev["args"]["correlation"]
        for ev in events
        if ev.get("cat") == "cuda_runtime" and s <= ev["ts"] < e_ and "correlation" in ev.get("args", {})
    }
    gpu_end = max(
        (
            ev["ts"] + ev["dur"]
            for ev in events
            if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and ev["args"].get("correlation") in launched
        ),
        default=e_,
    )
    return max(e_, gpu_end) - s


def test_one_row_per_rank_equal_to_each_file_alone(dlrm, dlrm_dir):
    results, mr = dlrm
    files = [Path(p) for p in rank_files(dlrm_dir)]
    assert mr.ranks.height == 8 and mr.ranks["rank"].to_list() == list(range(8))
    for f in files:
        rank = json.load(gzip.open(f))["distributedInfo"]["rank"]
        row = mr.ranks.filter(mr.ranks["rank"] == rank).row(0, named=True)
        alone = analyse_gaps(load(f))
        assert row["file"] == f.name
        assert row["gpu_busy_us"] == alone.devices["busy_us"].sum()
        assert row["idle_us"] == alone.devices["idle_us"].sum()
        for c in alone.idle_by_cause.iter_rows(named=True):
            assert row[f"idle_{c['cause']}_us"] == c["idle_us"]
        assert row["step_time_us"] == pytest.approx(_step_window_us(_raw(f)))


def test_longest_step_rank_named_with_its_idle_by_cause(dlrm, dlrm_dir):
    _, mr = dlrm
    windows = {
        json.load(gzip.open(f))["distributedInfo"]["rank"]: _step_window_us(_raw(f))
        for f in [Path(p) for p in rank_files(dlrm_dir)]
    }
    longest = max(windows, key=windows.get)
    assert longest == 1  # 19,901 µs: rank 1 starts its step first and ends with the others
    assert mr.longest_rank == longest
    f = next(p for p in [Path(p) for p in rank_files(dlrm_dir)] if p.name.startswith(f"worker{longest}_"))
    assert mr.longest_idle_by_cause.equals(analyse_gaps(load(f)).idle_by_cause)


def test_straggler_is_the_last_rank_into_the_first_collective(dlrm, dlrm_dir):
    _, mr = dlrm
    assert mr.clocks_aligned  # one host: the step windows overlap
    first = {}
    for f in [Path(p) for p in rank_files(dlrm_dir)]:
        events = _raw(f)
        sendrecv = sorted(
            e["ts"] for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_SendRecv")
        )
        first[json.load(gzip.open(f))["distributedInfo"]["rank"]] = sendrecv[0]
    median = statistics.median(first.values())
    last = max(first, key=first.get)
    top = mr.stragglers.row(0, named=True)
    assert (top["rank"], last) == (7, 7)
    assert top["what"].startswith("collective ncclKernel_SendRecv") and top["what"].endswith("#0")
    # stdlib json reads epoch-µs floats to float64 (0.25 µs resolution); the loader keeps ns digits
    assert top["late_by_us"] == pytest.approx(first[last] - median, abs=0.5)
    assert top["cause"] is not None


def _rank_trace(tmp_path: Path, name: str, t0: float, coll_at: float, rank: int | None) -> Path:
    """One step of 10 ms: a compute kernel at +0..1 ms, then a collective at `coll_at` µs."""
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": 1, "ts": t0, "dur": 10000},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": t0 + 10,
            "dur": 5,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": t0 + 20,
            "dur": 980,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": t0 + coll_at - 10,
            "dur": 5,
            "args": {"correlation": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
            "pid": 0,
            "tid": 8,
            "ts": t0 + coll_at,
            "dur": 500,
            "args": {"device": 0, "stream": 8, "correlation": 2},
        },
    ]
    doc = {"schemaVersion": 1, "traceEvents": ev}
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2, "backend": "nccl"}
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def test_unaligned_clocks_are_aligned_on_step_start_and_said(tmp_path):
    a = _rank_trace(tmp_path, "rank0.json", 1_000_000.0, 2000.0, 0)
    b = _rank_trace(tmp_path, "rank1.json", 9_000_000.0, 5000.0, 1)  # another host: 8 s apart
    opts = MultiRankOptions(straggler_min_us=1000.0)
    mr = cross_rank([rank_result(load(p), options=opts) for p in (a, b)], opts)
    assert not mr.clocks_aligned and "NOT aligned" in mr.alignment_note
    # After aligning the step starts, rank 1 reaches the collective 3,000 µs after rank 0: the
    # median of two is their mean, so rank 1 is 1,500 µs late; its GPU sat idle from the gemm's
    # end (+1,000) to the collective (+5,000), so the cause is an idle gap, not gpu_busy.
    top = mr.stragglers.row(0, named=True)
    assert (top["rank"], top["late_by_us"]) == (1, 1500.0)
    assert top["cause"] != "gpu_busy" and top["cause_us"] == 1500.0
    assert mr.ranks["step_start_late_us"].to_list() == [None, None]
    # The tables behind those views are integer ns: 1,500 µs late is 1,500,000 ns.
    ns = mr.stragglers_ns.row(0, named=True)
    assert (ns["late_by_ns"], ns["cause_ns"]) == (1_500_000, 1_500_000)
    assert mr.stragglers_ns.schema["late_by_ns"] == pl.Int64
    # Collectives on the aligned clock: rank 0's at 1,000,000 + 2,000 µs (its own clock, not
    # shifted), rank 1's 3,000 µs later; shown from the earliest, each 500 µs long.
    c = mr.collectives_ns.sort("rank")
    assert mr.origin_ns == 1_002_000_000 and c["start_ns"].to_list() == [1_002_000_000, 1_005_000_000]
    assert c["late_by_ns"].to_list() == [-1_500_000, 1_500_000] and c["dur_ns"].to_list() == [500_000] * 2
    assert mr.collectives.sort("rank")["start_us"].to_list() == [0.0, 3000.0]
    # Each rank's window and busy time are integer sums; the view shows them in µs.
    assert mr.ranks_ns.schema["window_ns"] == pl.Int64
    assert (mr.ranks["window_us"] * 1000).to_list() == mr.ranks_ns["window_ns"].cast(pl.Float64).to_list()


def test_rank_cache_of_another_layout_is_a_miss(tmp_path):
    # A rank cached before its gaps tables were ns (`devices.parquet`, no `devices_ns`) is
    # computed again, never an error.
    from traceanalyzer.jobs import rank_io
    from traceanalyzer.jobs.multirank import RankResult

    p = _rank_trace(tmp_path, "rank0.json", 1_000_000.0, 2000.0, 0)
    r = rank_result(load(p))
    rank_io.save(r, str(tmp_path / "new"))
    again = rank_io.load_cached(RankResult, str(tmp_path / "new"), str(p))
    assert again.devices_ns.equals(r.devices_ns) and again.devices.equals(r.devices)
    old = tmp_path / "old"
    (tmp_path / "new").rename(old)
    (old / "devices_ns.parquet").rename(old / "devices.parquet")
    assert rank_io.load_cached(RankResult, str(old), str(p)) is None


def test_rank_taken_from_file_name_without_distributed_info(tmp_path):
    p = _rank_trace(tmp_path, "worker5.pt.trace.json", 1000.0, 2000.0, None)
    r = rank_result(load(p))
    assert (r.rank, r.rank_source) == (5, "file name")


def test_gaps_command_accepts_a_directory(dlrm_dir):
    # CLI path for a directory (commands/ranks.py): JSON with one row per rank.
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    res = CliRunner().invoke(cli, ["gaps", str(dlrm_dir), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    assert doc["longest_rank"] == 1 and doc["clocks_aligned"] is True
    assert doc["thresholds"]["straggler_min_us"] == 1000.0 and "tool_version" in doc


def test_directory_summary_carries_each_ranks_health_and_world_size(tmp_path):
    # Two of a 128-rank job; rank 1's collective starts 100 s before its own launch call (the
    # clocks disagree: an error), rank 0 is clean but has one step (few_steps, info).
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    d = tmp_path / "job"
    d.mkdir()
    for rank in (0, 1):
        p = _rank_trace(d, f"rank{rank}.json", 1_000_000.0, 2000.0, rank)
        doc = json.loads(p.read_text())
        doc["distributedInfo"]["world_size"] = 128
        if rank == 1:
            doc["traceEvents"][4]["ts"] = 1_000_000.0 - 100_000_000
        p.write_text(json.dumps(doc))
    res = CliRunner().invoke(cli, ["summary", str(d), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["headline"].startswith("2 of 128 ranks (world_size 128")
    assert "health errors on rank(s) 1 (clock_skew)" in doc["headline"]
    health = [(h["rank"], h["check"], h["severity"]) for h in doc["health"]]
    assert health[0] == (1, "clock_skew", "error")
    assert [s for _, _, s in health] == sorted((s for _, _, s in health), key=["error", "warning", "info"].index)
    assert {(0, "few_steps", "info")} <= set(health)
    assert doc["ranks_held"] == 2 and doc["world_size"] == 128
    assert [r["health"] for r in doc["ranks"]][1].startswith("clock_skew (error)")
