"""Tables fit the width: columns hidden by priority, names cut in the middle, prose wrapped,
every line at most the width (80, 100, 120 columns) on real reports of every table command."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyzer.cli.commands.copies import copies_report
from traceanalyzer.cli.commands.gaps import gaps_report
from traceanalyzer.cli.commands.memory import memory_report
from traceanalyzer.cli.commands.rules import rules_table
from traceanalyzer.cli.commands.stages import stages_report
from traceanalyzer.cli.commands.summary import summary_report
from traceanalyzer.cli.commands.syncs import syncs_report
from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.render import markdown, text
from traceanalyzer.render.fit import fit_columns, fold_name, middle_ellipsis, terminal_width
from traceanalyzer.report import Report, Section
from traceanalyzer.session import Session

FRAME = "transformers/pipelines/base.py(1173): _ensure_tensor_on_device"


@pytest.mark.parametrize(
    ("name", "width", "lines"),
    [
        # an op of a100_multistream_syncs, in its 21 columns of the gaps table at 100 columns
        (
            "autograd::engine::evaluate_function: CompiledFunctionBackward",
            21,
            ["autograd::engine::", "evaluate_function:", "CompiledFunction", "Backward"],
        ),
        (FRAME, 24, ["transformers/pipelines/", "base.py(1173):", "_ensure_tensor_on_device"]),
        # a frame of v100_resnet50_dataloader_workers0: the file name whole, its line number after
        ("resnet50_profiler_api.py(42): <module>", 24, ["resnet50_profiler_api.py", "(42): <module>"]),
        (
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            24,
            ["enumerate(DataLoader)#_", "SingleProcessDataLoader", "Iter.__next__"],
        ),
        ("fbgemm::block_bucketize_sparse_features", 21, ["fbgemm::block_", "bucketize_sparse_", "features"]),
        ("aten::to", 8, ["aten::to"]),
        ("abcdefghijklmnopqrstuvwxyz", 10, ["abcdefghij", "klmnopqrst", "uvwxyz"]),  # no place to break: at the width
    ],
)
def test_names_fold_where_a_reader_breaks_them(name, width, lines):
    folded = fold_name(name, width)
    assert folded.split("\n") == lines
    assert all(len(line) <= width for line in lines) and "".join(lines).replace(" ", "") == name.replace(" ", "")


def test_a_folded_name_is_drawn_as_folded():
    df = pl.DataFrame({"op": ["autograd::engine::evaluate_function: CompiledFunctionBackward"], "idle_us": [1.0]})
    lines = text.table_lines(df, 30)  # idle_us is 7 wide (its header), the gutter 2: the op 21
    assert [line.split("  ")[0].strip() for line in lines[2:]] == [
        "autograd::engine::",
        "evaluate_function:",
        "CompiledFunction",
        "Backward",
    ]


def test_middle_ellipsis_keeps_the_function():
    # 40 characters: "…" + "/base.py(1173): _ensure_tensor_on_device" is 40, so the head is empty
    # and the file name and function survive whole.
    cut = middle_ellipsis(FRAME, 41)
    assert len(cut) == 41 and cut.endswith("base.py(1173): _ensure_tensor_on_device") and "…" in cut
    short = middle_ellipsis(FRAME, 26)  # the function alone is 24 characters
    assert len(short) == 26 and short.endswith("…_ensure_tensor_on_device")
    assert middle_ellipsis("aten::mm", 20) == "aten::mm"


def test_cpp_kernel_loses_its_arguments_first():
    name = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64>(cutlass_80_tensorop_s1688gemm_64x64::Params)"
    assert middle_ellipsis(name, 60) == "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64>"


def test_fit_hides_low_priority_columns_first():
    headers = ["cause", "op", "python_frame", "blocked_thread", "duration_us"]
    cells = [["sync", "aten::to" * 5, FRAME, "x" * 50, "12"]]
    fit = fit_columns(headers, cells, [False, False, False, False, True], 80)
    assert fit.hidden == ["blocked_thread"]
    # Kept columns and their gutters fill at most the width.
    assert sum(fit.widths) + 2 * (len(fit.widths) - 1) <= 80


def test_columns_env_and_fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "87")
    assert terminal_width() == 87
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == 100  # pytest's stdout is not a terminal


def test_rows_limit_and_wide():
    df = pl.DataFrame({"name": [f"op{i}" + "x" * 150 for i in range(30)], "us": list(range(30))})
    rep = Report("t", "-", {}, (Section("T", df, main=True),), {}, table_rows=20, width=80)
    out = text.render(rep)
    assert "(20 of 30 rows" in out and max(len(x) for x in out.splitlines()) <= 80
    wide = text.render(Report("t", "-", {}, (Section("T", df),), {}, table_rows=None, wide=True))
    # every cell whole, a long name folded at 80 columns (no line of thousands of characters)
    assert wide.count("x") == 30 * 150 and "op29" in wide and max(len(x) for x in wide.splitlines()) <= 90
    assert markdown.render(rep).count("| `op") == 20  # names in code spans


def test_rules_wraps_its_advice_whole():
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    table = rules_table(Options())
    out = CliRunner().invoke(cli, ["rules"], env={"COLUMNS": "80"}).stdout
    assert max(len(x) for x in out.splitlines()) <= 80
    words = " ".join(out.split())
    for advice in table["advice"].to_list():
        # every word of every piece of advice is printed (wrapped, not cut)
        for word in advice.split()[:3] + advice.split()[-2:]:
            assert word in words


@pytest.fixture(scope="module")
def reports(SHARED_TRACES):
    ses = Session(load(str(SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz")), Options())
    th = ses.options.thresholds(("gaps",))
    return [
        summary_report(ses, None, th),
        gaps_report(ses, None),
        syncs_report(ses, None),
        copies_report(ses, None),
        memory_report(ses, None),
        stages_report(ses.stages, ses.path, th, None),
        Report("rules", "-", {}, (Section("Rules", rules_table(Options()), main=True),), {}),
    ]


@pytest.mark.parametrize("width", [80, 100, 120])
def test_no_line_over_the_width(reports, width):
    from dataclasses import replace

    for rep in reports:
        out = text.render(replace(rep, width=width))
        over = [line for line in out.splitlines() if len(line) > width]
        assert not over, (rep.command, width, over[:3])
