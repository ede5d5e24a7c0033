"""Compare every command's JSON output between a base commit and this working tree, on every
shared trace: the check that a refactoring changed no number.

    .venv/bin/python scripts/compare_outputs.py BASE_REV [--traces NAME ...] [--commands CMD ...] [--jobs N]

The base is exported with `git archive` into a temporary folder (nothing is built: both sides run
`python -m traceanalyzer CMD TRACE --format json` with this tree's virtual environment, the base
from its own folder so its package comes first on the path). `summary` and `gaps` also run on each
directory of ranks; `diff` runs on the pairs of DIFF_PAIRS (two shared traces of one program, two
ranks of one job, a trace against itself, two traces without GPU work). Traces are named by absolute path,
so the `input` field is the same on both sides. Each pair of outputs is compared byte for byte;
where they differ, the JSON paths whose values differ are listed (first few), and an output
whose every difference is a float equal to 1e-12 relative (the last digits of a sum now made of
integers) is marked DIGITS rather than DIFFERS. Exit 1 when any output DIFFERS, else 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = (ROOT / ".." / "shared" / "traces").resolve()
COMMANDS = ("summary", "gaps", "copies", "syncs", "stages", "ops", "kernels", "memory", "diff")
DIRECTORY_COMMANDS = ("summary", "gaps")  # the commands that also take a directory of ranks
DIFF_PAIRS = (  # before, after: paths under TRACES
    ("v100_resnet50_dataloader_workers0.pt.trace.json.gz", "v100_resnet50_dataloader_workers4.pt.trace.json.gz"),
    ("v100_resnet50_dataloader_workers4.pt.trace.json.gz", "v100_resnet50_dataloader_workers0.pt.trace.json.gz"),
    ("a100_simple_add_syncs.json.gz", "a100_multistream_syncs.json.gz"),
    ("dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz",
     "dlrm_v100_8ranks/worker1_step_12.1694128201556.pt.trace.json.gz"),
    ("mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz", "mi300x_ddp_resnet_4ranks/rank3_trace_0_20_3.json.gz"),
    ("h100_owlv2_inference.json.gz", "h100_owlv2_inference.json.gz"),
    ("edge_cpu_only.pt.trace.json.gz", "edge_gb10_no_gpu_events.pt.trace.json.gz"),
)  # fmt: skip


def _inputs(names: list[str] | None) -> list[Path]:
    files = sorted(p for p in TRACES.iterdir() if p.is_file() and ".json" in p.name)
    dirs = sorted(p for p in TRACES.iterdir() if p.is_dir())
    found = files + dirs
    if names:
        found = [p for p in found if any(n in p.name for n in names)]
    return found


def _runs(commands: list[str], names: list[str] | None) -> list[tuple[str, tuple[Path, ...]]]:
    """(command, its inputs) for every run to compare: each trace (and directory, for the
    directory commands) under each command, and `diff` on DIFF_PAIRS."""
    runs = [
        (c, (t,)) for t in _inputs(names) for c in commands if c != "diff" and (t.is_file() or c in DIRECTORY_COMMANDS)
    ]
    if "diff" in commands:
        pairs = [(TRACES / a, TRACES / b) for a, b in DIFF_PAIRS]
        runs += [("diff", p) for p in pairs if not names or any(n in q.name for q in p for n in names)]
    return runs


def _label(inputs: tuple[Path, ...]) -> str:
    return " -> ".join(p.name for p in inputs)


def _export(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True)
    tar = into / "base.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    tar.unlink()


def _run(where: Path, command: str, inputs: tuple[Path, ...]) -> tuple[int, bytes]:
    p = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", command, *map(str, inputs), "--format", "json"],
        cwd=where,
        capture_output=True,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
    )
    return p.returncode, p.stdout


def _differences(a: object, b: object, path: str = "$") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k} (only in base)" for k in a if k not in b]
        out += [f"{path}.{k} (only here)" for k in b if k not in a]
        for k in a:
            if k in b:
                out += _differences(a[k], b[k], f"{path}.{k}")
        if not out and list(a) != list(b):
            out.append(f"{path} (key order)")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path} (length {len(a)} -> {len(b)})"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{path}: {a!r} -> {b!r}"[:200]]


def _float_noise(d: str) -> bool:
    """A difference between two floats equal to 1e-12 relative: the last digits of a sum."""
    try:
        _, values = d.split(": ", 1)
        a, b = (float(v) for v in values.split(" -> "))
    except ValueError:
        return False
    return a != b and abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("--traces", nargs="*", help="substrings of trace names (default: every shared trace)")
    ap.add_argument("--commands", nargs="*", default=list(COMMANDS))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    pairs = _runs(args.commands, args.traces)
    same = differ = noise = 0
    with tempfile.TemporaryDirectory(prefix="compare-outputs-") as tmp:
        base = Path(tmp)
        _export(args.base, base)

        def one(
            pair: tuple[str, tuple[Path, ...]],
        ) -> tuple[str, tuple[Path, ...], tuple[int, bytes], tuple[int, bytes]]:
            c, t = pair
            return c, t, _run(base, c, t), _run(ROOT, c, t)

        with ThreadPoolExecutor(args.jobs) as pool:
            for c, t, (rc_a, a), (rc_b, b) in pool.map(one, pairs):
                if rc_a == rc_b and a == b:
                    same += 1
                    print(f"same     {c:8} {_label(t)}", flush=True)
                    continue
                # An output that changes from run to run on the base is not this change's doing.
                unstable = _run(base, c, t) != (rc_a, a)
                try:
                    diffs = _differences(json.loads(a), json.loads(b))
                except ValueError:
                    diffs = ["(not JSON on one side)"]
                last_digits = rc_a == rc_b and all(_float_noise(d) for d in diffs)
                noise += last_digits
                differ += not last_digits
                tag = "UNSTABLE in the base" if unstable else f"exit {rc_a} -> {rc_b}"
                print(f"{'DIGITS' if last_digits else 'DIFFERS'}  {c:8} {_label(t)} ({tag})", flush=True)
                for d in diffs[:8]:
                    print(f"    {d}")
                if len(diffs) > 8:
                    print(f"    ... {len(diffs) - 8} more")
    print(
        f"{same} byte-identical, {noise} differing only in float last digits (1e-12 relative), "
        f"{differ} different (base {args.base})"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
