"""Directory mode at scale: N rank files built from a shared multi-rank set, analysed on each
executor; wall time, CPU time and peak RSS of the driver and of the workers, side by side as ratios.

    python scripts/bench_ranks.py --ranks 8 64 --configs summary hta --hta-python /path/to/venv-hta/bin/python

Rank i is a copy of source file i mod k with its `distributedInfo` rank and world size
rewritten (the timestamps are kept: the copies of one source arrive together). Files go to
/tmp (never committed). Each configuration runs in a fresh process so its driver RSS is its own;
a worker's peak RSS is read inside the mapped function. `hta` loads the same folder with
Holistic Trace Analysis (`TraceAnalysis(trace_dir=...)`, every rank in one process, its issue
#250) with the Python of `--hta-python` when HTA is installed there; its RSS is the process's peak.
`summary` is the command a user runs, `traceanalyzer summary DIR --format json` (its default
executor: a worker pool).

CPU s is user + system time of the configuration's whole process tree (the process and every
worker it waited for: `RUSAGE_CHILDREN` around the run), start-up and imports included; `vs HTA`
divides it by HTA's when HTA ran. The package's bytecode is compiled first, as an install leaves it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIGS = ("serial", "pool", "dask", "cached", "summary", "hta")
HTA_PYTHON = "/work/venv-hta/bin/python"
HTA = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"


def build(src: Path, n: int, out: Path) -> Path:
    """N rank files in `out` from the k files of `src`."""
    files = sorted(p for p in src.iterdir() if p.is_file())
    out.mkdir(parents=True, exist_ok=True)
    texts = [gzip.decompress(p.read_bytes()).decode() for p in files]
    dist = re.compile(r'"distributedInfo"\s*:\s*\{[^}]*\}')
    for i in range(n):
        t = texts[i % len(texts)]
        info = f'"distributedInfo": {{"backend": "nccl", "rank": {i}, "world_size": {n}}}'
        t = dist.sub(info, t, count=1) if dist.search(t) else t
        (out / f"rank{i}.json.gz").write_bytes(gzip.compress(t.encode(), compresslevel=1))
    return out


def _measured(path, options, cache):
    """The per-rank unit plus this worker's peak RSS (MiB)."""
    from traceanalyzer.jobs.executors import analyse_rank_file

    r = analyse_rank_file(path, options, cache)
    return r, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(directory: str, config: str, cache: str) -> dict:
    """Run one configuration in this process; its numbers as a dict."""
    from traceanalyzer.jobs.executors import rank_files, run_ranks
    from traceanalyzer.jobs.multirank import RankResult, cross_rank
    from traceanalyzer.options import Options

    opts = Options()
    files = rank_files(directory)
    t = time.perf_counter()
    kw = {
        "serial": {"jobs": 1},
        "pool": {"jobs": 2},
        "dask": {"executor": "dask"},
        "cached": {"jobs": 1},
    }[config]
    out = run_ranks(files, _measured, opts, cache if config == "cached" else "", **kw)
    mr = cross_rank([r for r, _ in out if isinstance(r, RankResult)], opts)
    wall = time.perf_counter() - t
    top = mr.matched.stragglers.row(0, named=True) if mr.matched and mr.matched.stragglers.height else {}
    return {
        "config": config,
        "wall_s": wall,
        "driver_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mib": max(m for _, m in out),
        "straggler": top.get("rank"),
    }


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run `cmd`; its result, wall seconds and CPU seconds (user + sys of it and its descendants)."""
    c, t = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p, time.perf_counter() - t, _children_cpu() - c


def hta(python: str, directory: Path) -> dict | None:
    """HTA's multi-rank load of `directory`: wall and CPU seconds, peak RSS (MiB); None without HTA."""
    if not Path(python).exists():
        return None
    p, wall, cpu = timed(["/usr/bin/time", "-v", python, "-c", HTA, str(directory)])
    if p.returncode:
        print(f"HTA failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    rss = next(int(line.split()[-1]) for line in p.stderr.splitlines() if "Maximum resident" in line)
    return {"wall_s": wall, "cpu_s": cpu, "rss_mib": rss / 1024}


def summary(directory: Path, out: Path) -> dict:
    """`traceanalyzer summary DIR --format json`: wall and CPU seconds, peak RSS of the driver (MiB)."""
    cmd = [sys.executable, "-m", "traceanalyzer", "summary", str(directory), "--format", "json", "-o", str(out)]
    p, wall, cpu = timed(["/usr/bin/time", "-f", "%M", *cmd])
    if p.returncode:
        raise SystemExit(f"summary failed: {p.stderr.strip()[-400:]}")
    return {"wall_s": wall, "cpu_s": cpu, "driver_rss_mib": int(p.stderr.strip().splitlines()[-1]) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64])
    ap.add_argument("--set", default=str(Path(__file__).resolve().parents[1] / "../shared/traces/dlrm_v100_8ranks"))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--hta-python", default=HTA_PYTHON)
    ap.add_argument("--one", nargs=3, metavar=("DIR", "CONFIG", "CACHE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_ranks_"))
    # as an install leaves the package: without its bytecode every worker compiles the ~70
    # modules it imports, where PYTHONDONTWRITEBYTECODE keeps it from being written
    from bench import compile_package  # scripts/bench.py, beside this file

    compile_package()
    print(
        "| ranks | executor | wall s | vs serial | CPU s | vs HTA | driver peak RSS MiB | worker peak RSS MiB | straggler |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in a.ranks:
        d = build(Path(a.set), n, tmp / f"r{n}")
        cache = str(tmp / f"cache{n}")
        if "cached" in a.configs:  # fill the cache first; the row is the re-run
            subprocess.run([sys.executable, __file__, "--one", str(d), "serial", ""], check=True, capture_output=True)
            subprocess.run(
                [sys.executable, __file__, "--one", str(d), "cached", cache], check=True, capture_output=True
            )
        rows = []
        for c in a.configs:
            if c == "hta":
                r = hta(a.hta_python, d)
                if r is not None:
                    rows.append(("HTA load", r | {"driver_rss_mib": r["rss_mib"]}))
                continue
            if c == "summary":
                rows.append(("`summary DIR`", summary(d, tmp / f"summary{n}.json")))
                continue
            p, wall, cpu = timed([sys.executable, __file__, "--one", str(d), c, cache])
            if p.returncode:
                raise SystemExit(f"{c} failed: {p.stderr.strip()[-400:]}")
            rows.append((c, json.loads(p.stdout.strip().splitlines()[-1]) | {"cpu_s": cpu}))
        base = rows[0][1]["wall_s"] if rows else 1.0
        hta_cpu = next((r["cpu_s"] for name, r in rows if name == "HTA load"), None)
        for name, r in rows:
            vs_hta = f"{r['cpu_s'] / hta_cpu:.2f}" if hta_cpu else "-"
            worker = f"{r['worker_rss_mib']:.0f}" if "worker_rss_mib" in r else "-"
            print(
                f"| {n} | {name} | {r['wall_s']:.1f} | {r['wall_s'] / base:.2f} | {r['cpu_s']:.2f} | {vs_hta} "
                f"| {r['driver_rss_mib']:.0f} | {worker} | {r.get('straggler', '-')} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
