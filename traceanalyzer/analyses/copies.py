"""Every GPU memcpy and memset, linked to the runtime call and the op that issued it.

Definitions (all per copy):
- direction: from the activity name (`Memcpy HtoD ...` -> HtoD; DtoH, DtoD, PtoP, HtoH);
  memsets have direction `memset`.
- host_memory: `pageable` or `pinned` when the name says so (`Pageable -> Device`), `unknown`
  for host copies whose name does not (older and ROCm traces: `Host -> Device`), null when no
  host memory is involved (DtoD, PtoP, memset).
- gbps: bytes / duration (bytes per ns = GB/s); null without bytes or duration.
- overlap_fraction: the share of the copy's time covered by compute kernels (kernels other than
  communication) on other streams of the same device; exposed_us: the rest of its duration.
- blocked_us: how long the issuing runtime call held the CPU thread when that call blocks (a
  synchronous cudaMemcpy/hipMemcpyWithStream, or a cudaMemcpyAsync involving pageable memory);
  0 for a call that returns at once, null when the copy's launch is not in the trace.
- step: the ProfilerStep whose CPU range holds the issuing call, else the (GPU-extended) step
  window where the copy started.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.intervals import coverage_index, covered, merge
from traceanalyzer.options import CopyOptions
from traceanalyzer.trace import Trace

COMMUNICATION_KERNEL = r"(?i)nccl|rccl|allreduce|allgather|reducescatter|alltoall|broadcast"
DIRECTION = r"^Memcpy\s+(\w+)"
COPY_COLUMNS = [
    "copy_id",
    "kind",
    "direction",
    "host_memory",
    "bytes",
    "start_us",
    "duration_us",
    "gbps",
    "overlap_fraction",
    "exposed_us",
    "blocked_us",
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


@dataclass(frozen=True)
class CopiesResult:
    trace_path: str
    options: CopyOptions
    copies: pl.DataFrame  # one row per memcpy/memset, COPY_COLUMNS
    summary: pl.DataFrame  # by (direction, host_memory, op, range, python_frame)
    per_step: pl.DataFrame  # step, copies, bytes, duration_us, exposed_us, blocked_us
    findings: tuple[dict, ...]
    note: str | None = None


def step_of(ts: pl.DataFrame, steps: pl.DataFrame, at: str, start: str, end: str) -> pl.DataFrame:
    """Add `step`: the step whose [start, end) holds `at` (latest start at or before it)."""
    if steps.is_empty() or ts.is_empty():
        return ts.with_columns(step=pl.lit(None, pl.Int64))
    s = steps.select(pl.col("step").alias("_step"), pl.col(start).alias("_s"), pl.col(end).alias("_e")).sort("_s")
    j = (
        ts.with_row_index("_r")
        .sort(at)
        .join_asof(s, left_on=at, right_on="_s", strategy="backward", check_sortedness=False)
    )
    j = j.with_columns(step=pl.when(pl.col(at).is_not_null() & (pl.col(at) < pl.col("_e"))).then(pl.col("_step")))
    return j.sort("_r").drop("_r", "_step", "_s", "_e")


def _overlap_with_compute(trace: Trace, copies: pl.DataFrame) -> pl.DataFrame:
    """Add `overlap_ns`: time of each copy covered by compute kernels on other streams of its
    device. One union of kernels per (device, copy stream), leaving that stream out."""
    kernels = trace.gpu.filter(
        (pl.col("kind") == "kernel")
        & ~pl.col("name").fill_null("").str.contains(COMMUNICATION_KERNEL)
        & pl.col("device").is_not_null()
    ).select("device", pl.col("stream").alias("_kstream"), "ts_ns", "end_ns")
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


def copy_table(trace: Trace) -> pl.DataFrame:
    """Per-copy facts in ns (internal): the frame behind `CopiesResult.copies`."""
    gpu = trace.gpu.filter(pl.col("kind").is_in(["memcpy", "memset"]))
    name = pl.col("name").fill_null("")
    host = (
        pl.when(pl.col("kind") == "memset")
        .then(pl.lit(None, pl.String))
        .when(name.str.contains("(?i)pageable"))
        .then(pl.lit("pageable"))
        .when(name.str.contains("(?i)pinned"))
        .then(pl.lit("pinned"))
        .when(pl.col("direction").is_in(["HtoD", "DtoH", "HtoH"]))
        .then(pl.lit("unknown"))
        .otherwise(pl.lit(None, pl.String))
    )
    gpu = gpu.with_columns(
        direction=pl.when(pl.col("kind") == "memset").then(pl.lit("memset")).otherwise(name.str.extract(DIRECTION, 1))
    ).with_columns(host_memory=host)
    blocking = blocking_calls(trace).select("runtime_id", _blocking=pl.lit(True))
    calls = trace.runtime.select("runtime_id", pl.col("dur_ns").alias("_call_ns")).join(
        blocking, on="runtime_id", how="left"
    )
    gpu = gpu.join(calls, on="runtime_id", how="left").with_columns(
        blocked_ns=pl.when(pl.col("runtime_id").is_null())
        .then(pl.lit(None, pl.Int64))
        .when(pl.col("_blocking").fill_null(False))
        .then(pl.col("_call_ns"))
        .otherwise(pl.lit(0, pl.Int64))
    )
    gpu = _overlap_with_compute(trace, gpu)
    cpu_step = step_of(gpu, trace.steps, "launch_ts_ns", "cpu_start_ns", "cpu_end_ns").rename({"step": "_cpu_step"})
    gpu = step_of(cpu_step, trace.steps, "ts_ns", "start_ns", "end_ns").with_columns(
        step=pl.coalesce("_cpu_step", "step")
    )
    ctx = op_context(trace, gpu["op_id"])
    return gpu.join(ctx, on="op_id", how="left")


def _findings(copies: pl.DataFrame, n_steps: int, opts: CopyOptions, trace: Trace) -> list[dict]:
    out: list[dict] = []
    floor = opts.min_finding_us

    def site(r: dict) -> str:
        return (
            (r["op"] or "an unknown op")
            + (f" in {r['range']}" if r.get("range") else "")
            + (f" at {r['python_frame']}" if r.get("python_frame") else "")
        )

    def top_site(df: pl.DataFrame, by: str) -> dict:
        return (
            df.group_by("op", "range", "python_frame")
            .agg(pl.col(by).sum())
            .sort(by, descending=True)
            .row(0, named=True)
        )

    pageable = copies.filter(pl.col("host_memory") == "pageable")
    if pageable.height and (
        pageable["blocked_us"].fill_null(0).sum() >= floor or pageable["duration_us"].sum() >= floor
    ):
        s = top_site(pageable, "blocked_us")
        out.append(
            {
                "finding": "pageable_host_memory",
                "copies": pageable.height,
                "bytes": int(pageable["bytes"].fill_null(0).sum()),
                "blocked_us": pageable["blocked_us"].fill_null(0).sum(),
                "duration_us": pageable["duration_us"].sum(),
                "top_site": site(s),
                "message": f"{pageable.height:,} copies to or from pageable host memory held the CPU for "
                f"{pageable['blocked_us'].fill_null(0).sum() / 1000:,.1f} ms in all (most from {site(s)}): allocate "
                f"host tensors with pin_memory=True and copy with non_blocking=True",
            }
        )
    small = copies.filter(
        pl.col("direction").is_in(["HtoD", "DtoH"])
        & (pl.col("bytes") < opts.small_copy_bytes)
        & pl.col("step").is_not_null()
    )
    if small.height and n_steps:
        per = small.group_by("step").agg(
            n=pl.len(), t=pl.col("duration_us").sum(), b=pl.col("blocked_us").fill_null(0).sum()
        )
        many = per.filter(pl.col("n") >= opts.many_small_per_step)
        if many.height and (many["t"].sum() + many["b"].sum()) / many.height >= floor:
            s = top_site(small, "duration_us")
            n = many["n"].mean()
            out.append(
                {
                    "finding": "many_small_copies",
                    "steps": many.height,
                    "copies_per_step": n,
                    "copy_us_per_step": many["t"].mean(),
                    "blocked_us_per_step": many["b"].mean(),
                    "top_site": site(s),
                    "message": f"{n:,.0f} host-device copies under {opts.small_copy_bytes:,} bytes per step in {many.height} steps, "
                    f"{many['t'].mean():,.0f} µs of copy time and {many['b'].mean():,.0f} µs of blocked CPU per step "
                    f"(most from {site(s)}): batch them into one tensor and copy once",
                }
            )
    dtoh = copies.filter(
        (pl.col("direction") == "DtoH") & pl.col("step").is_not_null() & pl.col("blocked_us").is_not_null()
    )
    if dtoh.height and dtoh["blocked_us"].sum() >= floor:
        s = top_site(dtoh, "blocked_us")
        steps_with = dtoh["step"].n_unique()
        out.append(
            {
                "finding": "device_to_host_in_step",
                "copies": dtoh.height,
                "copies_per_step": dtoh.height / steps_with,
                "blocked_us": dtoh["blocked_us"].sum(),
                "top_site": site(s),
                "message": f"{dtoh.height / steps_with:,.1f} device-to-host copies per step inside the step loop hold the CPU "
                f"{dtoh['blocked_us'].sum() / steps_with / 1000:,.1f} ms per step (most from {site(s)}); each forces a sync: "
                f"keep values on the GPU, or copy with non_blocking=True into pinned memory and read them a step later",
            }
        )
    compute_streams = (
        trace.gpu.filter(pl.col("kind") == "kernel")
        .select("device", "stream")
        .unique()
        .with_columns(_compute=pl.lit(True))
    )
    hideable = (
        copies.filter(pl.col("direction").is_in(["HtoD", "DtoH"]))
        .join(compute_streams, on=["device", "stream"], how="left")
        .filter(pl.col("_compute").fill_null(False) & (pl.col("exposed_us") > 0))
    )
    if hideable.height and hideable["exposed_us"].sum() >= floor:
        s = top_site(hideable, "exposed_us")
        out.append(
            {
                "finding": "copies_not_overlapped",
                "copies": hideable.height,
                "exposed_us": hideable["exposed_us"].sum(),
                "top_site": site(s),
                "message": f"{hideable.height:,} host-device copies run on a compute stream with "
                f"{hideable['exposed_us'].sum() / 1000:,.1f} ms not hidden under compute (most from {site(s)}): "
                f"issue them on a side stream (torch.cuda.Stream) from pinned memory with non_blocking=True",
            }
        )
    return out


# What the summary by site and the totals per step add up.
_TOTALS = (
    pl.len().alias("copies"),
    pl.col("bytes").sum(),
    pl.col("duration_us").sum(),
    pl.col("exposed_us").sum(),
    pl.col("blocked_us").sum(),
)


def analyse_copies(trace: Trace, options: CopyOptions | None = None) -> CopiesResult:
    opts = options or CopyOptions()
    t = copy_table(trace)
    if t.is_empty():
        empty = pl.DataFrame(schema={c: pl.Null for c in COPY_COLUMNS})
        return CopiesResult(
            trace.path, opts, empty, pl.DataFrame(), pl.DataFrame(), (), note="no GPU memcpy or memset in this trace"
        )
    origin = trace.meta.origin_ns
    dur = pl.col("end_ns") - pl.col("ts_ns")
    copies = t.sort("blocked_ns", "ts_ns", descending=[True, False], nulls_last=True).select(
        copy_id=pl.col("gpu_id"),
        kind="kind",
        direction="direction",
        host_memory="host_memory",
        bytes="bytes",
        start_us=(pl.col("ts_ns") - origin) / 1000.0,
        duration_us=dur / 1000.0,
        gbps=pl.when((dur > 0) & pl.col("bytes").is_not_null()).then(pl.col("bytes") / dur),
        overlap_fraction=pl.when(dur > 0).then(pl.col("overlap_ns") / dur).otherwise(0.0),
        exposed_us=(dur - pl.col("overlap_ns")).clip(0) / 1000.0,
        blocked_us=pl.col("blocked_ns") / 1000.0,
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
    summary = (
        copies.group_by("direction", "host_memory", "op", "range", "python_frame")
        .agg(*_TOTALS, median_gbps=pl.col("gbps").median())
        .sort("blocked_us", "duration_us", descending=True, nulls_last=True)
    )
    per_step = copies.filter(pl.col("step").is_not_null()).group_by("step").agg(*_TOTALS).sort("step")
    findings = _findings(copies, trace.steps.height, opts, trace)
    return CopiesResult(trace.path, opts, copies, summary, per_step, tuple(findings))
