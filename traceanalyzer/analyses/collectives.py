"""Collectives: one rank's collective kernels with their process group and sequence, the time
compute did not hide, and the same collective matched across ranks.

Definitions:
- a rank's collectives: GPU kernels matching `collective_pattern`, each joined to the metadata
  PyTorch records for it (on the kernel by `correlation`, else on its `record_param_comms` op by
  `External id`): collective name, process group, group size, element counts, dtype.
- sequence: the k-th collective of a process group on this rank (time order). Ranks issue a
  group's collectives in the same order, so (group, sequence) names one collective on every
  rank of the group, as TraceLens matches them. A job where some rank lacks the group metadata
  (traces before PyTorch 2.3) falls back to (kernel name, occurrence), and says so.
- exposed communication: time inside collective kernels that no compute kernel (any other
  kernel on the same device) overlaps.
- arrival: the kernel's start on the aligned clock; skew = last arrival - first arrival. Every
  rank's kernel ends when the last has arrived and the data has moved, so the shortest kernel
  across ranks is the transfer's own time, and a rank's wait = min(last arrival - its arrival,
  its kernel time).
- bandwidth (NCCL tests, PERFORMANCE.md): size S = max(in, out) elements x dtype bytes (the
  total buffer: the gathered output of an all-gather, the input of a reduce-scatter), algbw =
  S / transfer time, busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
  reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv (n: group size).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import intervals
from traceanalyzer.patterns import MEMO_NAMES, matches

DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "half": 2,
    "bfloat16": 2,
    "long": 8,
    "int": 4,
    "short": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}
# Ordered: the first key contained in the normalised name decides ("reducescatter" before "reduce").
KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv", "send", "recv")
BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}

RANK_COLL_SCHEMA = {
    "cidx": pl.Int64,
    "name": pl.String,
    "device": pl.Int64,
    "ts_ns": pl.Int64,
    "end_ns": pl.Int64,
    "k": pl.Int64,
    "coll": pl.String,
    "pg_name": pl.String,
    "seq": pl.Int64,
    "group_size": pl.Int64,
    "bytes": pl.Int64,
    "dtype": pl.String,
}


def kind_of(name: str | None) -> str | None:
    """`allreduce`, `allgather`, … from a PyTorch collective name or an NCCL kernel name."""
    if not name:
        return None
    n = name.lower().replace("_", "")
    n = n.removeprefix("ncclkernel").removeprefix("ncclDevKernel".lower())
    return next((k for k in KINDS if k in n[:40]), None)


def dtype_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a PyTorch dtype name (`Float`, `BFloat16`, `c10::Half`, `Float8_e4m3fn`)."""
    if not dtype:
        return None
    d = dtype.lower().removeprefix("c10::")
    return 1 if d.startswith("float8") else DTYPE_BYTES.get(d)


# The collective metadata of one rank (`rank_io.comm_args`; empty when not read): the
# `args` of `rank_collectives`.
COMM_ARGS_SCHEMA = {
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "is_kernel": pl.Boolean,
    "coll_name": pl.String,
    "pg_name": pl.String,
    "pg_ranks": pl.String,
    "group_size": pl.Int64,
    "in_nelems": pl.Int64,
    "out_nelems": pl.Int64,
    "dtype": pl.String,
}


def _named_like(names: pl.Series, pattern: str) -> pl.Series:
    """`names.str.contains(pattern)` (null for a null name), the pattern tried once per distinct
    name (`patterns.matches`: remembered once a process): a trace's 93 k GPU activities have a
    hundred names, and the regex over every row cost 25-80 ms at 311 MB, where most traces
    have no collective at all."""
    if names.len() <= MEMO_NAMES:
        return matches(names, pattern)
    distinct = names.unique()
    hits = distinct.filter(
        matches(distinct, pattern) if distinct.len() <= MEMO_NAMES else distinct.str.contains(pattern)
    )
    return names.is_in(hits.drop_nulls().implode())


def rank_collectives(gpu: pl.DataFrame, pattern: str, args: pl.DataFrame) -> pl.DataFrame:
    """One rank's collective kernels (RANK_COLL_SCHEMA), time order, with their metadata."""
    is_coll = (gpu["kind"] == "kernel") & _named_like(gpu["name"], pattern)
    # One query for the whole table, run as the eager calls run (`chain`: they were six or more,
    # ~0.3 ms a small rank); the mask is a column of the same rows.
    k = (
        gpu.lazy()
        .select("name", "device", "ts_ns", "end_ns", "correlation", "external_id")
        .filter(pl.lit(is_coll))
        .sort("ts_ns")
        .with_columns(
            pl.col("device", "correlation", "external_id").cast(pl.Int64),
            k=pl.int_range(pl.len()).over("name").cast(pl.Int64),
        )
    )
    meta = ["coll_name", "pg_name", "group_size", "in_nelems", "out_nelems", "dtype"]
    if args.height:
        a = args.lazy()
        on_kernel = a.filter("is_kernel").unique("correlation", keep="first").select("correlation", *meta)
        on_op = a.filter(~pl.col("is_kernel")).unique("external_id", keep="first").select("external_id", *meta)
        k = k.join(on_kernel, on="correlation", how="left").join(on_op, on="external_id", how="left", suffix="_op")
        k = k.with_columns([pl.coalesce(m, f"{m}_op").alias(m) for m in meta])
    else:  # no metadata read (none in the trace, or not asked for): every field null, no join
        k = k.with_columns(pl.lit(None, COMM_ARGS_SCHEMA[m]).alias(m) for m in meta)
    # The kind and bytes per element looked up by distinct name and dtype (a handful): a Python call
    # per row (`map_elements`) also imported and inspected its function on first use (~3 ms).
    names = [*gpu["name"].filter(is_coll).unique(), *(args["coll_name"].unique() if args.height else ())]
    kinds = {n: kind_of(n) for n in names if n is not None}
    dtypes = {d: dtype_bytes(d) for d in (args["dtype"].unique() if args.height else ()) if d is not None}
    sizes = pl.col("dtype").replace_strict(dtypes, default=None, return_dtype=pl.Int64)
    made = {
        "cidx": pl.int_range(pl.len()),
        "coll": pl.coalesce("coll_name", "name").replace_strict(kinds, default=None, return_dtype=pl.String),
        "seq": pl.when(pl.col("pg_name").is_not_null()).then(pl.int_range(pl.len()).over("pg_name")).cast(pl.Int64),
        "bytes": pl.max_horizontal("in_nelems", "out_nelems") * sizes,
    }
    return chain.collect(k.select(made.get(c, pl.col(c)).cast(t).alias(c) for c, t in RANK_COLL_SCHEMA.items()))


def exposed_segments(gpu: pl.DataFrame, coll: pl.DataFrame) -> pl.DataFrame:
    """cidx, start_ns, end_ns: the parts of each collective kernel that no compute kernel on
    its device overlaps (the union of the other kernels subtracted from each collective).

    Linear in the events: the compute union per device is turned into its complement (the
    idle gaps, sorted and numbered), each collective finds its first and last overlapping gap
    by two `join_asof`s, and only the gaps in between are expanded, so the work is the size of
    the answer, never collectives x compute intervals."""
    schema = {"cidx": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
    if coll.is_empty():
        return pl.DataFrame(schema=schema)
    compute = chain.collect(  # one query (three eager steps were three)
        gpu.lazy()
        .filter(pl.col("kind") == "kernel")
        .select(pl.col("device").cast(pl.Int64), "ts_ns", "end_ns")
        .join(coll.lazy().select("device", "ts_ns", "end_ns"), on=["device", "ts_ns", "end_ns"], how="anti")
    )
    # The rest is one query (`chain.collect`; the gaps collected once, read three times): on a
    # small rank each eager step was a polars query of its own (~25 of them, ~1 ms).
    idle = _complement(intervals.merge(compute, ["device"]), coll["device"].unique()).lazy()
    c = coll.lazy().select(
        "cidx", "device", "ts_ns", "end_ns", _after=pl.col("ts_ns") + 1, _before=pl.col("end_ns") - 1
    )
    # first gap ending after the kernel starts, last gap starting before it ends
    first = c.sort("_after").join_asof(
        idle.select("device", "gid", _ge="ge").sort("_ge"),
        left_on="_after",
        right_on="_ge",
        by="device",
        strategy="forward",
        check_sortedness=False,
    )
    both = first.sort("_before").join_asof(
        idle.select("device", pl.col("gid").alias("last"), _gs="gs").sort("_gs"),
        left_on="_before",
        right_on="_gs",
        by="device",
        strategy="backward",
        check_sortedness=False,
    )
    span = both.filter(pl.col("gid") <= pl.col("last")).select(
        "cidx", "ts_ns", "end_ns", gid=pl.int_ranges("gid", pl.col("last") + 1)
    )
    seg = span.explode("gid").join(idle.select("gid", "gs", "ge"), on="gid", how="left")
    out = (
        seg.select("cidx", start_ns=pl.max_horizontal("gs", "ts_ns"), end_ns=pl.min_horizontal("ge", "end_ns"))
        .filter(pl.col("start_ns") < pl.col("end_ns"))
        .cast(schema)
        .sort("cidx", "start_ns")
    )
    return chain.collect(out)


def _complement(union: pl.DataFrame, devices: pl.Series) -> pl.DataFrame:
    """device, gid, gs, ge: the time outside each device's disjoint sorted union, from -inf to
    +inf (a device with no compute is one gap), numbered globally in (device, gs) order."""
    lo, hi = -(2**62), 2**62
    u = union.sort("device", "start_ns").lazy()  # sorted once, read three times by one query
    gaps = pl.concat(
        [
            u.select("device", gs=pl.col("end_ns").shift(1, fill_value=lo).over("device"), ge="start_ns"),
            u.group_by("device").agg(gs=pl.col("end_ns").max()).with_columns(ge=pl.lit(hi, pl.Int64)),
            pl.LazyFrame({"device": devices.cast(pl.Int64)})
            .join(u.select("device").unique(), on="device", how="anti")
            .with_columns(gs=pl.lit(lo, pl.Int64), ge=pl.lit(hi, pl.Int64)),
        ],
        how="vertical_relaxed",
    ).cast({"device": pl.Int64, "gs": pl.Int64, "ge": pl.Int64})
    return (
        gaps.filter(pl.col("gs") < pl.col("ge"))
        .sort("device", "gs")
        .with_columns(gid=pl.int_range(pl.len(), dtype=pl.Int64))
    ).pipe(chain.collect)


def match_key(colls: pl.DataFrame) -> tuple[list[str], str]:
    """The columns that name one collective across ranks, and the sentence saying which."""
    if colls.height and colls["pg_name"].null_count() == 0:
        return ["pg_name", "seq"], "collectives matched by process group and per-group sequence"
    return ["name", "k"], (
        "collectives matched by kernel name and occurrence: some rank's trace has no process-group "
        "metadata (`Process Group Name` on record_param_comms / the NCCL kernels; PyTorch < 2.3)"
    )


def instances(colls: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """One row per collective seen on two ranks or more: first and last rank to arrive, skew
    (`skew_ns`), the last rank's lateness after the median arrival (`last_late_ns`), transfer
    time (`transfer_ns`, the shortest kernel), size, algorithm and bus bandwidth; `first_ns`,
    `last_ns`, `median_ns` are arrivals on the aligned clock. `colls`: every rank's collectives
    with `rank` and `arrival_ns` (aligned clock)."""
    c = colls.with_columns(dur_ns=pl.col("end_ns") - pl.col("ts_ns"))
    aggs = {
        "coll": pl.col("coll").drop_nulls().first(),
        "pg_name": pl.col("pg_name").first(),
        "name": pl.col("name").first(),
        "ranks": pl.len(),
        "first_rank": pl.col("rank").first(),
        "last_rank": pl.col("rank").last(),
        "first_ns": pl.col("arrival_ns").first(),
        "last_ns": pl.col("arrival_ns").last(),
        "median_ns": pl.col("arrival_ns").median(),
        "transfer_ns": pl.col("dur_ns").min(),
        "group_size": pl.col("group_size").max(),
        "bytes": pl.col("bytes").max(),
        "dtype": pl.col("dtype").first(),
    }
    g = (
        c.sort("arrival_ns")
        .group_by(key)
        .agg(**{k: v for k, v in aggs.items() if k not in key})
        .filter(pl.col("ranks") >= 2)
        .sort("first_ns")
    )
    n = pl.coalesce("group_size", "ranks")
    factor = (
        pl.when(pl.col("coll") == "allreduce")
        .then(2 * (n - 1) / n)
        .when(pl.col("coll").is_in(["allgather", "reducescatter", "alltoall"]))
        .then((n - 1) / n)
        .otherwise(1.0)
    )
    algbw = pl.col("bytes") / pl.col("transfer_ns")  # bytes per ns = GB/s
    return g.with_columns(
        skew_ns=pl.col("last_ns") - pl.col("first_ns"),
        last_late_ns=pl.col("last_ns") - pl.col("median_ns"),  # float: a median of two is a half
        algbw_gbps=pl.when(pl.col("transfer_ns") > 0).then(algbw),
        busbw_gbps=pl.when(pl.col("transfer_ns") > 0).then(algbw * factor),
    ).select(  # the transfer time after the lateness, where the outputs have always shown it
        pl.exclude("transfer_ns", "algbw_gbps", "busbw_gbps"), "transfer_ns", "algbw_gbps", "busbw_gbps"
    )


def by_group(inst: pl.DataFrame) -> pl.DataFrame:
    """Per process group and collective type: count, transfer and skew totals (integer ns sums),
    mean bus bandwidth."""
    if inst.is_empty():
        return pl.DataFrame()
    return (
        inst.group_by("pg_name", "coll")
        .agg(
            count=pl.len(),
            bytes=pl.col("bytes").sum(),
            transfer_ns=pl.col("transfer_ns").sum(),
            skew_ns=pl.col("skew_ns").sum(),
            max_skew_ns=pl.col("skew_ns").max(),
            busbw_gbps=pl.col("bytes").sum()
            / pl.col("transfer_ns").sum()
            * (pl.col("busbw_gbps") / pl.col("algbw_gbps")).mean(),
        )
        .sort("transfer_ns", descending=True)
    )
