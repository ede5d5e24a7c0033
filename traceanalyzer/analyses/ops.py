"""What `prof.key_averages()` shows, from the trace alone: per op name, calls, self and total
CPU time, self and total GPU time.

- total CPU: the sum of the op's durations (like key_averages, a recursive op counts at every
  level);
- self CPU: duration minus the durations of its direct child ops (runtime calls stay in self);
- self GPU: GPU work (kernels, memcpys, memsets) launched by runtime or driver calls whose
  innermost enclosing op is this one; under CUDA graphs every kernel a `cudaGraphLaunch`
  replays counts for the op around that launch;
- total GPU: self GPU of the op and of every op nested inside it.

Ops are CPU ops and record_function ranges (ProfilerStep included), all threads. Times are
int64 ns sums (`OpsResult.table_ns`); `OpsResult.table` is their µs display view (`units`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.attribution import distinct_chains
from traceanalyzer.analyses.modules import op_modules
from traceanalyzer.analyses.op_tree import ancestors, chain_sums, is_row_number, self_time, sum_by_row
from traceanalyzer.errors import UsageError
from traceanalyzer.options import OpsOptions, Options
from traceanalyzer.patterns import NN_MODULE
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown

GROUPINGS = ("name", "shapes", "module")
OP_COLUMNS = [
    "calls",
    "self_cpu_ns",
    "total_cpu_ns",
    "self_gpu_ns",
    "total_gpu_ns",
    "self_gpu_activities",
    "total_gpu_activities",
]


@dataclass(frozen=True, repr=False)
class OpsResult(Compact):
    """Per op group: the grouping keys (`name`; `name`, `input_dims`; `module`, `name`), then
    OP_COLUMNS, most total GPU then total CPU time first. `table_ns` holds integer ns sums;
    `table` is its µs display view (`self_cpu_us`, ...), the columns the outputs print."""

    options: OpsOptions
    table_ns: pl.DataFrame
    origin_ns: int = 0  # the trace start (the table holds durations only)

    table = Shown("table_ns")  # the µs display view (units.Shown)


def _per_op(trace: Trace, shapes: bool = True) -> pl.DataFrame:
    """One row per op: op_id, name, input_dims (if `shapes`), dur_ns, self_cpu_ns, self_gpu_ns, self_gpu_n,
    total_gpu_ns, total_gpu_n.

    Where op_id is the row (every Trace), each sum is made by op row and put in its column by a
    scatter (`op_tree.sum_by_row`): no join carries the names and shapes of every op (at 311 MB,
    306k ops: 0.17 -> 0.035 CPU-s when numpy is loaded, as in `summary`)."""
    if not is_row_number(trace.ops["op_id"]):
        return _per_op_by_join(trace)
    ops = trace.ops
    n = ops.height

    def by_row(at: pl.Series, values: pl.Series) -> pl.Series:
        return sum_by_row(n, at, values)

    dur, parent = ops["dur_ns"], ops["parent_id"]
    nested = parent.is_not_null()
    self_cpu = (dur - by_row(parent.filter(nested), dur.filter(nested))).clip(0)  # as `op_tree.self_time`
    gpu = trace.gpu.select("op_id", "dur_ns").filter(pl.col("op_id").is_not_null())
    self_gpu = by_row(gpu["op_id"], gpu["dur_ns"])
    self_n = by_row(gpu["op_id"], pl.Series([1], dtype=pl.Int64).new_from_index(0, gpu.height))
    # Total GPU: each launching op's self GPU counts for it and for every op enclosing it.
    launching = ops["op_id"].filter(self_n > 0)
    at = launching.cast(pl.UInt32)
    total_ns, total_n = chain_sums(parent, launching, [self_gpu.gather(at), self_n.gather(at)])
    # fresh columns of one chunk each (a cached Trace's tables come in several): a group-by over
    # columns chunked unlike each other copies them all into one first (+26 MB at 311 MB); the
    # names and shapes as categories (the group-by hashes codes; `analyse_ops` gives strings back)
    return pl.DataFrame(
        [
            ops["op_id"].rechunk(),
            ops["name"].cast(pl.Categorical),
            *([ops["input_dims"].cast(pl.Categorical)] if shapes else []),
            dur.rechunk(),
        ]
    ).with_columns(
        self_cpu_ns=self_cpu,
        self_gpu_ns=self_gpu,
        self_gpu_n=self_n,
        total_gpu_ns=total_ns,
        total_gpu_n=total_n,
    )


def _per_op_by_join(trace: Trace) -> pl.DataFrame:
    """`_per_op` for an op table whose ids are not its rows."""
    ops = trace.ops.select("op_id", "name", "input_dims", "dur_ns", "parent_id")
    gpu = (
        trace.gpu.select("op_id", "dur_ns")
        .filter(pl.col("op_id").is_not_null())
        .group_by("op_id")
        .agg(self_gpu_ns=pl.col("dur_ns").sum(), self_gpu_n=pl.len().cast(pl.Int64))
    )
    ops = (
        ops.join(self_time(ops), on="op_id", how="left")
        .join(gpu, on="op_id", how="left")
        .with_columns(
            self_cpu_ns=pl.col("self_ns"),
            self_gpu_ns=pl.col("self_gpu_ns").fill_null(0),
            self_gpu_n=pl.col("self_gpu_n").fill_null(0),
        )
        .drop("self_ns")
    )
    # Total GPU: each launching op's self GPU counts for it and for every op enclosing it.
    launching = ops.filter(pl.col("self_gpu_n") > 0)
    totals = (
        ancestors(trace.ops, launching["op_id"])
        .join(launching.select("op_id", "self_gpu_ns", "self_gpu_n"), on="op_id")
        .group_by("ancestor_id")
        .agg(total_gpu_ns=pl.col("self_gpu_ns").sum(), total_gpu_n=pl.col("self_gpu_n").sum())
    )
    return ops.join(totals, left_on="op_id", right_on="ancestor_id", how="left").with_columns(
        pl.col("total_gpu_ns").fill_null(0), pl.col("total_gpu_n").fill_null(0)
    )


def _module_of(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """op_id -> the module the op ran in: its innermost `nn.Module:` Python frame (with_modules
    traces), else the innermost `nn.Module:` range of its op chain, else "(no module)"."""
    # the chain's module is the chain's: found once per distinct chain (a string per op of a 311
    # MB trace's 306k: +136 MB and 0.5 CPU-s), given to its ops by a join on the chain number
    per_op, chains = distinct_chains(trace, op_ids)
    modules = chains.select(
        "chain",
        _chain_module=pl.col("op_chain")
        .fill_null("")
        .str.split(" > ")
        .list.eval(pl.element().filter(pl.element().str.contains(NN_MODULE)))
        .list.last(),
    )
    from_chain = per_op.join(modules, on="chain", how="left").select("op_id", "_chain_module")
    frames = op_modules(trace).select("op_id", "module")
    return (
        pl.DataFrame({"op_id": op_ids.cast(pl.Int64)})
        .join(frames, on="op_id", how="left")
        .join(from_chain, on="op_id", how="left")
        .select("op_id", module=pl.coalesce("module", "_chain_module").fill_null("(no module)"))
    )


def analyse_ops(trace: Trace, options: Options | OpsOptions | None = None) -> OpsResult:
    """Per group (name; name + input_dims; module + name): OP_COLUMNS, sorted by total GPU then
    total CPU time, descending."""
    opts = Options.of(options).ops
    if opts.group_by not in GROUPINGS:
        raise UsageError(None, f"unknown grouping {opts.group_by!r}: use one of {', '.join(GROUPINGS)}")
    per = _per_op(trace, shapes=opts.group_by == "shapes")
    keys = ["name"]
    if opts.group_by == "shapes":
        keys = ["name", "input_dims"]
    elif opts.group_by == "module":
        per = per.join(_module_of(trace, per["op_id"]), on="op_id", how="left")
        keys = ["module", "name"]
    out = per.group_by(keys).agg(
        calls=pl.len().cast(pl.Int64),
        self_cpu_ns=pl.col("self_cpu_ns").sum(),
        total_cpu_ns=pl.col("dur_ns").sum(),
        self_gpu_ns=pl.col("self_gpu_ns").sum(),
        total_gpu_ns=pl.col("total_gpu_ns").sum(),
        self_gpu_activities=pl.col("self_gpu_n").sum().cast(pl.Int64),
        total_gpu_activities=pl.col("total_gpu_n").sum().cast(pl.Int64),
    )
    out = out.with_columns(pl.col(k).cast(pl.String) for k in keys if out.schema[k] == pl.Categorical)
    table = out.sort(["total_gpu_ns", "total_cpu_ns", *keys], descending=[True, True] + [False] * len(keys)).select(
        *keys, *OP_COLUMNS
    )
    return OpsResult(opts, table, trace.meta.origin_ns)


def sort_table(df: pl.DataFrame, column: str) -> pl.DataFrame:
    """Sort descending by a numeric column (or ascending by a text one): a display table by the
    column a user names (`total_gpu_us`), keeping the order of equal rows."""
    if column not in df.columns:
        raise UsageError(None, f"cannot sort by {column!r}: columns are {', '.join(df.columns)}")
    return df.sort(column, descending=df.schema[column].is_numeric(), nulls_last=True, maintain_order=True)
