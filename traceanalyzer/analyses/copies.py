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

import sys
from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import windows
from traceanalyzer.analyses.arrays import asof_covered, covered_between, union_sorted
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.intervals import (
    SMALL_ROWS,
    collected,
    coverage_index,
    covered,
    filled,
    filter_rows,
    merge_sorted,
)
from traceanalyzer.analyses.op_tree import is_row_number
from traceanalyzer.links import int64_arrays
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


def compute_kernels(trace: Trace, collective_pattern: str) -> pl.DataFrame:
    """device, _kstream, ts_ns, end_ns of every kernel with a device that is not communication.
    The pattern is tried once per distinct name (a few hundred, not every kernel: the regex
    over 93k names was a third of the copies' overlap at 311 MB); a null name reads as ""."""
    kernels = (  # lazy: the filter copies only the five columns kept
        trace.gpu.lazy()
        .filter((pl.col("kind") == "kernel") & pl.col("device").is_not_null())
        .select("name", "device", pl.col("stream").alias("_kstream"), "ts_ns", "end_ns")
        .collect()
    )
    names = kernels.get_column("name")
    distinct = names.unique()
    hits = distinct.filter(distinct.fill_null("").str.contains(collective_pattern))
    if hits.len():  # the filter and the drop one query
        comm = pl.col("name").is_in(hits.drop_nulls().implode()).fill_null(hits.null_count() > 0)
        return chain.collect(kernels.lazy().filter(~comm).drop("name"))
    return kernels[[c for c in kernels.columns if c != "name"]]


def _overlap_with_compute(copies: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Add `overlap_ns`: time of each copy covered by compute `kernels` (`compute_kernels`) on
    other streams of its device. One union of kernels per (device, copy stream), leaving that
    stream out, measured against that stream's copies, one stream at a time: each union and its
    as-of search go before the next (all at once: +31 MB of transient at 311 MB, three streams of
    70 k kernels each). The rows come back in the order one search over all of them gave."""
    # each chain one query (`collected`: three frame calls were three)
    streams = collected(copies.lazy().select("device", pl.col("stream").alias("_cstream")).drop_nulls().unique())
    if kernels.is_empty() or streams.is_empty():
        return copies.with_columns(overlap_ns=pl.lit(0, pl.Int64))
    if (by_arrays := _overlap_by_arrays(copies, kernels, streams)) is not None:
        return by_arrays
    # The kernels sorted once; each copy stream's share filtered from them, in key order, is that
    # layer sorted by (device, copy stream, start) already.
    ordered = kernels.sort("device", "ts_ns")
    cstream = streams.schema["_cstream"]
    keys = ["device", "_cstream"]
    q = copies.select(*keys[:1], "ts_ns", "end_ns", _cstream="stream").with_row_index("_r")
    found, any_kernel = [], False
    for dev, cs in streams.sort(keys).iter_rows():
        others = collected(
            ordered.lazy()
            .filter((pl.col("device") == dev) & (pl.col("_kstream") != cs))
            .select("device", _cstream=pl.lit(cs, cstream), start_ns="ts_ns", end_ns="end_ns")
        )
        any_kernel |= others.height > 0
        index = coverage_index(merge_sorted(others, keys), keys, presorted=True)
        del others
        mine = filter_rows(q, (q.get_column("device") == dev) & (q.get_column("_cstream") == cs))
        by_row = _covered_by_row(mine, index, keys)
        found.append(by_row if by_row is not None else covered(mine, index, keys, "ts_ns", "end_ns", "overlap_ns"))
        del index, mine
    del ordered
    if not any_kernel:  # no union at all: `covered` kept the rows as they were
        return copies.with_columns(overlap_ns=pl.lit(0, pl.Int64))
    at = pl.concat([f[["_r", "overlap_ns"]] for f in found])
    overlap = (
        pl.Series("overlap_ns", [0], pl.Int64).new_from_index(0, copies.height).scatter(at["_r"], at["overlap_ns"])
    )
    overlap = overlap.fill_null(0) if overlap.null_count() else overlap
    # `covered` over every copy sorted them by end, then by start (its two as-of searches): one query
    return chain.collect(copies.hstack([overlap]).lazy().sort("end_ns").sort("ts_ns"))


def _overlap_by_arrays(copies: pl.DataFrame, kernels: pl.DataFrame, streams: pl.DataFrame) -> pl.DataFrame | None:
    """`_overlap_with_compute` on numpy arrays, where numpy is imported: the kernels sorted by
    start once, each (device, copy stream)'s union of the others swept from them
    (`arrays.union_sorted`) and its copies' covered time two binary searches
    (`arrays.covered_between`), where each union, index and search was several queries (and the
    larger ones a sort and an as-of join). None (the frame version) where a kernel's or copy's
    time, device or stream is null or not an integer, or a kernel ends before it starts."""
    if "numpy" not in sys.modules:
        return None
    k = int64_arrays([kernels.get_column(c) for c in ("device", "_kstream", "ts_ns", "end_ns")])
    t = int64_arrays([copies.get_column("ts_ns"), copies.get_column("end_ns")])
    if k is None or t is None or (k[3] < k[2]).any():
        return None
    np = sys.modules["numpy"]
    order = np.argsort(k[2], kind="stable")
    kd, ks, kts, kend = (a[order] for a in k)
    cts, cend = t
    device, stream = copies.get_column("device"), copies.get_column("stream")
    overlap, any_kernel = np.zeros(copies.height, np.int64), False
    for dev, cs in streams.sort("device", "_cstream").iter_rows():
        others = (kd == dev) & (ks != cs)
        if not others.any():
            continue
        any_kernel = True
        us, ue = union_sorted(np.empty(0, np.int64), np.empty(0, np.int64), kts[others], kend[others])
        mine = ((device == dev) & (stream == cs)).fill_null(False).to_numpy()
        overlap[mine] = covered_between(us, ue, cts[mine], cend[mine])
    if not any_kernel:  # no union at all: the rows as they were
        return copies.with_columns(overlap_ns=pl.lit(0, pl.Int64))
    # the frame version's order: its search over every copy sorted them by end, then by start
    return chain.collect(copies.hstack([pl.Series("overlap_ns", overlap)]).lazy().sort("end_ns").sort("ts_ns"))


def _covered_by_row(q: pl.DataFrame, index: pl.DataFrame, keys: list[str]) -> pl.DataFrame | None:
    """`covered`'s overlap_ns of each copy in `q` (_r, overlap_ns), by numpy's search of each row
    alone (`asof_covered`): the rows go back by `_r`, so the two sorts `covered` makes (a query
    each) are not needed. None (`covered`) off numpy, for large or empty frames, null times."""
    if index.is_empty() or q.is_empty() or q.height + index.height >= SMALL_ROWS:
        return None
    until_b, until_a = asof_covered(q, index, "end_ns", keys), asof_covered(q, index, "ts_ns", keys)
    if until_b is None or until_a is None:
        return None
    d = until_b - until_a  # clipped at 0 by `zip_with`, as `covered`
    return pl.DataFrame([q.get_column("_r"), d.zip_with(d > 0, filled(0, d.len(), d.dtype)).alias("overlap_ns")])


# The GPU table's columns a copy's row reads (the other dozen are not carried through the joins).
_GPU_COLUMNS = (
    "gpu_id", "kind", "name", "bytes", "device", "stream", "ts_ns", "end_ns",
    "runtime_id", "op_id", "launch_ts_ns", "launch_api",
)  # fmt: skip


def _blocked_ns(trace: Trace, runtime_id: pl.Series, blocking: pl.DataFrame) -> pl.Series:
    """Per copy: how long its runtime call held the CPU thread when that call blocks, 0 when it
    returns at once (or is not in the table), null without a call. By row where runtime_id is
    the runtime table's row number (as the loader numbers them: a gather, no join over its 400k
    rows), else a join."""
    runtime = trace.runtime
    n = runtime.height
    known = runtime_id.drop_nulls()
    if is_row_number(runtime.get_column("runtime_id")) and (known.is_empty() or (known.min() >= 0 and known.max() < n)):
        blocks = pl.Series([False]).new_from_index(0, n).scatter(blocking.get_column("runtime_id").cast(pl.Int64), True)
        at = runtime_id.cast(pl.UInt32)
        call_ns, held = runtime.get_column("dur_ns").gather(at), blocks.gather(at)
    else:
        b = blocking.lazy().select("runtime_id", _blocking=pl.lit(True))
        calls = runtime.lazy().select("runtime_id", "dur_ns").join(b, on="runtime_id", how="left")
        j = runtime_id.to_frame().lazy().join(calls, on="runtime_id", how="left", maintain_order="left").collect()
        call_ns, held = j.get_column("dur_ns"), j.get_column("_blocking")
    call_ns = call_ns.cast(pl.Int64)
    zero = pl.Series([0], dtype=pl.Int64).new_from_index(0, runtime_id.len())
    none = pl.Series([None], dtype=pl.Int64).new_from_index(0, runtime_id.len())
    blocked = call_ns.zip_with(held.fill_null(False), zero)
    return blocked.zip_with(runtime_id.is_not_null(), none).alias("blocked_ns")


def copy_table(trace: Trace, collective_pattern: str, blocking: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per-copy facts in ns (internal): the frame behind `CopiesResult.copies`; `blocking` is
    the trace's `cpu_activity.blocking_calls` when already computed."""
    # each chain of frame steps is one polars query (`chain.collect`), run as the eager calls were
    gpu = trace.gpu.lazy().filter(pl.col("kind").is_in(["memcpy", "memset"])).select(_GPU_COLUMNS)
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
    gpu = (
        gpu.with_columns(
            direction=pl.when(pl.col("kind") == "memset")
            .then(pl.lit("memset"))
            .otherwise(name.str.extract(COPY_DIRECTION, 1))
        )
        .with_columns(host_memory=host)
        .pipe(chain.collect)
    )
    if gpu.is_empty():
        return gpu
    blocking = blocking if blocking is not None else blocking_calls(trace)
    gpu = gpu.hstack([_blocked_ns(trace, gpu.get_column("runtime_id"), blocking)])
    gpu = _overlap_with_compute(gpu, compute_kernels(trace, collective_pattern))
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
