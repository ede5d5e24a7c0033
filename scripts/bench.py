"""Benchmark loading and analysing big traces against other readers, side by side, in one run.

    python scripts/bench.py /tmp/big_10m.json /tmp/big_100m.json /tmp/big_100m.json.gz \
        /tmp/big_1g.json /tmp/big_1g.json.gz --stages

Build the files with scripts/make_big_trace.py (in /tmp; never commit them). Every case runs in
a fresh process; wall time, CPU time (user + system, threads and worker processes included),
peak RSS (the larger of the child's own maximum, as `/usr/bin/time -f %M` reports it, and the
sum over it and its worker processes sampled every 20 ms while it has any: `SAMPLE_S`) and MB/s
of JSON are printed as a Markdown table. A case past `--max-rss-mb` is killed and reported so. Cases:

- `ta load`: `traceanalyzer.load(path)` with the native decoder; `ta load (pure)`: the same with
  `TRACEANALYZER_NATIVE=0` (the msgspec decoder, worker processes above 256 MB);
- `ta gaps`, `ta summary`: the CLI end to end (`--format json` to /dev/null), native decoder,
  each run with its own empty cache (`XDG_CACHE_HOME` a fresh folder: a first run, which writes
  the cache and reads nothing from it);
- `ta gaps again`, `ta summary after gaps`: the same after an untimed `ta gaps` on that cache
  (its output replayed; the cached Trace and gap results read back);
- `json.load + columns` / `msgspec + columns`: the stdlib's or msgspec's whole-document decode
  plus building per-kind polars columns from the dicts (ts through float64: not exact);
- `DuckDB read_json`: the events array (copied to a temporary file first, untimed: DuckDB reads
  an array of records, not the `traceEvents` member) into a table, ts and dur as DOUBLE, ids as
  HUGEINT (BIGINT fails the whole read on one id above 2^63), pid/tid and args as JSON;
- `HTA load`: Holistic Trace Analysis' `TraceAnalysis(trace_dir=...)`, run with the Python of
  `--hta-python` where HTA is installed there.

Ratios compare `ta load` with its pure path, each other reader with `ta load` and `ta gaps`
on the same JSON, and a first run with one on a cache. `--stages` adds where the time of one
load + gaps goes, native and pure.

The package's bytecode is compiled first (`compileall`), as `pip install` leaves an installed
package and a first run leaves a checkout: a run that compiles every module from source (~0.07 s
at start-up) measures the interpreter, not the tool, and Python skips writing bytecode where
`PYTHONDONTWRITEBYTECODE` is set, as on some CI machines. `--bytecode none` measures that case
(the package's `__pycache__` folders removed, nothing written: its modules compiled at every
start, the libraries' bytecode kept).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import psutil

PY = [sys.executable, "-c"]
LOAD = "import sys; from traceanalyzer import load; load(sys.argv[1])"
BASELINE = r"""
import gc, gzip, json, sys
import polars as pl
gc.disable()  # a fair baseline: collections over millions of dicts only slow it down
p = sys.argv[1]
with open(p, 'rb') as fh:
    gz = fh.read(2) == b'\x1f\x8b'
with (gzip.open(p) if gz else open(p, 'rb')) as fh:
    data = fh.read()
if sys.argv[2] == 'msgspec':
    import msgspec
    doc = msgspec.json.decode(data)
else:
    doc = json.loads(data)
del data
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
DUCKDB = r"""
import sys, duckdb
cols = {'ph': 'VARCHAR', 'cat': 'VARCHAR', 'name': 'VARCHAR', 'pid': 'JSON', 'tid': 'JSON', 'ts': 'DOUBLE',
        'dur': 'DOUBLE', 'id': 'HUGEINT', 'args': 'JSON'}
con = duckdb.connect()
con.execute(f"CREATE TABLE ev AS SELECT * FROM read_json(?, format='array', columns={cols!r})", [sys.argv[1]])
print(con.execute('SELECT count(*) FROM ev').fetchone()[0])
"""
HTA = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"
STAGES = Path(__file__).with_name("bench_stages.py")


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _open(path: Path):
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def json_bytes(path: Path) -> int:
    """Bytes of JSON in the file (inflated)."""
    if not _is_gzip(path):
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(16 << 20):
            n += len(chunk)
    return n


class _Doc(msgspec.Struct):
    traceEvents: msgspec.Raw = msgspec.Raw(b"[]")


def events_array(path: Path, out: Path) -> None:
    """The `traceEvents` array of a trace, alone, for readers of an array of records (DuckDB).
    Made in a child process: a forked child's peak RSS starts at its parent's RSS (Linux keeps
    the high-water mark across exec), so this process must stay small while it measures."""
    if os.environ.get("_TA_BENCH_ARRAY") != "1":
        env = {**os.environ, "_TA_BENCH_ARRAY": "1"}
        subprocess.run([sys.executable, __file__, "--events-array", str(path), str(out)], env=env, check=True)
        return
    with _open(path) as fh:
        doc = msgspec.json.decode(fh.read(), type=_Doc)
    out.write_bytes(bytes(doc.traceEvents))


# How often the RSS of a run with worker processes is summed, and how often a run is looked at
# for workers, on a thread beside the blocking wait (the wall ends when the run does, not at the
# next poll). Polling psutil's whole process table every 20 ms (`children(recursive=True)`) made a
# 104 MB `gaps` 0.11 s slower and its CPU 0.09 s more on 2 vCPUs (2026-12-04, 6 runs in turns: 0.924
# against 0.812 s), the bench perturbing what it measures. A process alone needs no sampling: its
# own high-water mark (`ru_maxrss`) is exact.
SAMPLE_S = 0.02
LOOK_S = 0.1
PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    """The child processes of `pid` and theirs (`/proc/<pid>/task/*/children`: no scan of every
    process, as psutil's `children` does)."""
    kids: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # ended (and reaped) meanwhile
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return kids + [g for k in kids for g in _children(k)]


def _rss(pids: list[int]) -> int:
    """The resident bytes of `pids` summed (`/proc/<pid>/statm`; one gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def measure(cmd: list[str], env: dict | None = None, max_rss_mb: float = 1e12) -> dict:
    """Wall, CPU and peak RSS of one command (killed past max_rss_mb): waited for at once (the
    wall to the moment it ends), its RSS sampled on a thread beside."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    seen = {"peak": 0, "killed": False}
    done = threading.Event()

    def sample() -> None:
        kids, looked = [], -LOOK_S
        while not done.is_set():
            now = time.perf_counter()
            if now - looked >= LOOK_S:
                kids, looked = _children(proc.pid), now
            # with workers, their sum every SAMPLE_S; alone, its own high-water mark says its
            # peak, and its RSS is read every LOOK_S only to kill it past the limit
            seen["peak"] = max(seen["peak"], _rss([proc.pid, *kids]))
            if seen["peak"] > max_rss_mb * 1e6 and not seen["killed"]:
                os.killpg(proc.pid, signal.SIGKILL)
                seen["killed"] = True
            done.wait(SAMPLE_S if kids else LOOK_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak, killed = seen["peak"], seen["killed"]
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace").strip()[-300:]
    if killed:
        err = f"killed past {max_rss_mb:,.0f} MB of RSS"
    # ru_maxrss is the child's own peak (KiB), its waited-for workers' too (and, from the fork,
    # this process's RSS: kept small, see events_array).
    rss = max(peak, usage.ru_maxrss * 1024)
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": rss / 1e6, "rc": proc.returncode, "err": err}


def _ratios(results: list[tuple[Path, float, dict[str, dict]]]) -> list[str]:
    """`ta load` against its pure path; every other reader against `ta load` and `ta gaps` of the
    same trace, or of another file of the same JSON (a reader run once on the plain file stands
    for the gzipped one too)."""
    lines = []
    for path, mb, best in results:
        for mine, other in (("ta load", "ta load (pure)"), ("ta gaps", "ta gaps (pure)")):
            a, b = best.get(mine), best.get(other)
            if a and b and a["rc"] == b["rc"] == 0:
                lines.append(
                    f"{path.name}: {mine} native vs pure: {b['wall_s'] / a['wall_s']:.1f}x faster (wall), "
                    f"{b['cpu_s'] / a['cpu_s']:.1f}x less CPU, {a['peak_rss_mb'] / b['peak_rss_mb']:.2f}x the peak RSS"
                )
        for first, then in (("ta gaps", "ta gaps again"), ("ta summary", "ta summary after gaps")):
            a, b = best.get(first), best.get(then)
            if a and b and a["rc"] == b["rc"] == 0:
                lines.append(
                    f"{path.name}: {then} vs {first} on an empty cache: {a['wall_s'] / b['wall_s']:.1f}x faster (wall)"
                )
        for base in ("HTA load", "json.load + columns", "msgspec + columns", "DuckDB read_json"):
            src, b = path, best.get(base)
            if b is None:
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


def _has(python: str, module: str) -> bool:
    return (
        Path(python).exists()
        and subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode == 0
    )


Case = tuple[str, list, dict, list]  # name, command, environment, untimed commands before it (same cache)
CACHED = "_TA_BENCH_OWN_CACHE"  # in a case's environment: each run gets an empty cache folder


def _cases(path: Path, mb: float, args: argparse.Namespace, ta: str, tmp: Path) -> list[Case]:
    env = {**os.environ, **args.bytecode_env}
    pure = {**env, "TRACEANALYZER_NATIVE": "0"}
    own = {**env, CACHED: "1"}
    gaps = [ta, "gaps", str(path), "--format", "json"]
    summary = [ta, "summary", str(path), "--format", "json"]
    cases = [("ta load", PY + [LOAD, str(path)], env, []), ("ta load (pure)", PY + [LOAD, str(path)], pure, [])]
    cases.append(("ta gaps", gaps, own, []))
    if mb <= args.pure_gaps_max_mb:
        cases.append(("ta gaps (pure)", gaps, {**pure, CACHED: "1"}, []))
    cases.append(("ta summary", summary, own, []))
    cases.append(("ta gaps again", gaps, own, [gaps]))
    cases.append(("ta summary after gaps", summary, own, [gaps]))
    plain_twin = any(abs(m - mb) < 0.5 and not _is_gzip(p) for p, m in args.sizes if p != path)
    once = not (_is_gzip(path) and plain_twin)  # readers of the whole document: the plain file stands for both
    if mb <= args.baseline_max_mb and once:
        cases.append(("json.load + columns", PY + [BASELINE, str(path), "json"], env, []))
        cases.append(("msgspec + columns", PY + [BASELINE, str(path), "msgspec"], env, []))
        if _has(sys.executable, "duckdb"):
            array = tmp / f"{path.name}.events.json"
            events_array(path, array)
            cases.append(("DuckDB read_json", PY + [DUCKDB, str(array)], env, []))
    if args.has_hta and mb <= args.hta_max_mb and once:
        d = tmp / f"hta_{path.name}"
        d.mkdir()
        os.symlink(path.resolve(), d / path.name)
        cases.append(("HTA load", [args.hta_python, "-c", HTA, str(d)], env, []))
    return [c for c in cases if c[0] not in args.skip]


def _run_case(cmd: list[str], env: dict, before: list[list[str]], max_rss_mb: float) -> dict:
    """One measured run; a case marked `CACHED` in its own empty cache, `before` run in it first."""
    if CACHED not in env:
        return measure(cmd, env, max_rss_mb)
    with tempfile.TemporaryDirectory(prefix="ta_bench_cache_") as cache:
        env = {k: v for k, v in env.items() if k != CACHED} | {"XDG_CACHE_HOME": cache}
        env.pop("TRACEANALYZER_NO_CACHE", None)
        for b in before:
            subprocess.run(b, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        return measure(cmd, env, max_rss_mb)


def _bytecode(mode: str) -> tuple[dict[str, str], str]:
    """The children's environment for `--bytecode` and how the header says it."""
    if mode == "none":
        import traceanalyzer

        for cache in Path(traceanalyzer.__file__).parent.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)  # the package's only: the libraries keep theirs
        return {"PYTHONDONTWRITEBYTECODE": "1"}, "the package compiled from source at every start"
    compile_package()
    return {}, "bytecode compiled ahead"


def compile_package() -> None:
    """The package's bytecode, written as an install writes it (also for `bench_ranks.py`)."""
    import compileall

    import traceanalyzer

    compileall.compile_dir(Path(traceanalyzer.__file__).parent, quiet=1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--events-array"]:
        events_array(Path(argv[1]), Path(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--hta-python", default="/work/venv-hta/bin/python")
    ap.add_argument("--skip", action="append", default=[], help="case names to skip (e.g. 'HTA load')")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case, interleaved; the median run is reported")
    ap.add_argument("--baseline-max-mb", type=float, default=1100.0, help="whole-document readers up to this size")
    ap.add_argument("--hta-max-mb", type=float, default=1100.0, help="HTA up to this size (1 GB: minutes, ~5 GB)")
    ap.add_argument("--pure-gaps-max-mb", type=float, default=200.0, help="`ta gaps (pure)` up to this size")
    ap.add_argument("--max-rss-mb", type=float, default=8000.0, help="kill a case past this peak RSS")
    ap.add_argument("--stages", action="store_true", help="also: where one load + gaps spends its time")
    ap.add_argument("--bytecode", choices=("compiled", "none"), default="compiled", help="see the module docstring")
    args = ap.parse_args(argv)
    ta = shutil.which("traceanalyzer", path=str(Path(sys.executable).parent)) or "traceanalyzer"
    args.has_hta = _has(args.hta_python, "hta")
    args.sizes = [(p, json_bytes(p) / 1e6) for p in args.traces]
    results: list[tuple[Path, float, dict[str, dict]]] = []
    with tempfile.TemporaryDirectory(prefix="ta_bench_") as tmpdir:
        args.bytecode_env, bytecode = _bytecode(args.bytecode)
        print(
            f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
            f"{psutil.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"Python {platform.python_version()} ({bytecode}), load average at start {os.getloadavg()[0]:.1f}\n"
        )
        print("| trace | JSON MB | case | wall s | CPU s | peak RSS MB | RSS / JSON | MB/s |")
        print("|---|---|---|---|---|---|---|---|")
        for path, mb in args.sizes:
            cases = _cases(path, mb, args, ta, Path(tmpdir))
            runs: dict[str, list[dict]] = {n: [] for n, *_ in cases}
            for _ in range(max(1, args.repeat)):  # interleaved: a load spike hits every case alike
                for name, cmd, env, before in cases:
                    runs[name].append(_run_case(cmd, env, before, args.max_rss_mb))
            best: dict[str, dict] = {}
            for name, *_ in cases:
                rs = sorted(runs[name], key=lambda r: r["wall_s"])
                r = best[name] = rs[len(rs) // 2]
                note = "" if r["rc"] == 0 else f" (exit {r['rc']}: {r['err']})"
                print(
                    f"| {path.name} | {mb:,.0f} | {name}{note} | {r['wall_s']:.2f} | {r['cpu_s']:.1f} | "
                    f"{r['peak_rss_mb']:,.0f} | {r['peak_rss_mb'] / mb:.2f} | {mb / r['wall_s']:.1f} |",
                    flush=True,
                )
            results.append((path, mb, best))
    ratios = _ratios(results)
    if ratios:
        print()
        for line in ratios:
            print(f"- {line}")
    if args.stages:
        for path, _mb in args.sizes:
            for native in ("1", "0"):
                env = {**os.environ, "TRACEANALYZER_NATIVE": native}
                out = subprocess.run([sys.executable, str(STAGES), str(path)], capture_output=True, env=env, text=True)
                print("\n" + (out.stdout.strip() or f"{path.name}: stages failed: {out.stderr.strip()[-300:]}"))
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
