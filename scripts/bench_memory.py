"""Peak memory of the analyses against the load's: fails (exit 1) when `gaps` or `summary` peak
above what loading the same trace alone peaks at.

Decoding is the high-water mark of a run: the analyses after it must fit in what the load
already needed (a join whose size is a product of event counts, like the collective x compute
pairs of issue #22, shows up here first). Each measurement runs in a fresh process, with the
single-file cache off, and reads its peak RSS from the kernel (`wait4`'s ru_maxrss):

    python scripts/bench_memory.py                      # 300 MB built from a100_multistream_syncs
    python scripts/bench_memory.py --size-mb 100 --runs 1
    python scripts/bench_memory.py --trace big.json     # an existing trace

Prints one row per run (peak MB, peak / file, peak / load's peak, wall s, user CPU s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "traces" / "a100_multistream_syncs.json.gz"
LOAD_ONLY = "import sys; from traceanalyzer.load import load; load(sys.argv[1])"


def measure(argv: list[str]) -> tuple[float, float, float]:
    """(peak RSS in MB, wall s, user CPU s) of one command in a fresh process."""
    env = {**os.environ, "TRACEANALYZER_NO_CACHE": "1", "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench_memory: {' '.join(argv[:4])} failed ({proc.returncode}): {err.strip()[-400:]}")
    return usage.ru_maxrss / 1024, wall, usage.ru_utime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="an existing trace (else one is built with make_big_trace.py)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="trace the big one is built from")
    ap.add_argument("--size-mb", type=float, default=300.0, help="size of the built trace [default: 300]")
    ap.add_argument("--runs", type=int, default=1, help="runs of each command; the lowest peak counts [default: 1]")
    ap.add_argument(
        "--tolerance", type=float, default=0.0, help="allowed excess over the load's peak, as a share [default: 0]"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        trace = args.trace
        if trace is None:
            trace = Path(tmp) / "big.json"
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "make_big_trace.py"), str(args.source), str(trace)]
                + ["--size-mb", str(args.size_mb)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        size_mb = trace.stat().st_size / 1e6
        commands = {
            "load": [sys.executable, "-c", LOAD_ONLY, str(trace)],
            "gaps": [sys.executable, "-m", "traceanalyzer", "gaps", str(trace)],
            "summary": [sys.executable, "-m", "traceanalyzer", "summary", str(trace)],
        }
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(max(1, args.runs)):
            for name, argv in commands.items():  # interleaved, so machine noise hits all alike
                m = measure(argv)
                if name not in best or m[0] < best[name][0]:
                    best[name] = m
    load_peak = best["load"][0]
    print(f"{trace.name}: {size_mb:,.0f} MB of JSON")
    print(f"{'run':8s} {'peak MB':>8s} {'/file':>6s} {'/load':>6s} {'wall s':>7s} {'user s':>7s}")
    for name, (peak, wall, user) in best.items():
        print(f"{name:8s} {peak:8.0f} {peak / size_mb:6.2f} {peak / load_peak:6.2f} {wall:7.2f} {user:7.2f}")
    over = [n for n in ("gaps", "summary") if best[n][0] > load_peak * (1 + args.tolerance)]
    if over:
        print(
            f"bench_memory: FAIL: {', '.join(over)} peaked above the load's {load_peak:,.0f} MB "
            f"(tolerance {args.tolerance:.0%})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
