"""Where one load + `gaps` of a trace spends its time, by stage, in this process (run by
scripts/bench.py --stages; TRACEANALYZER_NATIVE=0 for the pure path, which runs serially here so
that its stages can be timed: worker processes would hide them).

    python scripts/bench_stages.py /tmp/big_100m.json

CPU is user + system of the whole process during the stage (polars' and the decoder's threads
included); the native path's reading and inflating of gzip runs on its own thread beside the decoding,
so its CPU is counted apart (that thread's own clock) and taken out of the stage it overlapped.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

T0 = (time.process_time(), time.perf_counter())
import traceanalyzer  # noqa: E402
from traceanalyzer.session import Session  # noqa: E402

IMPORTS = (time.process_time() - T0[0], time.perf_counter() - T0[1])
# On the native path gzip is read and inflated on its own thread (`source.Prefetch`); a plain
# local file is read on the main thread, straight into the splitter's buffer.
READ = "read + inflate (own thread for gzip)"


def main(path: Path) -> None:
    os.environ.setdefault("TRACEANALYZER_WORKERS", "1" if os.environ.get("TRACEANALYZER_NATIVE") == "0" else "")
    if not os.environ["TRACEANALYZER_WORKERS"]:
        del os.environ["TRACEANALYZER_WORKERS"]
    from traceanalyzer.load import native, source, tables
    from traceanalyzer.load.build import build_trace
    from traceanalyzer.load.sanitize import sanitize

    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    reader_cpu = [0.0]

    def timed(fn, key):
        def run(*a, **k):
            c, w, r = time.process_time(), time.perf_counter(), reader_cpu[0]
            try:
                return fn(*a, **k)
            finally:
                acc[key][0] += time.process_time() - c - (reader_cpu[0] - r)
                acc[key][1] += time.perf_counter() - w

        return run

    def readinto(self, *a, **k):  # `read` goes through it too
        c, w = time.thread_time(), time.perf_counter()
        try:
            return plain_readinto(self, *a, **k)
        finally:
            reader_cpu[0] += time.thread_time() - c
            acc[READ][0] += time.thread_time() - c
            acc[READ][1] += time.perf_counter() - w

    plain_readinto = source.ByteSource.readinto
    source.ByteSource.readinto = readinto
    use_native = native.enabled()
    if use_native:
        native.decode = timed(native.decode, "native decode (Rust, threads, GIL released)")
        native.add_pieces = timed(native.add_pieces, "native: chunk appended to the trace's columns (Rust)")
        native.frames = timed(native.frames, "native columns -> polars (once, Arrow, no copies)")
    else:

        class Decoder:  # msgspec's Decoder cannot be patched: wrap it
            def __init__(self, d):
                self.decode = timed(d.decode, "msgspec decode")

        tables.DECODER = Decoder(tables.DECODER)
        tables.bucket = timed(tables.bucket, "bucket by kind + (cat, ph) counts")
        for k in list(tables.COLUMN_BUILDERS):
            tables.COLUMN_BUILDERS[k] = timed(tables.COLUMN_BUILDERS[k], "column lists (Python)")
            tables.FRAME_BUILDERS[k] = timed(tables.FRAME_BUILDERS[k], "polars frames + exact ns")

    rows = [("imports", *IMPORTS)]
    threaded = False  # the reading ran on Prefetch's thread (native, gzip or not a local file)
    c0, w0 = time.process_time(), time.perf_counter()
    with source.ByteSource(path) as src:
        raw, meta, counts, warnings = tables.read_serial(src)
        json_mb = src.decompressed_bytes / 1e6
        threaded = use_native and (src.compressed or not src.regular)
    read_cpu, read_wall = time.process_time() - c0, time.perf_counter() - w0
    inner = {k: v for k, v in acc.items()}
    rows += [(k, v[0], v[1]) for k, v in inner.items()]
    overlapped = inner.get(READ, [0, 0])[1] if threaded else 0.0
    rest_wall = read_wall - sum(v[1] for v in inner.values()) + overlapped
    rows.append(
        ("splitting, framing, concat (rest of the read)", read_cpu - sum(v[0] for v in inner.values()), rest_wall)
    )
    c, w = time.process_time(), time.perf_counter()

    def lap(name: str) -> None:
        nonlocal c, w
        rows.append((name, time.process_time() - c, time.perf_counter() - w))
        c, w = time.process_time(), time.perf_counter()

    raw, more = sanitize(raw, counts)
    lap("sanitize")
    trace = build_trace(str(path), raw, meta, counts, warnings + more)
    lap("build_trace (nesting, links)")
    _ = Session(trace).gaps
    lap("gaps analyses (Session.gaps)")
    total_cpu = sum(r[1] for r in rows)
    total_wall = IMPORTS[1] + read_wall + sum(r[2] for r in rows[len(inner) + 2 :])
    how = "native decoder" if use_native else "pure Python decoder, serial"
    print(f"{path.name}: {json_mb:,.0f} MB of JSON, load + gaps, {how}, traceanalyzer {traceanalyzer.__version__}")
    print()
    print("| stage | CPU s | wall s | share of CPU | MB/s of this stage alone (CPU) |")
    print("|---|---|---|---|---|")
    for name, cpu, wall in rows:
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {cpu / total_cpu:.0%} | {json_mb / max(cpu, 1e-9):,.0f} |")
    print(f"| total | {total_cpu:.2f} | {total_wall:.2f} (read {read_wall:.2f}) | 100% | {json_mb / total_cpu:,.0f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
