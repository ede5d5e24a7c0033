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


def test_small_ranks_run_on_the_in_memory_engine_with_the_same_result(SHARED_TRACES):
    import dataclasses

    import polars as pl

    from traceanalyzer import load
    from traceanalyzer.jobs import executors, rank_io
    from traceanalyzer.jobs.multirank import rank_result

    with executors._engine_for(executors.IN_MEMORY_ENGINE_BYTES - 1):
        assert pl.Config.state().get("POLARS_ENGINE_AFFINITY") == "in-memory"
    with pl.Config(engine_affinity="streaming"), executors._engine_for(executors.IN_MEMORY_ENGINE_BYTES):
        assert pl.Config.state().get("POLARS_ENGINE_AFFINITY") == "streaming"  # a big rank: as configured
    # The engine changes the cost of a lazy query, never its answer: the unit (in-memory, the file
    # is 0.9 MB of JSON) against the same rank computed on the streaming engine.
    path = str(next((SHARED_TRACES / "dlrm_v100_8ranks").glob("worker7_*")))
    unit = executors.analyse_rank_file(path)
    comm, _ = rank_io.comm_args(executors._inflate(rank_io.read_bytes(path), path))
    with pl.Config(engine_affinity="streaming"):
        streamed = rank_result(load(path), None, comm)
    for f in dataclasses.fields(unit):
        a, b = getattr(unit, f.name), getattr(streamed, f.name)
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b, f.name
