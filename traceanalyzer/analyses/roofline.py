"""How close to the hardware: achieved FLOP/s and bandwidth per op and shape, against the
device's peaks (`analyses.peaks`), from the work model (`analyses.work_model`).

- Level: an op is reported when the model gives it numbers and no op around it has numbers:
  the outermost modelled op (`aten::linear` rather than the `aten::addmm` it calls,
  `aten::conv2d` rather than `aten::cudnn_convolution`). Its work is counted once, at that
  level; where the outer op's arguments do not say enough (mixed dtypes, a 2021 trace's
  `cudnn_convolution_backward`) the ops inside it are the outermost modelled ones.
- GPU time: the kernels, memsets and device-to-device copies launched by the op or by any op
  nested in it (the same attribution as `ops`' total GPU time, through `op_tree.ancestors`).
  Copies between host and device are left out (their roof is the host link: see `copies`).
- Roof: matmul, convolution and attention meet the compute peak of their dtype (FP32 ops whose
  kernels' names say Tensor Cores meet the TF32 peak; AMD's FP32 the matrix-core peak) or the
  memory roof, whichever the arithmetic intensity (FLOPs / byte) reaches first; elementwise
  ops, reductions, normalisations and copies the memory roof. `peak_share` is the achieved
  rate over the roof at that bound. `tensor_core_share` puts a matmul's, convolution's or
  attention's rate against the device's 16-bit Tensor Core peak whatever its precision: the
  share of what the hardware offers that op kind (an FP32 SGEMM near its own roof is low here).

Times are int64 ns (`gpu_ns`), sums as integers; `ops`, `unmodelled` and the `*_us` totals of
the result are their µs display views (`units`). `headroom_us`, an estimate rather than a time
of the trace, is made from the µs shown (`units.us_expr`), as the outputs always gave it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import windows
from traceanalyzer.analyses.attribution import named_ops
from traceanalyzer.analyses.intervals import filter_rows
from traceanalyzer.analyses.op_tree import ancestors
from traceanalyzer.analyses.peaks import COMPUTE_ROOFS, find_peaks, override
from traceanalyzer.analyses.work_model import KEYS, MODELLED_NAMES, NO_MODEL, work_rows
from traceanalyzer.options import Options, RooflineOptions
from traceanalyzer.patterns import FEWER_FLOPS_KERNEL, TENSOR_CORE_KERNEL, matches
from traceanalyzer.reprs import Compact, Unread
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us, us_expr

MEMORY_FAMILIES = ("elementwise", "reduction", "norm", "copy")
HOST_COPY = r"^Memcpy (HtoD|DtoH|HtoH)|Host -> Device|Device -> Host"
OP_COLUMNS = [
    "op",
    "input_dims",
    "dtype",
    "family",
    "device",
    "calls",
    "flops_per_call",
    "bytes_per_call",
    "gpu_ns",
    "achieved_tflops",
    "achieved_gbps",
    "intensity",
    "roof",
    "peak_tflops",
    "peak_gbps",
    "bound",
    "peak_share",
    "headroom_us",
    "tensor_core_share",
    "tensor_cores",
    "note",
]
DEVICE_SCHEMA = {
    "device": pl.Int64,
    "name": pl.String,
    "part": pl.String,
    "found": pl.String,
    "source": pl.String,
    **{r: pl.Float64 for r in COMPUTE_ROOFS},
    "memory_gbps": pl.Float64,
}
UNMODELLED_SCHEMA = {"op": pl.String, "reason": pl.String, "gpu_ns": pl.Int64, "activities": pl.Int64}


@dataclass(frozen=True, repr=False)
class RooflineResult(Compact):
    """`ops_ns`: one row per op, shape and device (OP_COLUMNS), the most GPU time left below the
    roof first (`headroom_us` = gpu_us · (1 − peak_share)); `unmodelled_ns`: GPU time no modelled
    op accounts for, by op and reason; `devices`: the peaks used and their source. Times in int64
    ns; `ops`, `unmodelled`, `gpu_us` and `modelled_gpu_us` are the µs display views (`units`)."""

    ops_ns: pl.DataFrame
    unmodelled_ns: pl.DataFrame
    devices: pl.DataFrame
    gpu_ns: int  # every kernel, memcpy and memset
    modelled_gpu_ns: int
    note: str | None = None
    origin_ns: int = 0  # the trace start (the tables hold durations only)

    # the µs display views of the ns tables (units.Shown)
    ops = Shown("ops_ns")
    unmodelled = Shown("unmodelled_ns")

    @property
    def gpu_us(self) -> float:
        """Every kernel, memcpy and memset, in µs."""
        return duration_us(self.gpu_ns)

    @property
    def modelled_gpu_us(self) -> float:
        """GPU time of the reported ops, in µs."""
        return duration_us(self.modelled_gpu_ns)

    @property
    def modelled_share(self) -> float | None:
        """Share of GPU time the reported ops hold."""
        return self.modelled_gpu_us / self.gpu_us if self.gpu_ns else None  # of the µs shown, as before


def device_peaks(trace: Trace, opts: RooflineOptions) -> pl.DataFrame:
    """DEVICE_SCHEMA: every device the trace lists or runs work on, with its peaks (the table's,
    or the flags') and where they come from."""
    listed = {d.id: d for d in trace.meta.devices}
    used = windows.devices(trace)  # made once per Trace
    rows = []
    for dev in sorted(set(listed) | set(used)):
        d = listed.get(dev)
        peaks, found = find_peaks(d) if d is not None else (None, "not in the trace's deviceProperties")
        peaks = override(peaks, opts.peak_tflops, opts.peak_gbps)
        if peaks is not None and peaks.part == "user":
            found = "from the flags"
        rows.append(
            {
                "device": dev,
                "name": d.name if d is not None else None,
                "part": peaks.part if peaks else None,
                "found": found,
                "source": peaks.source if peaks else None,
                **{r: peaks.compute(r) if peaks else None for r in COMPUTE_ROOFS},
                "memory_gbps": peaks.memory_gbps if peaks else None,
            }
        )
    return pl.DataFrame(rows, schema=DEVICE_SCHEMA, orient="row") if rows else pl.DataFrame(schema=DEVICE_SCHEMA)


def _roof() -> pl.Expr:
    memory = pl.col("family").is_in(MEMORY_FAMILIES)
    fp32 = (
        pl.when(pl.col("tensor_cores") & pl.col("tf32").is_not_null())
        .then(pl.lit("tf32"))
        .when(pl.col("fp32_matrix").is_not_null())
        .then(pl.lit("fp32_matrix"))
        .otherwise(pl.lit("fp32"))
    )
    return (
        pl.when(memory)
        .then(pl.lit("memory"))
        .when(pl.col("dtype") == "fp32")
        .then(fp32)
        .when(pl.col("dtype").is_in(["fp16", "bf16", "fp8", "int8"]))
        .then(pl.col("dtype"))
        .when(pl.col("dtype") == "uint8")
        .then(pl.lit("int8"))
        .otherwise(pl.lit(None, pl.String))
    )


def _peak_tflops() -> pl.Expr:
    expr = pl.when(pl.lit(False)).then(pl.lit(None, pl.Float64))
    for r in COMPUTE_ROOFS:
        expr = expr.when(pl.col("roof") == r).then(pl.col(r))
    return expr.otherwise(pl.lit(None, pl.Float64))


@functools.cache  # an expression is a value: built once
def _judging() -> tuple[dict[str, pl.Expr], ...]:
    """The steps of `_judge`, each a `with_columns`, built once (on a rank's ~140 rows, building
    them cost a third of the query)."""
    secs = pl.col("gpu_ns") / 1e9
    rates = {
        "peak_tflops": _peak_tflops(),
        "peak_gbps": pl.col("memory_gbps"),
        "achieved_tflops": pl.col("flops_per_call") * pl.col("calls") / secs / 1e12,
        "achieved_gbps": pl.col("bytes_per_call") * pl.col("calls") / secs / 1e9,
        "intensity": pl.when(pl.col("bytes_per_call") > 0).then(pl.col("flops_per_call") / pl.col("bytes_per_call")),
    }
    ridge = pl.col("peak_tflops") * 1000.0 / pl.col("peak_gbps")  # FLOPs per byte where the roofs meet
    memory = pl.col("roof") == "memory"
    bound = (
        pl.when(memory & pl.col("peak_gbps").is_not_null())
        .then(pl.lit("memory"))
        .when(memory | pl.col("peak_tflops").is_null() | pl.col("peak_gbps").is_null())
        .then(pl.lit(None, pl.String))
        .when(pl.col("intensity") >= ridge)
        .then(pl.lit("compute"))
        .otherwise(pl.lit("memory"))
    )
    # Past a roof, the model's assumption is what broke, not the hardware: bytes came from cache
    # (the model counts every byte from device memory), or Winograd/FFT kernels did fewer FLOPs
    # than the direct count. Such a row gets no share.
    above_memory = (bound == "memory") & (pl.col("achieved_gbps") > pl.col("peak_gbps"))
    above_compute = (bound == "compute") & (pl.col("achieved_tflops") > pl.col("peak_tflops")) & pl.col("fewer_flops")
    bound = pl.when(above_memory).then(pl.lit("cache")).when(above_compute).then(pl.lit("fewer_flops")).otherwise(bound)
    note = pl.col("note").fill_null("")
    fewer = pl.when(pl.col("fewer_flops")).then(pl.lit("Winograd/FFT kernels: fewer FLOPs executed than counted"))
    bounds = {
        "bound": bound,
        "note": pl.concat_str([note, fewer.otherwise(pl.lit(""))], separator="; ").str.strip_chars("; "),
    }
    share = (
        pl.when(pl.col("bound") == "compute")
        .then(pl.col("achieved_tflops") / pl.col("peak_tflops"))
        .when(pl.col("bound") == "memory")
        .then(pl.col("achieved_gbps") / pl.col("peak_gbps"))
    )
    # The same rate against the device's 16-bit Tensor Core roof: what the hardware offers a
    # matmul at all, whatever precision this one ran in (an FP32 SGEMM shows low here).
    tensor = pl.max_horizontal("fp16", "bf16")
    shares = {
        # from the µs shown: a product taken in ns would move the last digit of a third of the rows
        "headroom_us": us_expr("gpu_ns", 0) * (1 - pl.col("peak_share").clip(0, 1)),
        "tensor_core_share": pl.when(~pl.col("family").is_in(MEMORY_FAMILIES) & (tensor > 0)).then(
            pl.col("achieved_tflops") / tensor
        ),
    }
    return {"roof": _roof()}, rates, bounds, {"peak_share": share}, shares


def _judge(rows: pl.LazyFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """Achieved rates, roof, bound and share of each op/shape row (one query)."""
    out = rows.join(devices.lazy().drop("name", "part", "found", "source"), on="device", how="left")
    for step in _judging():
        out = out.with_columns(**step)
    return chain.collect(
        out.sort(
            ["headroom_us", "gpu_ns", "op", "input_dims"], descending=[True, True, False, False], nulls_last=True
        ).select(OP_COLUMNS)
    )


def _activities(gpu: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """(gpu_id, op_id, device, dur_ns; a kernel's name says Tensor Cores `_tc`, fewer FLOPs `_ff`;
    `_host` False) of the activities but the copies between host and device (HOST_COPY), and the
    mask of those: each distinct name matched once a process (`patterns.matches`), no text copied."""
    names = chain.collect(gpu.lazy().select(pl.col("name").drop_nulls().unique())).get_column("name")  # a set

    def named(pattern: str) -> pl.Expr:
        return pl.col("name").is_in(pl.lit(names.filter(matches(names, pattern))).implode())  # no query

    kernel = pl.col("kind") == "kernel"
    every = chain.collect(
        gpu.lazy().select(
            pl.col("gpu_id", "op_id", "device", "dur_ns"),
            _tc=kernel & named(TENSOR_CORE_KERNEL),
            _ff=kernel & named(FEWER_FLOPS_KERNEL),
            _host=((pl.col("kind") == "memcpy") & named(HOST_COPY)).fill_null(False),
        )
    )
    host = every.get_column("_host")
    return filter_rows(every, ~host), host  # by Series below SMALL_ROWS


def _per_op(owned: pl.DataFrame) -> pl.DataFrame:
    """Per reported op (`ancestor_id`) of the activities it owns: its `_k`, gpu_ns, device, tensor_cores
    and fewer_flops (any activity's). The device: their most frequent (the lowest of equally frequent
    ones), nearly every op's one (lowest = highest), counted only for the ops on several."""
    device = pl.col("device")
    per_op = chain.collect(
        owned.lazy()
        .group_by("ancestor_id")
        .agg(
            gpu_ns=pl.col("dur_ns").sum(),
            device=device.min(),
            _hi=device.max(),
            tensor_cores=pl.col("_tc").any(),
            fewer_flops=pl.col("_ff").any(),
            _k=pl.col("_k").first(),
        )
    )
    several = filter_rows(per_op, per_op.get_column("device") != per_op.get_column("_hi"))
    if several.height:
        most = chain.collect(
            owned.lazy()
            .join(several.lazy().select("ancestor_id"), on="ancestor_id", how="semi")
            .filter(device.is_not_null())
            .group_by("ancestor_id", "device")
            .agg(_n=pl.len())
            .group_by("ancestor_id")
            .agg(_most=device.sort_by("_n", "device", descending=[True, False]).first())
        )
        per_op = per_op.join(most, on="ancestor_id", how="left").with_columns(device=pl.coalesce("_most", "device"))
    return per_op  # and `_hi` (the highest device), `_most`: no query to drop them


def _unmodelled(
    trace: Trace, host: pl.Series, rest: pl.DataFrame, anc: pl.DataFrame, why: pl.DataFrame
) -> pl.DataFrame:
    """GPU time outside every reported op (`rest`: op_id, dur_ns): by the innermost op around the
    launch that the model knows by name and could not model (`why`, with its reason), else by
    the op a user would name; copies between host and device (`host`: their durations) in one row."""
    copies = ("(copies between host and device)", "their roof is the host link, not device memory (see `copies`)")
    host_row = pl.DataFrame(
        [(*copies, int(host.sum()), host.len())] if host.len() else [], schema=UNMODELLED_SCHEMA, orient="row"
    )
    if rest.is_empty():
        return host_row
    # one query (nine were); the innermost: each (op, ancestor) is one level, an op one `why` row
    reasoned = (
        anc.lazy()
        .join(why.lazy(), on="ancestor_id", how="inner")
        .group_by("op_id")
        .agg(pl.col("why_op", "reason").get(pl.col("level").arg_min()))
    )
    named = named_ops(trace, rest["op_id"]).lazy().select("op_id", named="op")
    per = (
        rest.lazy()
        .join(reasoned, on="op_id", how="left")
        .join(named, on="op_id", how="left")
        .select(
            op=pl.coalesce("why_op", "named", pl.lit("(no CPU op around the launch)")),
            reason=pl.coalesce(
                "reason", pl.when(pl.col("op_id").is_null()).then(pl.lit("launched outside any op")), pl.lit(NO_MODEL)
            ),
            dur_ns="dur_ns",
        )
        .group_by("op", "reason")
        .agg(gpu_ns=pl.col("dur_ns").sum(), activities=pl.len().cast(pl.Int64))
    )
    return chain.collect(pl.concat([per, host_row.lazy()]).sort(["gpu_ns", "op"], descending=[True, False]))


def analyse_roofline(
    trace: Trace, options: Options | RooflineOptions | None = None, lean: bool = False
) -> RooflineResult:
    """Per op, shape and device: FLOPs and bytes per call, GPU time, achieved TFLOP/s and GB/s,
    arithmetic intensity, the bound and the share of the peak at that bound (see the module).
    `lean` (a rank's row): `unmodelled_ns` is `reprs.Unread`."""
    opts = Options.of(options).roofline
    devices = device_peaks(trace, opts)
    all_gpu_ns = int(trace.gpu["dur_ns"].sum()) if trace.gpu.height else 0
    gpu, host_mask = _activities(trace.gpu)  # the columns first: a filter copies every column it keeps
    # Only ops the model knows by name can have work: the others, three in four calls, are left out
    # before their argument texts are copied (17 MB at 311 MB). Grouped by (name, shape) there, a
    # call keeps the row of its (name, shape) in the work table, `_k`, not the four texts (no join).
    named = (pl.col("kind") == "cpu_op") & pl.col("name").is_in(MODELLED_NAMES)
    calls = chain.collect(trace.ops.lazy().select("op_id", "kind", *KEYS).filter(named).group_by(KEYS).agg("op_id"))
    work = work_rows(calls).with_row_index("_k")
    cand = pl.DataFrame([calls.get_column("op_id"), work.get_column("_k"), work.get_column("reason")]).explode("op_id")
    modelled = filter_rows(cand, cand.get_column("reason").is_null())  # by Series below SMALL_ROWS
    # Report at the outermost modelled op: a launch belongs to the outermost modelled op of its
    # chain (its launching op and those around it), which has none around it, so reported ops
    # never nest. One that owns no launch is never reported: no walk up from every modelled op.
    anc = ancestors(trace.ops, gpu["op_id"])  # each distinct id once
    owner = (
        anc.lazy()
        .join(modelled.lazy().select("_k", ancestor_id="op_id"), on="ancestor_id", how="inner")
        .group_by("op_id")
        .agg(pl.col("ancestor_id", "_k").get(pl.col("level").arg_max()))
    )
    owned = chain.collect(gpu.lazy().join(owner, on="op_id", how="inner"))
    rows = (
        _per_op(owned)
        .lazy()
        .filter(pl.col("gpu_ns") > 0)
        .group_by("_k", "device")  # a (name, shape) is one `_k`
        .agg(
            calls=pl.len().cast(pl.Int64),
            gpu_ns=pl.col("gpu_ns").sum(),
            tensor_cores=pl.col("tensor_cores").any(),
            fewer_flops=pl.col("fewer_flops").any(),
            _first=pl.col("ancestor_id").min(),
        )
        .sort("_first")  # in the order of their first calls: how rows equal in `_judge`'s sort keys come out
        .drop("_first")
        .join(work.lazy().drop("reason"), on="_k", how="left", maintain_order="left")
        .rename({"name": "op", "flops": "flops_per_call", "bytes": "bytes_per_call"})
    )
    table = _judge(rows, devices)
    note = None
    if trace.ops.height and trace.ops["input_dims"].null_count() == trace.ops.height:
        note = "the trace recorded no shapes (Input Dims): profile with record_shapes=True to model ops"
    if lean:
        unmodelled = Unread("RooflineResult.unmodelled_ns")
    else:
        why = chain.collect(
            cand.lazy()
            .filter(pl.col("reason").is_not_null())
            .join(work.lazy().select("_k", "name"), on="_k", how="left", maintain_order="left")
            .select(ancestor_id="op_id", why_op="name", reason="reason")
        )
        rest = chain.collect(
            gpu.lazy().select("op_id", "dur_ns", "gpu_id").join(owned.lazy().select("gpu_id"), on="gpu_id", how="anti")
        )
        unmodelled = _unmodelled(trace, trace.gpu["dur_ns"].filter(host_mask), rest, anc, why)
    return RooflineResult(
        ops_ns=table,
        unmodelled_ns=unmodelled,
        devices=devices,
        gpu_ns=all_gpu_ns,
        modelled_gpu_ns=int(owned["dur_ns"].sum()) if owned.height else 0,
        note=note,
        origin_ns=trace.meta.origin_ns,
    )
