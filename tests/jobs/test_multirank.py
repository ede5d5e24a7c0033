"""Multi-rank analysis on the 8-rank DLRM job (one step per rank) and on inline traces.

Expected numbers come from the raw JSON (stdlib json) or from analysing each file alone."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

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
