"""How many processes a rank directory runs on, and when this process runs polars on one thread
(`jobs.plan`, read by the executor and, before polars loads, by the command line)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

from traceanalyzer.cli.main import rank_dir_alone, rank_dir_polars_threads
from traceanalyzer.jobs import plan
from traceanalyzer.jobs.executors import run_ranks


def _files(tmp_path, sizes: list[int], gz: bool = False) -> list[str]:
    out = []
    for i, n in enumerate(sizes):
        p = tmp_path / f"rank{i}.json{'.gz' if gz else ''}"
        body = b"x" * n
        p.write_bytes(gzip.compress(body) if gz else body)
        out.append(str(p))
    return out


def test_json_size_is_the_file_size_or_the_gzip_trailer(tmp_path, SHARED_TRACES):
    plain, packed = _files(tmp_path, [1234])[0], _files(tmp_path / ".." / tmp_path.name, [1234], gz=True)[0]
    assert plan.json_bytes(plain) == 1234 and plan.json_bytes(packed) == 1234
    # dlrm rank 0: `zcat worker0_step_12.1694128201545.pt.trace.json.gz | wc -c` is 903,140 bytes
    rank0 = SHARED_TRACES / "dlrm_v100_8ranks" / "worker0_step_12.1694128201545.pt.trace.json.gz"
    assert plan.json_bytes(str(rank0)) == 903_140
    assert plan.json_bytes("memory://x/rank0.json") is None
    assert plan.json_bytes(str(tmp_path / "missing.json")) is None


def test_one_process_more_per_min_bytes_up_to_one_per_cpu_and_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "4")  # four CPUs, whatever this machine has
    small = _files(tmp_path, [1000] * 8)  # 8,000 bytes of JSON in all
    assert plan.processes(small) == 4  # no minimum: one per CPU
    assert plan.processes(small, min_bytes=16_000) == 1  # 8,000 / 16,000, rounded up
    assert plan.processes(small, min_bytes=3_000) == 3  # 8,000 / 3,000 = 2.7 -> 3
    assert plan.processes(small, min_bytes=1_000) == 4  # 8 by the bytes, 4 CPUs
    assert plan.processes(small[:2], min_bytes=1) == 2  # one per file at most
    assert plan.processes(small, jobs=2, min_bytes=16_000) == 2  # --jobs wins
    assert plan.processes([*small, "memory://x/r.json"], min_bytes=16_000) == 4  # a size unknown: every CPU
    assert plan.min_bytes(16) == 16_000_000


def test_the_executor_runs_small_ranks_in_this_process_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "2")
    files = _files(tmp_path, [1000] * 6)
    assert set(run_ranks(files, _pid, min_bytes=16_000)) == {os.getpid()}  # 6,000 bytes: no worker
    assert len(set(run_ranks(files, _pid, min_bytes=1_000))) == 2


def _pid(_path: str) -> int:
    return os.getpid()


def test_one_polars_thread_unless_alone_with_a_large_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "2")
    small = _files(tmp_path, [1000] * 2)
    assert plan.one_polars_thread(small)  # two processes
    assert plan.one_polars_thread(small, jobs=1)  # alone, small ranks
    monkeypatch.setattr(plan, "THREADED_RANK_BYTES", 1000)
    assert not plan.one_polars_thread(small, jobs=1)  # alone with ranks of the threshold's size
    assert plan.one_polars_thread(small, jobs=2)


def test_the_command_line_names_a_rank_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "2")
    d = tmp_path / "job"
    d.mkdir()
    _files(d, [1000] * 3)
    trace = _files(tmp_path, [10])[0]
    assert rank_dir_polars_threads(["summary", str(d)]) == "1"
    assert rank_dir_polars_threads(["--no-cache", "gaps", "--top", "3", str(d), "--jobs=1"]) == "1"
    assert rank_dir_polars_threads(["report", trace, "-o", str(d)]) is None  # -o names a folder to write
    assert rank_dir_polars_threads(["summary", trace, "--cache-dir", str(d)]) is None
    assert rank_dir_polars_threads(["ops", str(d)]) is None  # no directory mode
    assert rank_dir_polars_threads(["summary", str(d), "--jobs", "x"]) is None  # click reports it


def _entry_point(report: str, *args: str) -> str:
    """What `report` (a Python statement) prints when the console entry point runs `traceanalyzer
    ARGS` in a fresh interpreter whose POLARS_MAX_THREADS is unset, the command itself replaced by it."""
    code = (
        "import importlib, os, sys; m = importlib.import_module('traceanalyzer.cli.main'); "
        f"m.main = lambda: {report} or 0; sys.argv = ['traceanalyzer', *sys.argv[1:]]; m.run()"
    )
    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env).stdout


def test_the_command_runs_polars_on_one_thread_for_a_rank_directory(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    _files(d, [1000] * 2)
    seen = "print(os.environ.get('POLARS_MAX_THREADS'), 'polars' in sys.modules)"
    assert _entry_point(seen, "summary", str(d)) == "1 False\n"  # set before polars loads
    assert _entry_point(seen, "summary", str(d / "rank0.json")) == "None False\n"  # one trace: polars' own pool


def test_a_small_directory_summary_imports_neither_numpy_nor_multiprocessing(SHARED_TRACES, tmp_path):
    """numpy (the critical path's) and a worker pool cost ~0.1 CPU-s each for two small ranks
    that run in this process alone."""
    d = tmp_path / "job"
    d.mkdir()
    for f in sorted((SHARED_TRACES / "dlrm_v100_8ranks").iterdir())[:2]:
        shutil.copy(f, d / f.name)
    out = tmp_path / "s.json"
    code = (
        "import atexit, importlib, sys; m = importlib.import_module('traceanalyzer.cli.main'); sys.argv = ['traceanalyzer', "
        "'summary', sys.argv[1], '--format', 'json', '-o', sys.argv[2]]\n"
        # run() ends the process (cli.main.end), running the atexit handlers first
        "atexit.register(lambda: print(sorted(n for n in sys.modules if n.split('.')[0] in ('numpy', 'multiprocessing')), "
        "file=sys.stderr, flush=True))\n"
        "m.run()\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(d), str(out)], capture_output=True, text=True, check=True)
    assert run.stderr.strip().splitlines()[-1] == "[]"
    assert json.loads(out.read_text())["ranks_held"] == 2


def test_a_directory_analysed_alone_on_one_polars_thread_runs_on_one_cpu(tmp_path, monkeypatch):
    """polars hands each query to its pool's thread, which then spins (`sched_yield`): on a second
    CPU that costs as much as the queries of small ranks, so a process left alone pins itself."""
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "2")
    d = tmp_path / "job"
    d.mkdir()
    _files(d, [1000] * 3)  # 3 kB of JSON: one process (one per 16 MB), every rank small
    assert rank_dir_alone(["summary", str(d)])
    assert not rank_dir_alone(["summary", str(d), "--jobs", "2"])  # workers: the driver keeps its CPUs
    assert not rank_dir_alone(["summary", str(d / "rank0.json")])  # one trace: not a directory
    cpus = "print(len(os.sched_getaffinity(0)))"
    assert int(_entry_point(cpus, "summary", str(d))) == 1
    assert int(_entry_point(cpus, "summary", str(d), "--jobs", "2")) == len(os.sched_getaffinity(0))
