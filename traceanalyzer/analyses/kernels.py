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

Times are int64 ns (`total_ns`, `min_ns`, `max_ns`; `mean_ns` a float), sums as integers; the
`*_us` tables and totals are display views (`units`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses.attribution import named_ops
from traceanalyzer.keys import grouped
from traceanalyzer.options import KernelOptions, Options
from traceanalyzer.patterns import (
    GRAPH_LAUNCH,
    MATMUL_CONV_KERNEL,
    TENSOR_CORE_KERNEL,
    TENSOR_CORE_PRECISION,
    matches,
)
from traceanalyzer.reprs import Compact, Unread
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us, us_expr

KERNEL_COLUMNS = [
    "kernel",
    "calls",
    "total_ns",
    "mean_ns",
    "min_ns",
    "max_ns",
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
    time_ns: int  # their summed duration
    time_share: float | None  # of kernel time
    count_outside_graphs: int
    total_outside_graphs: int
    count_share_outside_graphs: float | None

    @property
    def time_us(self) -> float:
        """The short kernels' summed duration, in µs."""
        return duration_us(self.time_ns)


@dataclass(frozen=True, repr=False)
class KernelsResult(Compact):
    """Per-kernel table, the short-kernel census and the Tensor Core figures.

    `table_ns` and `short_names_ns` hold int64 ns (sums as integers), as do the totals; `table`,
    `short_names` and the `*_us` totals are their µs display views (`units`)."""

    options: KernelOptions
    table_ns: pl.DataFrame  # KERNEL_COLUMNS, longest total first
    total_ns: int  # every kernel's duration, summed
    calls: int
    short: ShortKernels
    tensor_core_share: float | None  # of matmul/conv kernel time
    matmul_conv_ns: int
    matmul_conv_no_tc_ns: int
    short_names_ns: pl.DataFrame  # the short kernels by name: name, calls, total_ns; most calls first
    no_tensor_cores_devices: bool = False  # every device is below compute capability 7.0
    origin_ns: int = 0  # the trace start (the tables hold durations only)

    # the µs display views of the ns tables (units.Shown)
    table = Shown("table_ns")
    short_names = Shown("short_names_ns")

    @property
    def total_us(self) -> float:
        """Kernel time, in µs."""
        return duration_us(self.total_ns)

    @property
    def matmul_conv_us(self) -> float:
        """Time of matmul/conv kernels, in µs."""
        return duration_us(self.matmul_conv_ns)

    @property
    def matmul_conv_no_tc_us(self) -> float:
        """Time of matmul/conv kernels without Tensor Cores, in µs."""
        return duration_us(self.matmul_conv_no_tc_ns)


def without_tensor_cores(trace: Trace) -> bool:
    """Whether every device the trace describes lacks Tensor Cores: compute capability below 7.0
    (Pascal and older) in deviceProperties. False when no device states its capability."""
    caps = [d.compute_capability for d in trace.meta.devices if d.compute_capability]
    return bool(caps) and all(float(c.split(".")[0]) < 7 for c in caps)


def _mode(col: str) -> pl.Expr:
    return pl.col(col).drop_nulls().mode().sort().first()


def _launchers(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame:
    """kernel name -> 'op (n), op (n), …' (three most frequent launching ops)."""
    ctx = named_ops(trace, kernels["op_id"])
    counted = (
        kernels.lazy()
        .select("name", "op_id")
        .join(ctx.lazy(), on="op_id", how="left")
        .with_columns(op=pl.col("op").fill_null("(no op)"))
    )
    counted = (  # the names by their codes (`keys`: row-encoded, 136 MB at 1 GB)
        grouped(counted, ["name", "op"], pl.len().alias("n"))
        .sort(["name", "n", "op"], descending=[False, True, False])
        .group_by("name", maintain_order=True)
        .head(3)
    )
    return chain.collect(  # one query (seven frame calls were seven)
        counted.group_by("name", maintain_order=True).agg(
            launched_by=(pl.col("op") + pl.lit(" (") + pl.col("n").cast(pl.String) + pl.lit(")")).str.join(", ")
        )
    )


def analyse_kernels(trace: Trace, options: Options | KernelOptions | None = None, lean: bool = False) -> KernelsResult:
    """Per kernel name: time, shape, Tensor Core use, launching ops; the short-kernel census.
    `lean` (a rank's row): the totals and the census only, the tables `reprs.Unread`."""
    opts = Options.of(options).kernels
    # the columns read, then the rows: a filter copies every column it keeps (the GPU table's
    # 23 columns: +58 MB of peak at 311 MB, these ~+19 MB)
    k = chain.collect(  # one query (three frame calls were three)
        trace.gpu.lazy()
        .select(
            "name",
            "op_id",
            "dur_ns",
            "grid",
            "block",
            "kind",
            graph=pl.col("launch_api").str.contains(GRAPH_LAUNCH).fill_null(False),  # no copy of the texts
            short=pl.col("dur_ns") < int(opts.short_kernel_us * 1000),
        )
        .filter(pl.col("kind") == "kernel")
        .drop("kind")
    )
    graph, short = k["graph"], k["short"]
    total_ns = int(k["dur_ns"].sum()) if k.height else 0
    if lean:
        per = k.group_by("name").agg(total_ns=pl.col("dur_ns").sum())
    else:
        per = k.group_by("name").agg(
            calls=pl.len().cast(pl.Int64),
            total_ns=pl.col("dur_ns").sum(),
            mean_ns=pl.col("dur_ns").mean(),
            min_ns=pl.col("dur_ns").min(),
            max_ns=pl.col("dur_ns").max(),
            grid=_mode("grid"),
            block=_mode("block"),
            graph_replayed=pl.col("graph").sum().cast(pl.Int64),
        )
    names = per["name"]  # distinct: each matched once a process (`patterns.matches`)
    mm = matches(names, MATMUL_CONV_KERNEL).alias("matmul_conv")
    tc = (matches(names, TENSOR_CORE_KERNEL) | (mm & matches(names, TENSOR_CORE_PRECISION))).alias("tensor_cores")
    mm_ns = int(per["total_ns"].filter(mm).sum())
    no_tc_ns = int(per["total_ns"].filter(mm & ~tc).sum())
    if lean:
        table = short_names = Unread("KernelsResult.table_ns / short_names_ns")
    else:
        table = chain.collect(  # one query, as the short names'
            per.lazy()
            .with_columns(
                # over the µs as shown (units), as the outputs always gave it: a ratio of the ns would
                # move the last digit of most shares in every table
                share=us_expr("total_ns", 0) / duration_us(total_ns) if total_ns else pl.lit(None, pl.Float64),
                tensor_cores=tc,
                matmul_conv=mm,
            )
            .join(_launchers(trace, k).lazy(), on="name", how="left")
            .rename({"name": "kernel"})
            .sort(["total_ns", "kernel"], descending=[True, False])
            .select(KERNEL_COLUMNS)
        )
        short_names = chain.collect(
            k.lazy()
            .filter(pl.col("short"))
            .group_by("name")
            .agg(calls=pl.len(), total_ns=pl.col("dur_ns").sum())
            .sort(["calls", "name"], descending=[True, False])
        )
    # the census from the two masks: Series sums, no query
    n_short = int(short.sum())
    outside = ~graph
    n_outside = int(outside.sum())
    short_out = int((short & outside).sum())
    short_ns = int(k["dur_ns"].filter(short).sum())
    census = ShortKernels(
        threshold_us=opts.short_kernel_us,
        count=n_short,
        total=k.height,
        count_share=n_short / k.height if k.height else None,
        time_ns=short_ns,
        time_share=short_ns / total_ns if total_ns else None,
        count_outside_graphs=short_out,
        total_outside_graphs=n_outside,
        count_share_outside_graphs=short_out / n_outside if n_outside else None,
    )
    return KernelsResult(
        options=opts,
        table_ns=table,
        total_ns=total_ns,
        calls=k.height,
        short=census,
        # of the µs as shown, as `share`
        tensor_core_share=(duration_us(mm_ns) - duration_us(no_tc_ns)) / duration_us(mm_ns) if mm_ns else None,
        matmul_conv_ns=mm_ns,
        matmul_conv_no_tc_ns=no_tc_ns,
        no_tensor_cores_devices=without_tensor_cores(trace),
        short_names_ns=short_names,
        origin_ns=trace.meta.origin_ns,
    )
