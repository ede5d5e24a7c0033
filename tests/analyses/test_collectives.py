"""Collectives across ranks, checked against the raw JSON of the shared multi-rank sets.

Expected numbers are worked out here from the files with stdlib json: the NCCL/RCCL kernels of
each rank in time order, their args (process group, element counts, dtype), arrival order,
skew, shortest kernel and the NCCL tests' bandwidth definitions."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.jobs.executors import analyse_dir

DTYPE = {"Float": 4, "Long": 8}


def _kernels(path: Path) -> list[dict]:
    ev = json.load(gzip.open(path))["traceEvents"]
    return sorted(
        (e for e in ev if e.get("cat") == "kernel" and re.match(r"nccl", e["name"], re.I)), key=lambda e: e["ts"]
    )


@pytest.fixture(scope="module")
def mi300x(SHARED_TRACES):
    d = SHARED_TRACES / "mi300x_ddp_resnet_4ranks"
    raw = {int(re.search(r"rank(\d)", p.name).group(1)): _kernels(p) for p in d.iterdir()}
    return raw, analyse_dir(str(d))


def test_mi300x_matched_by_group_and_sequence_against_raw_json(mi300x):
    raw, (_, mr, skipped) = mi300x
    m = mr.matched
    assert not skipped and mr.clocks_aligned  # one host clock (README)
    assert m.match_note.startswith("collectives matched by process group")
    inst = m.instances.sort("seq")
    assert inst.height == 21 and set(inst["pg_name"]) == {"0"}
    for row in inst.iter_rows(named=True):
        k = row["seq"]
        per = {r: ks[k] for r, ks in raw.items()}
        args = per[0]["args"]
        # Same collective on every rank: name, size and dtype agree in the raw args.
        assert {(e["args"]["Collective name"], e["args"]["In msg nelems"]) for e in per.values()} == {
            (args["Collective name"], args["In msg nelems"])
        }
        ts = {r: e["ts"] for r, e in per.items()}
        assert row["first_rank"] == min(ts, key=ts.get) and row["last_rank"] == max(ts, key=ts.get)
        assert row["skew_us"] == pytest.approx(max(ts.values()) - min(ts.values()), abs=0.01)
        transfer = min(e["dur"] for e in per.values())
        assert row["transfer_us"] == pytest.approx(transfer, abs=0.002)
        size = max(args["In msg nelems"], args["Out msg nelems"]) * DTYPE[args["dtype"]]
        assert row["bytes"] == size and row["group_size"] == 4 == args["Group size"]
        n = 4
        factor = 2 * (n - 1) / n if args["Collective name"] == "allreduce" else 1.0
        assert row["coll"] == args["Collective name"]
        assert row["busbw_gbps"] == pytest.approx(size / (transfer * 1000) * factor, rel=1e-4)
    # README: per step 2 broadcasts then 5 allreduces; the first allreduce is 1,257,572 floats.
    assert inst["coll"].to_list()[:7] == ["broadcast"] * 2 + ["allreduce"] * 5
    assert inst.row(2, named=True)["bytes"] == 1_257_572 * 4


def test_mi300x_straggler_and_victims_against_raw_json(mi300x):
    raw, (_, mr, _) = mi300x
    m = mr.matched
    last = [max(raw, key=lambda r, k=k: raw[r][k]["ts"]) for k in range(21)]
    top = max(set(last), key=last.count)
    s = m.stragglers.row(0, named=True)
    assert (s["rank"], s["times_last"]) == (top, last.count(top))
    # Waiting: min(last arrival - own arrival, own kernel time), summed over the collectives.
    for v in m.victims.iter_rows(named=True):
        want = 0.0
        for k in range(21):
            t_last = max(raw[r][k]["ts"] for r in raw)
            e = raw[v["rank"]][k]
            want += min(t_last - e["ts"], e["dur"])
        assert v["waited_us"] == pytest.approx(want, abs=0.05)
    assert m.straggler_cause.height and abs(m.straggler_cause["share"].sum() - 1) < 1e-9


def test_dlrm_falls_back_to_name_and_occurrence_and_says_so(SHARED_TRACES):
    d = SHARED_TRACES / "dlrm_v100_8ranks"
    raw = {json.load(gzip.open(p))["distributedInfo"]["rank"]: _kernels(p) for p in d.iterdir()}
    _, mr, _ = analyse_dir(str(d))
    m = mr.matched
    assert "kernel name and occurrence" in m.match_note
    assert m.instances.height == 8  # 5 SendRecv + 3 AllReduce on every rank
    for row in m.instances.iter_rows(named=True):
        per = {r: [e for e in ks if e["name"] == row["name"]][row["k"]] for r, ks in raw.items()}
        ts = {r: e["ts"] for r, e in per.items()}
        assert row["first_rank"] == min(ts, key=ts.get) and row["last_rank"] == max(ts, key=ts.get)
        assert row["skew_us"] == pytest.approx(max(ts.values()) - min(ts.values()), abs=0.5)
        assert row["transfer_us"] == min(e["dur"] for e in per.values())
        assert row["bytes"] is None and row["busbw_gbps"] is None  # no sizes in a 2023 trace
    # Rank 7 arrives last at 5 of the 8 (raw JSON: every SendRecv but #4).
    s = m.stragglers.row(0, named=True)
    assert (s["rank"], s["times_last"]) == (7, 5)


def test_exposed_communication_on_an_inline_trace(tmp_path):
    """Each rank: a collective ending at 2,000 µs with a 300 µs compute kernel at its start.
    Rank 1 arrives 200 µs after rank 0, so rank 0 waits 200 µs, but under its compute kernel:
    its exposed 700 µs are all transfer."""
    from traceanalyzer.jobs.multirank import cross_rank, rank_result
    from traceanalyzer.load import load

    def trace(rank: int, coll_at: float) -> Path:
        ev = [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 5000},
            {
                "ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": coll_at, "dur": 300,
                "args": {"device": 0, "stream": 7, "correlation": 1},
            },
            {
                "ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 8,
                "ts": coll_at, "dur": 1000 - (coll_at - 1000), "args": {"device": 0, "stream": 8, "correlation": 2},
            },
        ]  # fmt: skip
        p = tmp_path / f"rank{rank}.json"
        p.write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": rank, "world_size": 2}}))
        return p

    results = [rank_result(load(trace(0, 1000.0))), rank_result(load(trace(1, 1200.0)))]
    mr = cross_rank(results)
    ex = {r["rank"]: r for r in mr.matched.exposed.iter_rows(named=True)}
    # rank 0: kernel 1000..2000, gemm 1000..1300: exposed 700; waited 1000..1200, all under the gemm.
    assert ex[0]["comm_us"] == 1000 and ex[0]["exposed_us"] == 700
    assert ex[0]["exposed_wait_us"] == 0 and ex[0]["exposed_transfer_us"] == 700
    assert ex[0]["overlap_share"] == pytest.approx(0.3)
    # rank 1: kernel 1200..2000, gemm 1200..1500: exposed 500, no waiting (it came last).
    assert ex[1]["exposed_us"] == 500 and ex[1]["exposed_wait_us"] == 0
    s = mr.matched.stragglers.row(0, named=True)
    assert (s["rank"], s["times_last"], s["caused_wait_us"]) == (1, 1, 200.0)


def test_instances_and_groups_in_integer_ns_by_hand():
    """Two all-reduces of one group, worked by hand: the first on 3 ranks arriving at 1,000,
    1,500 and 4,000 ns (kernels of 5,000, 4,600 and 2,001 ns), the second on 2 ranks at 0 and
    11 ns (kernels of 700 and 690 ns)."""
    import polars as pl

    from traceanalyzer.analyses.collectives import by_group, instances

    rows = [(0, 0, 1_000, 5_000), (0, 1, 1_500, 4_600), (0, 2, 4_000, 2_001), (1, 0, 0, 700), (1, 1, 11, 690)]
    colls = pl.DataFrame(
        [
            {"seq": seq, "rank": rank, "arrival_ns": at, "ts_ns": at, "end_ns": at + dur, "pg_name": "0"}
            | {"coll": "allreduce", "name": "ncclKernel_AllReduce", "group_size": None, "bytes": 4_000}
            | {"dtype": "Float"}
            for seq, rank, at, dur in rows
        ]
    )
    inst = instances(colls, ["pg_name", "seq"]).sort("seq")
    # skew: last - first arrival; lateness: last - median arrival (the median of 0 and 11 is
    # 5.5 ns: a float); transfer: the shortest kernel.
    assert inst.select("skew_ns", "last_late_ns", "transfer_ns").rows() == [(3_000, 2_500.0, 2_001), (11, 5.5, 690)]
    assert inst.schema["skew_ns"] == pl.Int64 and inst.schema["transfer_ns"] == pl.Int64
    # bus bandwidth: 4,000 bytes / 2,001 ns x 2(n-1)/n with n = 3 ranks.
    assert inst["busbw_gbps"][0] == pytest.approx(4_000 / 2_001 * 4 / 3)
    g = by_group(inst).row(0, named=True)
    assert (g["count"], g["transfer_ns"], g["skew_ns"], g["max_skew_ns"]) == (2, 2_691, 3_011, 3_000)


def test_named_like_is_contains_on_many_names():
    # more rows than patterns.MEMO_NAMES: the pattern is tried per distinct name; a null name
    # stays null, as str.contains says
    from traceanalyzer.analyses.collectives import _named_like
    from traceanalyzer.patterns import MEMO_NAMES

    base = ["ncclKernel_AllReduce_RING", "volta_sgemm_128x64", None, "ncclDevKernel_AllGather", "elementwise"]
    names = pl.Series("name", base * (MEMO_NAMES // len(base) + 2))
    got = _named_like(names, r"nccl|rccl")
    assert names.len() > MEMO_NAMES and got.name == "name"
    assert got.to_list() == names.str.contains(r"nccl|rccl").to_list()
    assert got.sum() == 2 * (MEMO_NAMES // len(base) + 2) and got.null_count() == MEMO_NAMES // len(base) + 2
