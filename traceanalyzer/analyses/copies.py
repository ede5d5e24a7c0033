"""Every GPU memcpy and memset, linked to the runtime call and the op that issued it.

Definitions (all per copy):
- direction: from the activity name (`Memcpy HtoD ...` -> HtoD; DtoH, DtoD, PtoP, HtoH);
  memsets have direction `memset`.
- host_memory: `pageable` or `pinned` when the name says so (`Pageable -> Device`), `unknown`
  for host copies whose name does not (older and ROCm traces: `Host -> Device`), null when no
  host memory is involved (DtoD, PtoP, memset).
- gbps: bytes / duration (bytes per ns = GB/s); null without bytes or duration.
- overlap_fraction: the share of the copy's time covered by compute kernels (kernels other than
  communication) on other streams of the same device; exposed_ns: the rest of its duration.
- blocked_ns: how long the issuing runtime call held the CPU thread when that call blocks (a
  synchronous cudaMemcpy/hipMemcpyWithStream, or a cudaMemcpyAsync involving pageable memory);
  0 for a call that returns at once, null when the copy's launch is not in the trace.
- step: the ProfilerStep whose CPU range holds the issuing call, else the (GPU-extended) step
  window where the copy started; null outside every step (without ProfilerStep the trace is one
  step, step null, and every copy counts in it).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import windows
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.intervals import coverage_index, covered, merge
from traceanalyzer.options import CopyOptions, Options
from traceanalyzer.patterns import COPY_DIRECTION, PAGEABLE_COPY, PINNED_COPY
from traceanalyzer.reprs import Compact, Unread
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown

COPY_COLUMNS = [
    "copy_id",
    "kind",
    "direction",
    "host_memory",
    "bytes",
    "start_ns",
    "duration_ns",
    "gbps",
    "overlap_fraction",
    "exposed_ns",
    "blocked_ns",
    "device",
    "stream",
    "api",
    "op",
    "range",
    "python_frame",
    "op_chain",
    "step",
    "name",
]


@dataclass(frozen=True, repr=False)
class CopiesResult(Compact):
    """Every memcpy and memset of a trace, by site and per step (see the module docstring).

    The tables hold int64 ns on the trace clock (`*_ns`, sums as integers); `copies`, `summary`
    and `per_step` are their display views in µs (`units.display_us`: `start_us` from the trace
    start), the columns the outputs print."""

    trace_path: str
    options: CopyOptions
    copies_ns: pl.DataFrame  # one row per memcpy/memset, COPY_COLUMNS
    summary_ns: pl.DataFrame  # by (direction, host_memory, op, range, python_frame)
    per_step_ns: pl.DataFrame  # step, copies, bytes, duration_ns, exposed_ns, blocked_ns
    origin_ns: int = 0  # the trace start
    note: str | None = None

    # the µs display views of the ns tables (units.Shown)
    copies = Shown("copies_ns")
    summary = Shown("summary_ns")
    per_step = Shown("per_step_ns")


def _overlap_with_compute(trace: Trace, copies: pl.DataFrame, collective_pattern: str) -> pl.DataFrame:
    """Add `overlap_ns`: time of each copy covered by compute kernels on other streams of its
    device. One union of kernels per (device, copy stream), leaving that stream out."""
    kernels = (  # lazy: the filter copies only the four columns kept
        trace.gpu.lazy()
        .filter(
            (pl.col("kind") == "kernel")
            & ~pl.col("name").fill_null("").str.contains(collective_pattern)
            & pl.col("device").is_not_null()
        )
        .select("device", pl.col("stream").alias("_kstream"), "ts_ns", "end_ns")
        .collect()
    )
    streams = copies.select("device", pl.col("stream").alias("_cstream")).drop_nulls().unique()
    if kernels.is_empty() or streams.is_empty():
        return copies.with_columns(overlap_ns=pl.lit(0, pl.Int64))
    others = kernels.join(streams, on="device").filter(pl.col("_kstream") != pl.col("_cstream"))
    index = coverage_index(merge(others, ["device", "_cstream"]), ["device", "_cstream"])
    q = copies.with_columns(_cstream=pl.col("stream"))
    return (
        covered(q, index, ["device", "_cstream"], "ts_ns", "end_ns", "overlap_ns")
        .drop("_cstream")
        .with_columns(pl.col("overlap_ns").fill_null(0))
    )


def copy_table(trace: Trace, collective_pattern: str, blocking: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per-copy facts in ns (internal): the frame behind `CopiesResult.copies`; `blocking` is
    the trace's `cpu_activity.blocking_calls` when already computed."""
    # each chain of frame steps is one polars query (`chain.collect`), run as the eager calls were
    gpu = trace.gpu.lazy().filter(pl.col("kind").is_in(["memcpy", "memset"]))
    name = pl.col("name").fill_null("")
    host = (
        pl.when(pl.col("kind") == "memset")
        .then(pl.lit(None, pl.String))
        .when(name.str.contains(PAGEABLE_COPY))
        .then(pl.lit("pageable"))
        .when(name.str.contains(PINNED_COPY))
        .then(pl.lit("pinned"))
        .when(pl.col("direction").is_in(["HtoD", "DtoH", "HtoH"]))
        .then(pl.lit("unknown"))
        .otherwise(pl.lit(None, pl.String))
    )
    gpu = gpu.with_columns(
        direction=pl.when(pl.col("kind") == "memset")
        .then(pl.lit("memset"))
        .otherwise(name.str.extract(COPY_DIRECTION, 1))
    ).with_columns(host_memory=host)
    blocking = (
        (blocking if blocking is not None else blocking_calls(trace))
        .lazy()
        .select("runtime_id", _blocking=pl.lit(True))
    )
    calls = (
        trace.runtime.lazy()
        .select("runtime_id", pl.col("dur_ns").alias("_call_ns"))
        .join(blocking, on="runtime_id", how="left")
    )
    gpu = (
        gpu.join(calls, on="runtime_id", how="left")
        .with_columns(
            blocked_ns=pl.when(pl.col("runtime_id").is_null())
            .then(pl.lit(None, pl.Int64))
            .when(pl.col("_blocking").fill_null(False))
            .then(pl.col("_call_ns"))
            .otherwise(pl.lit(0, pl.Int64))
        )
        .pipe(chain.collect)
    )
    gpu = _overlap_with_compute(trace, gpu, collective_pattern)
    cpu_step = windows.step_of(gpu, trace.steps, "launch_ts_ns").rename({"step": "_cpu_step"})
    gpu = windows.step_of(cpu_step, trace.steps, "ts_ns", "start_ns", "end_ns").with_columns(
        step=pl.coalesce("_cpu_step", "step")
    )
    ctx = op_context(trace, gpu["op_id"])
    return gpu.join(ctx, on="op_id", how="left")


# What the summary by site and the totals per step add up.
_TOTALS = (
    pl.len().alias("copies"),
    pl.col("bytes").sum(),
    pl.col("duration_ns").sum(),
    pl.col("exposed_ns").sum(),
    pl.col("blocked_ns").sum(),
)


def analyse_copies(
    trace: Trace,
    options: Options | CopyOptions | None = None,
    *,
    blocking: pl.DataFrame | None = None,
    lean: bool = False,
) -> CopiesResult:
    """Every memcpy and memset with its cost and its site, by site and per step; `blocking` is
    the trace's `cpu_activity.blocking_calls` when already computed (the Session passes it).
    `lean` (a rank's row): `copies_ns` only, the by-site and per-step tables `reprs.Unread`."""
    bundle = Options.of(options)
    opts = bundle.copies
    t = copy_table(trace, bundle.patterns.collective_pattern, blocking)
    if t.is_empty():
        empty = pl.DataFrame(schema={c: pl.Null for c in COPY_COLUMNS})
        return CopiesResult(
            trace.path,
            opts,
            empty,
            pl.DataFrame(),
            pl.DataFrame(),
            trace.meta.origin_ns,
            note="no GPU memcpy or memset in this trace",
        )
    dur = pl.col("end_ns") - pl.col("ts_ns")
    copies = (
        t.lazy()
        .sort("blocked_ns", "ts_ns", descending=[True, False], nulls_last=True)
        .select(
            copy_id=pl.col("gpu_id"),
            kind="kind",
            direction="direction",
            host_memory="host_memory",
            bytes="bytes",
            start_ns=pl.col("ts_ns"),
            duration_ns=dur,
            gbps=pl.when((dur > 0) & pl.col("bytes").is_not_null()).then(pl.col("bytes") / dur),
            overlap_fraction=pl.when(dur > 0).then(pl.col("overlap_ns") / dur).otherwise(0.0),
            exposed_ns=(dur - pl.col("overlap_ns")).clip(0),
            blocked_ns=pl.col("blocked_ns"),
            device="device",
            stream="stream",
            api=pl.col("launch_api"),
            op="op",
            range="range",
            python_frame="python_frame",
            op_chain="op_chain",
            step="step",
            name="name",
        )
        .pipe(chain.collect)
    )
    if lean:
        unread = Unread("CopiesResult.summary_ns / per_step_ns")
        return CopiesResult(trace.path, opts, copies, unread, unread, trace.meta.origin_ns)
    summary = (
        copies.lazy()
        .group_by("direction", "host_memory", "op", "range", "python_frame")
        .agg(*_TOTALS, median_gbps=pl.col("gbps").median())
        # ties broken by the site itself: the same trace gives the same JSON every run
        .sort(
            ["blocked_ns", "duration_ns", "direction", "host_memory", "op", "range", "python_frame"],
            descending=[True, True, False, False, False, False, False],
            nulls_last=True,
        )
    ).pipe(chain.collect)
    # Without ProfilerStep the trace is one step (step null): every copy counts in it.
    counted = copies if trace.steps.is_empty() else copies.filter(pl.col("step").is_not_null())
    per_step = counted.group_by("step").agg(*_TOTALS).sort("step")
    return CopiesResult(trace.path, opts, copies, summary, per_step, trace.meta.origin_ns)
