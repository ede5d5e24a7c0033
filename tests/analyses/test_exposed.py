"""Exposed communication (`collectives.exposed_segments`) on the shared multi-rank sets.

Two references: the exposed time of every collective worked out here from the raw JSON (each
NCCL/RCCL kernel minus the union of the other kernels on its device, in plain Python), and the
segments of the former `join_where` implementation (every collective x compute-union pair),
kept below as the oracle, which the sweep must reproduce row for row."""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest

from traceanalyzer.analyses import collectives, intervals
from traceanalyzer.load.loader import load
from traceanalyzer.options import Options

SETS = ("mi300x_ddp_resnet_4ranks", "dlrm_v100_8ranks")


def _old_exposed_segments(gpu: pl.DataFrame, coll: pl.DataFrame) -> pl.DataFrame:
    """The quadratic implementation this replaced, verbatim but for names."""
    schema = {"cidx": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
    compute = gpu.filter(pl.col("kind") == "kernel").with_columns(pl.col("device").cast(pl.Int64))
    compute = compute.join(coll.select("device", "ts_ns", "end_ns"), on=["device", "ts_ns", "end_ns"], how="anti")
    union = intervals.merge(compute, ["device"]).rename({"start_ns": "us", "end_ns": "ue"})
    c = coll.select("cidx", "device", "ts_ns", "end_ns")
    j = c.join_where(
        union.rename({"device": "udev"}),
        pl.col("device") == pl.col("udev"),
        pl.col("us") < pl.col("end_ns"),
        pl.col("ue") > pl.col("ts_ns"),
    ).with_columns(cs=pl.max_horizontal("us", "ts_ns"), ce=pl.min_horizontal("ue", "end_ns"))
    j = j.sort("cidx", "cs").with_columns(prev=pl.col("ce").shift(1).over("cidx").fill_null(pl.col("ts_ns")))
    inner = j.filter(pl.col("cs") > pl.col("prev")).select("cidx", start_ns="prev", end_ns="cs")
    tail = (
        j.group_by("cidx")
        .agg(start_ns=pl.col("ce").max(), end_ns=pl.col("end_ns").first())
        .filter(pl.col("start_ns") < pl.col("end_ns"))
    )
    bare = c.join(j.select("cidx").unique(), on="cidx", how="anti").select("cidx", start_ns="ts_ns", end_ns="end_ns")
    return (
        pl.concat([inner, tail.select(list(schema)), bare], how="vertical_relaxed")
        .cast(schema)
        .sort("cidx", "start_ns")
    )


def _raw_exposed_us(path) -> list[float]:
    """Exposed µs of each collective kernel in time order, from the raw JSON."""
    ev = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    dev = lambda e: e["args"].get("device", e["pid"])  # noqa: E731
    coll = sorted((e for e in ev if re.match(r"nccl", e["name"], re.I)), key=lambda e: e["ts"])
    keys = {(dev(e), e["ts"], e["dur"]) for e in coll}
    union: dict = {}
    for e in sorted(ev, key=lambda e: e["ts"]):
        if (dev(e), e["ts"], e["dur"]) in keys:
            continue
        u = union.setdefault(dev(e), [])
        s, t = e["ts"], e["ts"] + e["dur"]
        if u and s <= u[-1][1]:
            u[-1][1] = max(u[-1][1], t)
        else:
            u.append([s, t])
    out = []
    for e in coll:
        s, t = e["ts"], e["ts"] + e["dur"]
        covered = sum(max(0.0, min(t, b) - max(s, a)) for a, b in union.get(dev(e), []))
        out.append(t - s - covered)
    return out


@pytest.mark.parametrize("folder", SETS)
def test_exposed_segments_match_the_raw_json_and_the_pairwise_join(SHARED_TRACES, folder):
    pattern = Options().patterns.collective_pattern
    for path in sorted((SHARED_TRACES / folder).iterdir()):
        trace = load(str(path))
        coll = collectives.rank_collectives(trace.gpu, pattern, pl.DataFrame(schema=collectives.COMM_ARGS_SCHEMA))
        assert coll.height > 0
        new = collectives.exposed_segments(trace.gpu, coll)
        assert new.equals(_old_exposed_segments(trace.gpu, coll)), path.name
        per = coll.select("cidx").join(
            new.group_by("cidx").agg(us=(pl.col("end_ns") - pl.col("start_ns")).sum() / 1000.0), on="cidx", how="left"
        )
        want = _raw_exposed_us(path)
        assert len(want) == coll.height
        assert per["us"].fill_null(0.0).to_list() == pytest.approx(want, abs=0.01), path.name
        assert sum(want) > 0


def test_exposed_segments_cut_around_compute_on_an_inline_frame():
    """One collective 0..100 on device 0 with compute 10..20, 15..30 and 90..120, and a second
    on device 1 with no compute: exposed 0..10, 30..90 and all of 50..70."""
    gpu = pl.DataFrame(
        {
            "kind": ["kernel"] * 5,
            "device": [0, 0, 0, 0, 1],
            "ts_ns": [0, 10, 15, 90, 50],
            "end_ns": [100, 20, 30, 120, 70],
        }
    )
    coll = pl.DataFrame({"cidx": [0, 1], "device": [0, 1], "ts_ns": [0, 50], "end_ns": [100, 70]})
    got = collectives.exposed_segments(gpu, coll)
    assert got.rows() == [(0, 0, 10), (0, 30, 90), (1, 50, 70)]


def test_a_ranks_collectives_are_computed_once_and_match_the_raw_json(SHARED_TRACES):
    """The Session's collectives feed both a rank's result and `communication` (one
    computation, issue #22): a rank's exposed time per collective is the raw JSON's, the
    per-step table adds up the same segments, and metadata other than the Session's gets its own."""
    from traceanalyzer.analyses.communication import exposed_communication
    from traceanalyzer.jobs import rank_io
    from traceanalyzer.jobs.executors import _inflate
    from traceanalyzer.jobs.multirank import rank_result
    from traceanalyzer.session import Session

    path = sorted((SHARED_TRACES / "dlrm_v100_8ranks").iterdir())[0]
    comm, _ = rank_io.comm_args(_inflate(path.read_bytes(), str(path)))
    ses = Session(load(str(path)), comm_args=comm)
    r = rank_result(ses, comm_args=comm)
    assert r.exposed is ses.exposed_collectives and r.collectives is ses.collective_kernels
    per = r.collectives.select("cidx").join(
        r.exposed.group_by("cidx").agg(us=(pl.col("end_ns") - pl.col("start_ns")).sum() / 1000.0), on="cidx", how="left"
    )
    want = _raw_exposed_us(path)
    assert per["us"].fill_null(0.0).to_list() == pytest.approx(want, abs=0.01)
    pattern = ses.options.patterns.collective_pattern
    got = ses.communication.per_step_ns
    assert got.height and got.equals(exposed_communication(ses.trace, pattern).per_step_ns)
    other = pl.DataFrame(schema=collectives.COMM_ARGS_SCHEMA)
    coll, exposed = ses.collectives_of(other)
    assert coll is not ses.collective_kernels and exposed.equals(ses.exposed_collectives)
