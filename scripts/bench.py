"""Benchmark loading and analysing big traces against baselines, in one run.

    python scripts/bench.py /tmp/big_100m.json /tmp/big_100m.json.gz /tmp/big_1g.json.gz

Build the files with scripts/make_big_trace.py (in /tmp; never commit them). Every case runs in
a fresh process; wall time, CPU time (user + system, worker processes included), peak RSS (the
sum over the process and its children, sampled every 20 ms with psutil) and MB/s of JSON are
printed as a Markdown table. Cases:

- `ta load`: `traceanalyzer.load(path)`;
- `ta gaps`, `ta summary`: the CLI end to end (`--format json` to /dev/null); summary only where
  that command exists;
- `json.load + columns`: stdlib `json.load` plus building the same per-kind columns as polars
  frames (the naive baseline);
- `msgspec + columns`: the same with `msgspec.json.decode` (the fastest general decoder to
  Python objects) instead of `json.load`;
- `HTA load`: Holistic Trace Analysis' `TraceAnalysis(trace_dir=...)`, run with the Python of
  `--hta-python` (default /work/venv-hta/bin/python) when HTA is installed there.

The baselines hold the whole trace as Python objects (json.load: ~8x the file in RAM), so they
run only up to `--baseline-max-mb`; HTA up to `--hta-max-mb` (HTA takes ~3.5 min and ~5 GB on
1 GB of JSON). Ratios compare each baseline with `ta load` and `ta gaps` on the same file.
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TA = [sys.executable, "-c"]
LOAD = "import sys; from traceanalyzer import load; load(sys.argv[1])"
BASELINE = r"""
import gzip, json, sys
import polars as pl
p = sys.argv[1]
with open(p, 'rb') as fh:
    gz = fh.read(2) == b'\x1f\x8b'
if sys.argv[2] == 'msgspec':
    import msgspec
    with (gzip.open(p) if gz else open(p, 'rb')) as fh:
        doc = msgspec.json.decode(fh.read())
else:
    doc = json.load(gzip.open(p) if gz else open(p, 'rb'))
kinds = {'cpu_op': 'op', 'user_annotation': 'op', 'python_function': 'python', 'cuda_runtime': 'runtime',
         'cuda_driver': 'runtime', 'kernel': 'gpu', 'gpu_memcpy': 'gpu', 'gpu_memset': 'gpu', 'ac2g': 'flow'}
buckets = {}
for e in doc['traceEvents']:
    buckets.setdefault(kinds.get(e.get('cat'), 'other'), []).append(e)
frames = {}
for kind, evs in buckets.items():
    args = [e.get('args') or {} for e in evs]
    frames[kind] = pl.DataFrame({
        'name': [str(e.get('name')) for e in evs], 'pid': [str(e.get('pid')) for e in evs],
        'tid': [str(e.get('tid')) for e in evs],
        'ts_ns': [int(round(float(e.get('ts', 0)) * 1000)) for e in evs],
        'dur_ns': [int(round(float(e.get('dur', 0) or 0) * 1000)) for e in evs],
        'correlation': [a.get('correlation') if isinstance(a.get('correlation'), int) else None for a in args],
        'external_id': [a.get('External id') if isinstance(a.get('External id'), int) else None for a in args],
    })
"""
HTA = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def json_bytes(path: Path) -> int:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(16 << 20):
            n += len(chunk)
    return n


def measure(cmd: list[str], env: dict | None = None) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            procs = [ps, *ps.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.read().decode(errors="replace")
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": peak / 1e6, "rc": proc.returncode, "err": err.strip()[-300:]}


def _ratios(results: list[tuple[Path, float, dict[str, dict]]]) -> list[str]:
    """Each baseline against `ta load` and `ta gaps` of the same trace, or of another file of the
    same JSON size (HTA run once on the plain 1 GB file stands for the gzipped one too)."""
    lines = []
    for path, mb, best in results:
        for base in ("HTA load", "json.load + columns", "msgspec + columns"):
            src = path
            b = best.get(base)
            if b is None:  # the same JSON in another file (plain / gzipped)?
                for other, omb, obest in results:
                    if base in obest and abs(omb - mb) < 0.5:
                        src, b = other, obest[base]
                        break
            if b is None or b["rc"] != 0:
                continue
            for name in ("ta load", "ta gaps"):
                r = best.get(name)
                if r is None or r["rc"] != 0:
                    continue
                on = "" if src == path else f" (on {src.name})"
                lines.append(
                    f"{path.name}: {name} vs {base}{on}: {b['wall_s'] / r['wall_s']:.1f}x faster (wall), "
                    f"{b['cpu_s'] / r['cpu_s']:.1f}x less CPU, {r['peak_rss_mb'] / b['peak_rss_mb']:.2f}x the peak RSS"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--hta-python", default="/work/venv-hta/bin/python")
    ap.add_argument("--skip", action="append", default=[], help="case names to skip (e.g. 'HTA load')")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per case, interleaved across cases; the median run (by wall time) is reported",
    )
    ap.add_argument(
        "--baseline-max-mb",
        type=float,
        default=200.0,
        help="run the baselines only on traces up to this size (they need many times the file in RAM)",
    )
    ap.add_argument(
        "--hta-max-mb",
        type=float,
        default=200.0,
        help="run HTA only on traces up to this size (1 GB: ~3.5 min, ~5 GB of RAM)",
    )
    ap.add_argument("--hta-plain-only", action="store_true", help="run HTA on uncompressed traces only")
    args = ap.parse_args(argv)
    ta = shutil.which("traceanalyzer", path=str(Path(sys.executable).parent)) or "traceanalyzer"
    has_summary = subprocess.run([ta, "summary", "--help"], capture_output=True).returncode == 0
    has_hta = (
        Path(args.hta_python).exists()
        and subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {psutil.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}, "
        f"load average at start {os.getloadavg()[0]:.1f}\n"
    )
    print("| trace | JSON MB | case | wall s | CPU s | peak RSS MB | RSS / JSON | MB/s |")
    print("|---|---|---|---|---|---|---|---|")
    results: list[tuple[Path, float, dict[str, dict]]] = []
    for path in args.traces:
        mb = json_bytes(path) / 1e6
        cases = [("ta load", TA + [LOAD, str(path)]), ("ta gaps", [ta, "gaps", str(path), "--format", "json"])]
        if has_summary:
            cases.append(("ta summary", [ta, "summary", str(path), "--format", "json"]))
        tmp = None
        if mb <= args.baseline_max_mb:
            cases.append(("json.load + columns", TA + [BASELINE, str(path), "json"]))
            cases.append(("msgspec + columns", TA + [BASELINE, str(path), "msgspec"]))
        if has_hta and mb <= args.hta_max_mb and not (_is_gzip(path) and args.hta_plain_only):
            tmp = tempfile.mkdtemp()
            os.symlink(path.resolve(), Path(tmp) / path.name)
            cases.append(("HTA load", [args.hta_python, "-c", HTA, tmp]))
        cases = [(n, c) for n, c in cases if n not in args.skip]
        runs: dict[str, list[dict]] = {n: [] for n, _ in cases}
        for _ in range(max(1, args.repeat)):  # interleaved: a load spike hits every case alike
            for name, cmd in cases:
                runs[name].append(measure(cmd))
        best: dict[str, dict] = {}
        for name, _ in cases:
            rs = sorted(runs[name], key=lambda r: r["wall_s"])
            r = best[name] = rs[len(rs) // 2]
            note = "" if r["rc"] == 0 else f" (exit {r['rc']}: {r['err']})"
            print(
                f"| {path.name} | {mb:,.0f} | {name}{note} | {r['wall_s']:.2f} | {r['cpu_s']:.1f} | "
                f"{r['peak_rss_mb']:,.0f} | {r['peak_rss_mb'] / mb:.2f} | {mb / r['wall_s']:.1f} |",
                flush=True,
            )
        results.append((path, mb, best))
        if tmp:
            shutil.rmtree(tmp)
    ratios = _ratios(results)
    if ratios:
        print()
        for line in ratios:
            print(f"- {line}")
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
