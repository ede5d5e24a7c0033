"""A rank's row in directory mode is computed on a lean Session (`jobs.rank_session.RankSession`):
the same findings (rule, severity, message) and health checks as a full Session of the file, and
every table it leaves out raises when read. Expected findings come from a full Session of the same
file; the steps counted from the raw JSON."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer import load
from traceanalyzer.findings import RULES_BY_ID, evaluate
from traceanalyzer.jobs.multirank import rank_result
from traceanalyzer.jobs.rank_session import RankSession
from traceanalyzer.patterns import FEWER_FLOPS_KERNEL, TENSOR_CORE_KERNEL, matches
from traceanalyzer.reprs import Unread, UnreadError
from traceanalyzer.session import Session

# one DLRM rank, one MI300X DDP rank (collectives, exposed communication), and a trace whose
# pageable copies, syncs and device-to-host copies fire
FILES = (
    "dlrm_v100_8ranks/worker3_step_12.1694128201557.pt.trace.json.gz",
    "mi300x_ddp_resnet_4ranks",
    "a100_multistream_syncs.json.gz",
)


def _path(shared: Path, name: str) -> Path:
    p = shared / name
    return min(x for x in p.iterdir() if x.is_file()) if p.is_dir() else p


@pytest.fixture(scope="module", params=FILES)
def trace(request, SHARED_TRACES):
    return load(_path(SHARED_TRACES, request.param))


def _rows(findings) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.message) for f in findings]


def test_a_ranks_row_has_the_findings_and_health_of_a_full_session(trace):
    full = Session(trace)
    row = rank_result(trace)
    assert list(row.findings.iter_rows()) == _rows(full.findings)  # savings and evidence aside
    assert list(row.findings.iter_rows()) == _rows(evaluate(Session(trace), estimate=False, full=False))
    assert row.findings.height  # each of these traces has findings: the comparison says something
    health = [(h.check, h.severity, h.message, ", ".join(h.unreliable)) for h in full.health]
    assert list(row.health.iter_rows()) == health


def test_the_tables_a_ranks_row_leaves_out_raise_when_read(trace):
    ses = RankSession(trace)
    left_out = [
        ses.syncs.syncs_ns,
        ses.syncs.per_step_ns,
        ses.kernels.table_ns,
        ses.kernels.short_names_ns,
        ses.roofline.unmodelled_ns,
    ]
    if ses.copies.note is None:  # a trace with copies: their by-site and per-step tables
        left_out += [ses.copies.summary_ns, ses.copies.per_step_ns]
    for table in left_out:
        assert isinstance(table, Unread)
        with pytest.raises(UnreadError, match="lean Session"):
            table.height  # noqa: B018 (the read is the test)
        with pytest.raises(UnreadError):
            table.filter(pl.col("x") > 0)
    # what the rules read is there, as a full Session has it
    full = Session(trace)
    assert ses.kernels.short == full.kernels.short
    assert ses.kernels.matmul_conv_no_tc_ns == full.kernels.matmul_conv_no_tc_ns
    assert ses.syncs.summary_ns.equals(full.syncs.summary_ns)
    assert ses.syncs.by_api_ns.equals(full.syncs.by_api_ns)
    assert ses.roofline.ops_ns.equals(full.roofline.ops_ns)


def test_capture_caveats_count_the_steps_only_when_shown_in_full(SHARED_TRACES):
    path = _path(SHARED_TRACES, FILES[0])
    steps = sum(str(e.get("name", "")).startswith("ProfilerStep#") for e in json.load(gzip.open(path))["traceEvents"])
    assert steps == 1  # the DLRM ranks hold one profiled step each
    ses = Session(load(path))
    rule = RULES_BY_ID["capture_caveats"]
    (shown,) = rule.run(ses, estimate=False, full=True)
    (row,) = rule.run(ses, estimate=False, full=False)
    assert shown.evidence["steps"] == steps and "steps" not in row.evidence
    assert "too_few_steps" in shown.evidence["caveats"] and shown.message == row.message
    assert row.events == shown.events  # the caveats themselves, no query behind them


def test_matches_answers_as_str_contains_and_remembers_names():
    names = pl.Series(
        "name",
        [
            "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",  # s16816: an MMA instruction shape
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >",
            None,
            "volta_sgemm_128x64_nn",  # an FP32 SGEMM: no Tensor Cores
            "winograd_fwd",
        ],
    )
    assert matches(names, TENSOR_CORE_KERNEL).to_list() == [True, False, None, False, False]
    assert matches(names, FEWER_FLOPS_KERNEL).to_list() == [False, False, None, False, True]
    # a second call, with a name not seen before, answers the same as polars does
    more = pl.concat([names, pl.Series("name", ["sm90_xmma_gemm_f16f16_f16f32"])])
    got = matches(more, TENSOR_CORE_KERNEL)
    assert got.name == "name" and got.to_list() == more.str.contains(TENSOR_CORE_KERNEL).to_list()
