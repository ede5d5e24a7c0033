"""Every real trace: event counts per (cat, ph) and table sizes, counted independently with the
stdlib (gzip + json) and compared with what the loader built."""

from __future__ import annotations

import functools
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

_TRACES_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
TRACE_FILES = (
    sorted(str(p.relative_to(_TRACES_DIR)) for p in _TRACES_DIR.rglob("*.json*")) if _TRACES_DIR.is_dir() else []
)

# Which raw categories each table is made of (today's and the 2021 names).
TABLE_CATS = {
    "ops": {"cpu_op", "Operator", "user_annotation"},
    "runtime": {"cuda_runtime", "Runtime", "cuda_driver"},
    "gpu": {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"},
    "python": {"python_function"},
    "sync_markers": {"cuda_sync"},
    "gpu_annotations": {"gpu_user_annotation"},
    # launch -> kernel arrows (ac2g, async) are counted in event_counts only: no rows
    "flows": {"fwdbwd"},
}
GPU_KIND_CATS = {
    "kernel": {"kernel", "Kernel"},
    "memcpy": {"gpu_memcpy", "Memcpy"},
    "memset": {"gpu_memset", "Memset"},
}
ALL_TABLE_CATS = set().union(*TABLE_CATS.values())


@functools.cache
def expected(name: str) -> dict:
    """What the stdlib sees in the file; only small summaries are kept."""
    with open(_TRACES_DIR / name, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    events = json.loads(data)["traceEvents"]
    per_cat = Counter(e.get("cat") for e in events)
    steps = {
        e["name"]
        for e in events
        if e.get("cat") in TABLE_CATS["ops"]
        and isinstance(e.get("name"), str)
        and e["name"].startswith("ProfilerStep#")
        and e["name"][len("ProfilerStep#") :].isdigit()
    }
    return {
        "event_counts": Counter((e.get("cat"), e.get("ph")) for e in events),
        "tables": {table: sum(per_cat[c] for c in cats) for table, cats in TABLE_CATS.items()}
        | {
            # allocator events: cat cpu_instant_event today, no cat in 2021
            "memory": sum(1 for e in events if e.get("name") == "[memory]" and e.get("cat") not in ALL_TABLE_CATS),
            "steps": len(steps),
        },
        "gpu_kinds": {kind: sum(per_cat[c] for c in cats) for kind, cats in GPU_KIND_CATS.items()},
        "total": len(events),
    }


@pytest.mark.parametrize("name", TRACE_FILES)
def test_event_counts_match_stdlib(SHARED_TRACES, load_trace, name):
    trace = load_trace(SHARED_TRACES / name)
    want = expected(name)
    assert trace.event_counts == dict(want["event_counts"])
    assert sum(trace.event_counts.values()) == want["total"]


@pytest.mark.parametrize("name", TRACE_FILES)
def test_table_sizes_match_stdlib(SHARED_TRACES, load_trace, name):
    trace = load_trace(SHARED_TRACES / name)
    want = expected(name)
    got = {table: getattr(trace, table).height for table in want["tables"]}
    assert got == want["tables"]
    got_kinds = {kind: trace.gpu.filter(trace.gpu["kind"] == kind).height for kind in GPU_KIND_CATS}
    assert got_kinds == want["gpu_kinds"]


def test_every_shared_trace_is_covered(SHARED_TRACES):
    # the parametrisation above must not silently miss the multi-rank set
    assert sum(name.startswith("dlrm_v100_8ranks/") for name in TRACE_FILES) == 8
    assert len(TRACE_FILES) >= 20
