"""Benchmark `traceanalyzer.load` against the plain way of reading a trace.

Methods, each run in a fresh subprocess so that peak RSS belongs to one method alone, repeated
N times and interleaved (ours, baseline, ours, baseline, ...) so that machine noise hits both:

  ours      `traceanalyzer.load(path)`: streamed, typed decoding into polars tables, with the
            nesting and launch links built on top.
  ours_tables  for context: only the loader's decoding stage (`read_tables`), the typed tables
            before any linking, i.e. the same work the baseline does.
  baseline  stdlib gzip + `json.load` of the whole file, then polars DataFrames of the ops,
            runtime and GPU events (name, pid, tid, ts, dur and the main args) from the dicts.

Reported per method: median wall time and CPU time (user + sys, all threads, worker
subprocesses included) of the load itself, peak RSS of the child process (interpreter and
imports included; summed with any loader worker processes, sampled with psutil, when that is
larger) and the RSS the imports alone took. Ratios are baseline / ours (above 1: ours is faster or smaller).

    python scripts/bench_load.py [TRACE] [-n 3] [--json]
    python scripts/bench_load.py TRACE --stages   # where one serial load + gaps spends its time
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "v100_memory_events.json.gz"
METHODS = ("ours", "baseline", "ours_tables")

# What the baseline builds: the same three tables as the loader, from the same categories.
OPS_CATS = {"cpu_op", "Operator", "user_annotation"}
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}
GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
ARGS = {
    "ops": ("External id", "Sequence number", "Fwd thread id"),
    "runtime": ("correlation", "External id", "cbid"),
    "gpu": ("device", "stream", "correlation", "External id", "bytes"),
}


# -- child side ---------------------------------------------------------------------------------
def _cpu_s() -> float:
    """User + sys CPU of this process and of its waited-for children (loader workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _maxrss_mb() -> float:
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


class TreeRssSampler:
    """Peak of the summed RSS of this process and its descendants, sampled every 10 ms.

    ru_maxrss is exact but per process; the loader may decode big traces in worker
    subprocesses, whose memory counts too. Without psutil only this process is measured."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        try:
            import psutil
        except ImportError:
            self._proc = None
            return
        import threading

        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        total = 0
        for p in [self._proc, *self._proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except Exception:  # a worker that just exited
                pass
        self.peak_mb = max(self.peak_mb, total / 2**20)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self._sample()

    def stop(self) -> float:
        if self._proc is not None:
            self._stop.set()
            self._thread.join()
            self._sample()
        return self.peak_mb


def _run_ours(path: str) -> dict[str, int]:
    import traceanalyzer

    trace = traceanalyzer.load(path)
    return {"ops": trace.ops.height, "runtime": trace.runtime.height, "gpu": trace.gpu.height}


def _run_ours_tables(path: str) -> dict[str, int]:
    from traceanalyzer.load.loader import read_tables
    from traceanalyzer.load.source import ByteSource

    with ByteSource(path) as src:
        tables = read_tables(src)[0]
    return {"ops": tables["op"].height, "runtime": tables["runtime"].height, "gpu": tables["gpu"].height}


def _run_baseline(path: str) -> dict[str, int]:
    import gzip

    import polars as pl

    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        doc = json.load(fh)
    rows: dict[str, list[dict]] = {"ops": [], "runtime": [], "gpu": []}
    for e in doc["traceEvents"]:
        cat = e.get("cat")
        table = "ops" if cat in OPS_CATS else "runtime" if cat in RUNTIME_CATS else "gpu" if cat in GPU_CATS else None
        if table is not None:
            rows[table].append(e)
    frames = {}
    for table, events in rows.items():
        cols: dict[str, list] = {
            "name": [e.get("name") for e in events],
            "pid": [e.get("pid") for e in events],
            "tid": [e.get("tid") for e in events],
            "ts": [e.get("ts") for e in events],
            "dur": [e.get("dur") for e in events],
        }
        for key in ARGS[table]:
            cols[key] = [(e.get("args") or {}).get(key) for e in events]
        df = pl.DataFrame(cols, strict=False)
        frames[table] = df.with_columns(
            ts_ns=(pl.col("ts").cast(pl.Float64) * 1000).round(0).cast(pl.Int64),
            dur_ns=(pl.col("dur").cast(pl.Float64) * 1000).round(0).cast(pl.Int64),
        )
    return {table: df.height for table, df in frames.items()}


def child(method: str, path: str) -> None:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    # Imports are not part of the timed load, but they are in the peak RSS; report them apart.
    if method in ("ours", "ours_tables"):
        import traceanalyzer  # noqa: F401
    else:
        import gzip  # noqa: F401

        import polars  # noqa: F401
    rss_imports = _maxrss_mb()
    sampler = TreeRssSampler()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    rows = {"ours": _run_ours, "ours_tables": _run_ours_tables, "baseline": _run_baseline}[method](path)
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    tree_peak = sampler.stop()
    print(
        json.dumps(
            {
                "wall_s": wall,
                "cpu_s": cpu,
                # this process exactly, or with its workers (sampled) when that is larger
                "peak_rss_mb": max(_maxrss_mb(), tree_peak),
                "self_peak_rss_mb": _maxrss_mb(),
                "imports_rss_mb": rss_imports,
                "rows": rows,
            }
        )
    )


# -- parent side --------------------------------------------------------------------------------
def run_once(method: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", method, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    if proc.returncode != 0:
        raise SystemExit(f"{method} run failed:\n{proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench(path: Path, repeat: int) -> dict:
    runs: dict[str, list[dict]] = {m: [] for m in METHODS}
    for _ in range(repeat):
        for method in METHODS:
            runs[method].append(run_once(method, path))
    summary = {}
    for method, rs in runs.items():
        summary[method] = {
            key: statistics.median(r[key] for r in rs) for key in ("wall_s", "cpu_s", "peak_rss_mb", "imports_rss_mb")
        } | {"rows": rs[0]["rows"], "runs": rs}
    ours, base, tables = summary["ours"], summary["baseline"], summary["ours_tables"]
    ratios = {
        "wall": base["wall_s"] / ours["wall_s"],
        "cpu": base["cpu_s"] / ours["cpu_s"],
        "peak_rss": base["peak_rss_mb"] / ours["peak_rss_mb"],
        # what the load itself added on top of the imports
        "load_rss": (base["peak_rss_mb"] - base["imports_rss_mb"])
        / max(1e-9, ours["peak_rss_mb"] - ours["imports_rss_mb"]),
        # the like-for-like comparison: decoding into tables, no links
        "tables_wall": base["wall_s"] / tables["wall_s"],
        "tables_cpu": base["cpu_s"] / tables["cpu_s"],
        "tables_peak_rss": base["peak_rss_mb"] / tables["peak_rss_mb"],
    }
    return {
        "trace": str(path),
        "file_mb": path.stat().st_size / 2**20,
        "repeat": repeat,
        "cpus": os.cpu_count(),
        "methods": summary,
        "ratios_baseline_over_ours": ratios,
    }


def render(result: dict) -> str:
    lines = [
        f"trace: {result['trace']} ({result['file_mb']:.1f} MiB on disk), "
        f"{result['repeat']} runs per method, interleaved, {result['cpus']} CPUs; medians",
        "",
        f"{'method':<12} {'wall s':>8} {'cpu s':>8} {'peak RSS MiB':>13} {'imports MiB':>12} {'load MiB':>9}  rows (ops/runtime/gpu)",
    ]
    for method, m in result["methods"].items():
        rows = "/".join(f"{m['rows'][t]:,}" for t in ("ops", "runtime", "gpu"))
        lines.append(
            f"{method:<12} {m['wall_s']:>8.2f} {m['cpu_s']:>8.2f} {m['peak_rss_mb']:>13.0f} "
            f"{m['imports_rss_mb']:>12.0f} {m['peak_rss_mb'] - m['imports_rss_mb']:>9.0f}  {rows}"
        )
    r = result["ratios_baseline_over_ours"]
    lines += [
        "",
        f"baseline / ours: wall {r['wall']:.2f}x, cpu {r['cpu']:.2f}x, peak RSS {r['peak_rss']:.2f}x, "
        f"RSS added by the load {r['load_rss']:.2f}x",
        f"baseline / ours_tables: wall {r['tables_wall']:.2f}x, cpu {r['tables_cpu']:.2f}x, "
        f"peak RSS {r['tables_peak_rss']:.2f}x",
        "(ours also builds op nesting, runtime->op and GPU->launch links, steps; the baseline does not,"
        " and keeps ts as float64)",
    ]
    return "\n".join(lines)


def stages(path: Path) -> list[tuple[str, float, float]]:
    """Where one serial load + `gaps` spends its time: (stage, CPU s, wall s), measured in this
    process by wrapping the loader's steps. CPU time includes polars' own threads."""
    import importlib
    import time
    from collections import defaultdict

    tables = importlib.import_module("traceanalyzer.load.tables")
    source_mod = importlib.import_module("traceanalyzer.load.source")
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])

    def timed(fn, key):
        def run(*a, **k):
            c, w = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[key][0] += time.process_time() - c
                acc[key][1] += time.perf_counter() - w

        return run

    class Decoder:  # msgspec's Decoder cannot be patched: wrap it
        def __init__(self, d):
            self.decode = timed(d.decode, "msgspec decode")

    tables.DECODER = Decoder(tables.DECODER)
    tables.bucket = timed(tables.bucket, "bucket by kind + (cat, ph) counts")
    for k in list(tables.COLUMN_BUILDERS):
        tables.COLUMN_BUILDERS[k] = timed(tables.COLUMN_BUILDERS[k], "column lists (Python)")
        tables.FRAME_BUILDERS[k] = timed(tables.FRAME_BUILDERS[k], "polars frames + exact ns")
    source_mod.ByteSource.read = timed(source_mod.ByteSource.read, "read + inflate")

    from traceanalyzer.analyses.gaps import analyse_gaps
    from traceanalyzer.load.build import build_trace
    from traceanalyzer.load.sanitize import sanitize
    from traceanalyzer.options import GapOptions

    c0, w0 = time.process_time(), time.perf_counter()
    with source_mod.ByteSource(path) as src:
        raw, meta, counts, warnings = tables.read_serial(src, use_native=False)  # the pure stages
    read = (time.process_time() - c0, time.perf_counter() - w0)
    inner = [sum(v[i] for v in acc.values()) for i in (0, 1)]
    out = [(k, v[0], v[1]) for k, v in acc.items()]
    out.append(("framing, concat, rest of the read", read[0] - inner[0], read[1] - inner[1]))
    c, w = time.process_time(), time.perf_counter()

    def lap(name: str) -> None:
        nonlocal c, w
        out.append((name, time.process_time() - c, time.perf_counter() - w))
        c, w = time.process_time(), time.perf_counter()

    raw, more = sanitize(raw, counts)
    lap("sanitize")
    trace = build_trace(str(path), raw, meta, counts, warnings + more)
    lap("build_trace (nesting, links)")
    analyse_gaps(trace, GapOptions())
    lap("analyse_gaps")
    return out


def render_stages(path: Path, rows: list[tuple[str, float, float]]) -> str:
    mb = _json_mb(path)
    lines = [
        f"{path.name}: {mb:,.0f} MB of JSON, serial load + gaps, one process",
        "",
        "| stage | CPU s | wall s | share of CPU | MB/s if only this stage ran (one core) |",
        "|---|---|---|---|---|",
    ]
    total = sum(r[1] for r in rows)
    for name, cpu, wall in rows:
        lines.append(f"| {name} | {cpu:.2f} | {wall:.2f} | {cpu / total:.0%} | {mb / max(cpu, 1e-9):,.0f} |")
    lines.append(f"| total | {total:.2f} | {sum(r[2] for r in rows):.2f} | 100% | {mb / total:,.0f} |")
    return "\n".join(lines)


def _json_mb(path: Path) -> float:
    import gzip

    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size / 1e6
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(16 << 20):
            n += len(chunk)
    return n / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("-n", "--repeat", type=int, default=3, help="runs per method (default 3)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--stages", action="store_true", help="instead: CPU and wall time of each stage of one serial load + gaps"
    )
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, str(args.trace))
        return
    if args.stages:
        print(render_stages(args.trace, stages(args.trace)))
        return
    if not args.trace.is_file():
        parser.error(f"no such trace: {args.trace}")
    result = bench(args.trace, args.repeat)
    print(json.dumps(result, indent=2) if args.json else render(result))


if __name__ == "__main__":
    main()
