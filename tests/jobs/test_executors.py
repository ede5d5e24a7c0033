"""The local executor's worker processes: the environment they start with."""

from __future__ import annotations

import os

from traceanalyzer.jobs.executors import WORKER_ENV, run_ranks

NAMES = ["POLARS_MAX_THREADS", "TRACEANALYZER_WORKERS"]


def test_workers_start_with_one_polars_thread_and_one_decoding_thread(monkeypatch):
    # Polars sizes its pool at import, before any initializer runs: the variable must be in the
    # environment the worker starts with. `os.getenv` runs in each worker (pickled by name).
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    assert WORKER_ENV == {"TRACEANALYZER_WORKERS": "1", "POLARS_MAX_THREADS": "1"}
    assert run_ranks(NAMES * 2, os.getenv, jobs=2) == ["1", "1", "1", "1"]
    assert all(name not in os.environ for name in NAMES)  # this process's environment as it was


def test_a_thread_count_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    monkeypatch.delenv("TRACEANALYZER_WORKERS", raising=False)
    assert run_ranks(NAMES, os.getenv, jobs=2) == ["3", "1"]
    assert os.environ["POLARS_MAX_THREADS"] == "3" and "TRACEANALYZER_WORKERS" not in os.environ


def test_this_process_analyses_files_beside_its_workers_results_in_input_order():
    # `os.readlink("/proc/self")` is the pid of the process that runs it: with jobs=2, one worker
    # is spawned and this process takes files too (one worker start-up less).
    pids = run_ranks(["/proc/self"] * 6, os.readlink, jobs=2)
    assert len(set(pids)) == 2 and str(os.getpid()) in pids
    names = [f"d/{i}" for i in range(7)]
    assert run_ranks(names, os.path.basename, jobs=2) == [str(i) for i in range(7)]
