"""Tables that never hide the answer (issue #24): kernel names demangled and shortened by their
templates (distinct kernels keep distinct labels), names folded instead of cut, the column
that explains the dominant cause always shown, no line over the width."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from click.testing import CliRunner

from traceanalyzer.cli import cli
from traceanalyzer.render.fit import fit_columns
from traceanalyzer.render.names import demangle, fold_templates, short_names, strip_signature

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)"


def test_templates_fold_until_names_differ():
    assert fold_templates(strip_signature(FILL), 0) == "at::native::vectorized_elementwise_kernel<…>"
    assert short_names([FILL]) == {FILL: "at::native::vectorized_elementwise_kernel<…>"}
    both = short_names([FILL, ADD])
    assert (
        both[FILL] == "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>, at::detail::Array<…>>"
    )
    assert both[ADD] != both[FILL]
    assert short_names(["volta_sgemm_64x64_nt"]) == {"volta_sgemm_64x64_nt": "volta_sgemm_64x64_nt"}


def test_demangles_itanium_names():
    assert demangle("_ZN2at6native18elementwise_kernelEv") == "at::native::elementwise_kernel()"
    assert demangle("not_mangled_kernel") == "not_mangled_kernel"
    assert demangle("_Zgarbage") == "_Zgarbage"  # unreadable: shown as recorded


def _run(*args, columns=100) -> str:
    r = CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout


def _no_line_over(out: str, width: int = 100) -> None:
    over = [line for line in out.splitlines() if len(line) > width]
    assert not over, over[:3]


def test_gb10_top_kernel_is_demangled(SHARED_TRACES):
    path = SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz"
    raw = json.load(gzip.open(path))["traceEvents"]
    by_name: dict[str, float] = {}
    for e in raw:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"]
    top = max(by_name, key=by_name.get)
    assert top.startswith("_ZN7cutlass13device_kernel")  # mangled in the trace
    assert demangle(top).startswith("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<")
    out = _run("kernels", path)
    _no_line_over(out)
    assert "\ncutlass::device_kernel<…>  " in out and "_ZN7c" not in out
    # The full (mangled) name stays in JSON.
    doc = json.loads(_run("kernels", path, "--format", "json", "--top", "1"))
    assert doc["kernels"][0]["kernel"] == top


def test_v100_distinct_kernels_keep_distinct_labels(SHARED_TRACES):
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    doc = json.loads(_run("kernels", path, "--format", "json"))
    names = [k["kernel"] for k in doc["kernels"]]
    labels = short_names(names)
    assert len(set(labels.values())) == len(set(names))


def test_v100_syncs_show_both_sync_apis_and_whole_frames(SHARED_TRACES):
    # workers0: one cudaDeviceSynchronize (explicit) and 24 aten::to copies whose
    # cudaMemcpyAsync is followed by cudaStreamSynchronize (implicit), from line 44.
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    raw = json.load(gzip.open(path))["traceEvents"]
    names = {e.get("name") for e in raw if e.get("cat") in ("cuda_runtime", "Runtime")}
    assert {"cudaDeviceSynchronize", "cudaStreamSynchronize"} <= names
    out = _run("syncs", path)
    _no_line_over(out)
    for api in ("cudaDeviceSynchronize", "cudaStreamSynchronize"):
        assert re.search(rf"\b{api}\b", out), api
    # Every Python frame keeps its line number: no name is cut with an ellipsis.
    assert not re.search(r"(?<!<)…(?!>)", out)
    joined = re.sub(r"\s+", "", out)
    assert "resnet50_profiler_api.py(44):<module>" in joined


def test_a100_gaps_show_waited_on(SHARED_TRACES):
    # gpu_wait holds 95 % of the idle time on a100_multistream_syncs: the column that says what
    # the GPU waited on is never hidden.
    out = _run("gaps", SHARED_TRACES / "a100_multistream_syncs.json.gz")
    _no_line_over(out)
    table = out.split("== Gaps of")[1].split("==")[0]
    assert "waited_on" in table.splitlines()[1] and "dependency inside a CUDA graph" in table
    assert not re.search(r"(?<!<)…(?!>)", out)


@pytest.mark.parametrize(
    "trace",
    [
        "gb10_vllm_cudagraphs.pt.trace.json.gz",
        "v100_resnet50_dataloader_workers0.pt.trace.json.gz",
        "a100_multistream_syncs.json.gz",
    ],
)
@pytest.mark.parametrize("command", ["gaps", "syncs", "kernels", "summary"])
def test_no_line_over_100_and_no_name_cut(SHARED_TRACES, trace, command):
    out = _run(command, SHARED_TRACES / trace)
    _no_line_over(out)
    cut = [line for line in out.splitlines() if re.search(r"(?<!<)…(?!>)", line)]  # `<…>`: folded templates
    assert not cut, cut[:3]


def test_constant_columns_give_way_first_and_are_said():
    headers = ["device", "op", "python_frame", "duration_us"]
    cells = [["0", "aten::to" * 6, "x.py(44): <module>" * 2, "12"], ["0", "aten::mm" * 6, "y.py(45): f" * 3, "9"]]
    fit = fit_columns(headers, cells, [True, False, False, True], 60)
    assert fit.hidden == ["device"] and fit.constant == {"device": "0"}
    assert all(fit.wrap[fit.keep.index(headers.index(c))] for c in ("op", "python_frame"))  # folded, not cut


def test_colour_on_a_terminal_only():
    import dataclasses

    import polars as pl

    from traceanalyzer.render import text
    from traceanalyzer.report import Report, Section

    df = pl.DataFrame({"cause": ["sync", "gpu_wait"], "severity": ["high", "low"], "idle_us": [1.0, 2.0]})
    rep = Report("t", "-", {}, (Section("T", df, text="[high] rule: message"),), {}, width=80)
    plain = text.render(rep)
    assert "\x1b[" not in plain
    coloured = text.render(dataclasses.replace(rep, color=True))
    assert "\x1b[1;31m[high]" in coloured and "\x1b[31msync" in coloured.replace("\x1b[0m", "")
    # Same text once the escapes are taken out: colour changes nothing else.
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


def test_wide_shows_every_column_in_bounded_lines(SHARED_TRACES):
    # --wide used to print 1,870-character lines: every column is shown, long names fold at 80.
    out = _run("gaps", SHARED_TRACES / "a100_multistream_syncs.json.gz", "--wide", "--top", "3")
    header = out.split("== Gaps of")[1].splitlines()[1].split()
    doc = json.loads(_run("gaps", SHARED_TRACES / "a100_multistream_syncs.json.gz", "--format", "json", "--top", "1"))
    assert {"device", "step", "cause", "waited_on", "blocked_thread", "next_activity"} <= set(header)
    assert set(header) <= set(doc["gaps"][0])
    assert max(len(line) for line in out.splitlines()) < 600
