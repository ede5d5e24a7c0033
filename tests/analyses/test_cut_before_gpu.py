"""A file cut short before its GPU events is not a CPU-only trace (issue #24): the health check
says it is truncated and what was read, and no output says "no GPU work"."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.synthetic import write_events, x_event
from traceanalyzer.cli import cli


def _cut_trace(tmp_path):
    ops = [x_event("cpu_op", f"aten::op{k}", 100.0 * k, 50.0) for k in range(20)]
    launches = [x_event("cuda_runtime", "cudaLaunchKernel", 100.0 * k + 10, 5.0, correlation=k) for k in range(20)]
    kernels = [
        x_event("kernel", f"k{k}", 100.0 * k + 30, 40.0, pid=0, tid=7, device=0, stream=7, correlation=k)
        for k in range(20)
    ]
    path = write_events(tmp_path, ops + launches + kernels)
    text = path.read_text()
    cut = text.index('"cat": "kernel"')  # inside the first kernel event: every GPU event is lost
    path.write_text(text[:cut])
    return path


def test_cut_before_gpu_events_says_truncated_not_cpu_only(tmp_path):
    path = _cut_trace(tmp_path)
    r = CliRunner().invoke(cli, ["gaps", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (h,) = [h for h in doc["health"] if h["check"] == "truncated"]
    assert h["severity"] == "error"
    # What was read, counted by hand from the events written before the cut: 20 ops, 20 launches.
    assert h["evidence"]["ops"] == 20 and h["evidence"]["runtime_calls"] == 20 and h["evidence"]["launches"] == 20
    for cmd in ("gaps", "summary", "syncs", "copies"):
        out = CliRunner().invoke(cli, [cmd, str(path)]).stdout
        assert "no GPU work" not in out and "CPU-only" not in out, (cmd, out[:300])
        assert "cut short" in out, cmd
