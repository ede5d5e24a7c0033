"""`load.cpus`: the one CPU count, and pinning a process with every thread it has already started."""

from __future__ import annotations

import os
import threading

import pytest

from traceanalyzer.load import cpus


def test_the_count_is_the_affinity_unless_overridden(monkeypatch):
    monkeypatch.delenv(cpus.WORKERS_ENV, raising=False)
    assert cpus.cpu_count() == len(os.sched_getaffinity(0)) == len(cpus.usable())
    monkeypatch.setenv(cpus.WORKERS_ENV, "3")
    assert cpus.cpu_count() == 3


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to see a pin")
def test_pin_moves_the_threads_started_already():
    before = cpus.usable()
    go, seen = threading.Event(), {}

    def waiter() -> None:
        seen["tid"] = threading.get_native_id()
        go.wait()

    t = threading.Thread(target=waiter)
    t.start()
    while "tid" not in seen:
        pass
    try:
        cpus.pin(before[:1])
        assert os.sched_getaffinity(0) == {before[0]}
        assert os.sched_getaffinity(seen["tid"]) == {before[0]}  # not only the calling thread
    finally:
        cpus.pin(before)
        go.set()
        t.join()
    assert cpus.usable() == before
