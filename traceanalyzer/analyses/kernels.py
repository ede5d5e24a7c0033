"""Per kernel name: calls, total / mean / min / max time, share of kernel time, grid and block,
Tensor Core use (by name), and the ops that launch it; plus the short-kernel census, the
launch-bound signal (count and kernel-time share of kernels shorter than `short_kernel_us`).

Kernels only (no memcpy / memset). "Tensor Cores" is read from the kernel name: the instruction
family or library kernel it states (`patterns.TENSOR_CORE_KERNEL`: CUDA mma/wgmma/tcgen05, cuBLAS,
cuDNN, CUTLASS, FlashAttention, DeepGEMM; ROCm MFMA `_MI..`, hipBLASLt, MIOpen xdlops, CK; Triton
matmuls), or, for a matmul/conv kernel, a Tensor Core precision its name states (fp16, bf16,
fp8, fp4, int8: `patterns.TENSOR_CORE_PRECISION`), for which mixed-precision advice has nothing
to add. `no_tensor_cores_devices` says whether every device lacks Tensor Cores (compute
capability below 7.0 in deviceProperties): then no kernel could use them. "launched_by" names the op a
user would recognise (see `attribution.op_context`), the most frequent first; kernels a
`cudaGraphLaunch` replays belong to the op around that launch.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.options import KernelOptions, Options
from traceanalyzer.patterns import GRAPH_LAUNCH, MATMUL_CONV_KERNEL, TENSOR_CORE_KERNEL, TENSOR_CORE_PRECISION
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace

KERNEL_COLUMNS = [
    "kernel",
    "calls",
    "total_us",
    "mean_us",
    "min_us",
    "max_us",
    "share",
    "grid",
    "block",
    "tensor_cores",
    "matmul_conv",
    "graph_replayed",
    "launched_by",
]


@dataclass(frozen=True)
class ShortKernels:
    """The short-kernel census: how many kernels run under `threshold_us`, inside and outside CUDA graphs."""

    threshold_us: float
    count: int
    total: int
    count_share: float | None  # of all kernels
    time_us: float
    time_share: float | None  # of kernel time
    count_outside_graphs: int
    total_outside_graphs: int
    count_share_outside_graphs: float | None


@dataclass(frozen=True, repr=False)
class KernelsResult(Compact):
    """Per-kernel table, the short-kernel census and the Tensor Core figures."""

    options: KernelOptions
    table: pl.DataFrame  # KERNEL_COLUMNS, longest total first
    total_us: float
    calls: int
    short: ShortKernels
    tensor_core_share: float | None  # of matmul/conv kernel time
    matmul_conv_us: float
    matmul_conv_no_tc_us: float
    no_tensor_cores_devices: bool = False  # every device is below compute capability 7.0


def without_tensor_cores(trace: Trace) -> bool:
    """Whether every device the trace describes lacks Tensor Cores: compute capability below 7.0
    (Pascal and older) in deviceProperties. False when no device states its capability."""
    caps = [d.compute_capability for d in trace.meta.devices if d.compute_capability]
    return bool(caps) and all(float(c.split(".")[0]) < 7 for c in caps)


def _mode(col: str) -> pl.Expr:
    return pl.col(col).drop_nulls().mode().sort().first()


def _launchers(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame:
    """kernel name -> 'op (n), op (n), …' (three most frequent launching ops)."""
    ctx = op_context(trace, kernels["op_id"]).select("op_id", "op")
    counted = (
        kernels.select("name", "op_id")
        .join(ctx, on="op_id", how="left")
        .with_columns(op=pl.col("op").fill_null("(no op)"))
        .group_by("name", "op")
        .agg(n=pl.len())
        .sort(["name", "n", "op"], descending=[False, True, False])
        .group_by("name", maintain_order=True)
        .head(3)
    )
    return counted.group_by("name", maintain_order=True).agg(
        launched_by=(pl.col("op") + pl.lit(" (") + pl.col("n").cast(pl.String) + pl.lit(")")).str.join(", ")
    )


def analyse_kernels(trace: Trace, options: Options | KernelOptions | None = None) -> KernelsResult:
    """Per kernel name: time, shape, Tensor Core use, launching ops; the short-kernel census."""
    opts = Options.of(options).kernels
    k = trace.gpu.filter(pl.col("kind") == "kernel").with_columns(
        graph=pl.col("launch_api").fill_null("").str.contains(GRAPH_LAUNCH),
        short=pl.col("dur_ns") < int(opts.short_kernel_us * 1000),
    )
    total_ns = int(k["dur_ns"].sum()) if k.height else 0
    table = (
        k.group_by("name")
        .agg(
            calls=pl.len().cast(pl.Int64),
            total_us=pl.col("dur_ns").sum() / 1000.0,
            mean_us=pl.col("dur_ns").mean() / 1000.0,
            min_us=pl.col("dur_ns").min() / 1000.0,
            max_us=pl.col("dur_ns").max() / 1000.0,
            grid=_mode("grid"),
            block=_mode("block"),
            graph_replayed=pl.col("graph").sum().cast(pl.Int64),
        )
        .with_columns(
            share=pl.col("total_us") / (total_ns / 1000.0) if total_ns else pl.lit(None, pl.Float64),
            tensor_cores=pl.col("name").str.contains(TENSOR_CORE_KERNEL)
            | (pl.col("name").str.contains(MATMUL_CONV_KERNEL) & pl.col("name").str.contains(TENSOR_CORE_PRECISION)),
            matmul_conv=pl.col("name").str.contains(MATMUL_CONV_KERNEL),
        )
        .join(_launchers(trace, k), on="name", how="left")
        .rename({"name": "kernel"})
        .sort(["total_us", "kernel"], descending=[True, False])
        .select(KERNEL_COLUMNS)
    )
    short = k.filter(pl.col("short"))
    outside = k.filter(~pl.col("graph"))
    short_out = outside.filter(pl.col("short")).height
    census = ShortKernels(
        threshold_us=opts.short_kernel_us,
        count=short.height,
        total=k.height,
        count_share=short.height / k.height if k.height else None,
        time_us=short["dur_ns"].sum() / 1000.0 if short.height else 0.0,
        time_share=short["dur_ns"].sum() / total_ns if total_ns else None,
        count_outside_graphs=short_out,
        total_outside_graphs=outside.height,
        count_share_outside_graphs=short_out / outside.height if outside.height else None,
    )
    mm = table.filter(pl.col("matmul_conv"))
    mm_us = float(mm["total_us"].sum()) if mm.height else 0.0
    no_tc_us = float(mm.filter(~pl.col("tensor_cores"))["total_us"].sum()) if mm.height else 0.0
    return KernelsResult(
        options=opts,
        table=table,
        total_us=total_ns / 1000.0,
        calls=k.height,
        short=census,
        tensor_core_share=(mm_us - no_tc_us) / mm_us if mm_us else None,
        matmul_conv_us=mm_us,
        matmul_conv_no_tc_us=no_tc_us,
        no_tensor_cores_devices=without_tensor_cores(trace),
    )
