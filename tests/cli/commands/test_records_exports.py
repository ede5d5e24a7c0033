"""One record shown vertically with every field (`gaps --gap N`, `syncs --sync N`, `copies
--copy N`), and exports that carry every field of a table (issue #24)."""

from __future__ import annotations

import csv
import json

from click.testing import CliRunner

from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _trace(tmp_path):
    # One 10 ms step: kernel a 0.1-2.0 ms, a DataLoader range 2.1-5.8 ms, kernel b from 6.0 ms:
    # the GPU is idle 2.0-6.0 ms (4,000 µs, data_loading) and 0-0.1 ms at the step's start.
    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.kernel("a", 100, 1900, launch_ts=50)
    b.annotation(NEXT, 2100, 3700)
    b.kernel("b", 6000, 3000, launch_ts=5890)
    return b.write(tmp_path)


def _run(*args):
    r = CliRunner().invoke(cli, [str(a) for a in args])
    return r


def test_gap_record_has_every_field(tmp_path):
    src = _trace(tmp_path)
    every = json.loads(_run("gaps", src, "--format", "json").stdout)["gaps"]
    one = json.loads(_run("gaps", src, "--gap", "1", "--format", "json").stdout)
    assert one["gap"] == every[0] and one["of"] == len(every) and len(one["gap"]) == 22
    assert one["gap"]["duration_us"] == 4000.0 and one["gap"]["cause"] == "data_loading"
    out = _run("gaps", src, "--gap", "1").stdout
    lines = out.splitlines()
    assert lines[0] == f"== Gap 1 of {len(every)}"
    fields = [line.split()[0] for line in lines[3 : 3 + 22]]
    assert fields == list(every[0])  # one line per field, in order
    from traceanalyzer.cli.main import main

    assert main(["gaps", str(src), "--gap", str(len(every) + 1)]) == 2


def test_gaps_csv_holds_every_gap_field(tmp_path):
    src = _trace(tmp_path)
    out = tmp_path / "x.csv"
    assert _run("gaps", src, "-o", out).exit_code == 0
    with open(out) as fh:
        header = next(csv.reader(fh))
    every = json.loads(_run("gaps", src, "--format", "json").stdout)["gaps"]
    assert header == list(every[0]) and len(header) == 22


def test_syncs_and_copies_records(SHARED_TRACES):
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    one = json.loads(_run("syncs", path, "--sync", "1", "--format", "json").stdout)
    # The longest CPU block of workers0: the cudaDeviceSynchronize at the end (16.2 ms).
    assert one["sync"]["api"] == "cudaDeviceSynchronize" and one["of"] == 25
    copy = json.loads(_run("copies", path, "--copy", "1", "--format", "json").stdout)
    every = json.loads(_run("copies", path, "--format", "json").stdout)["copies"]
    assert copy["copy"] == every[0]
