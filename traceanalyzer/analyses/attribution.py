"""Who did it: from an op id to the op a user would name, the record_function range around
it, the whole chain and the Python line. Shared by gaps, copies and syncs."""

from __future__ import annotations

import polars as pl

from traceanalyzer.trace import Trace

STEP_RE = r"^ProfilerStep#\d+$"
# A namespaced op (aten::to, c10d::allreduce_, vllm::unified_attention) is what user code
# called; anything else in the chain is a range (record_function, module, DataLoader).
NAMESPACED_OP = r"^[A-Za-z_][\w.]*::\w"
_MAX_DEPTH = 256


def op_context(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """One row per distinct non-null op id: op_id, op, range, op_chain, python_frame.

    - op: the outermost namespaced op of the chain (`aten::item` rather than its inner
      `aten::_local_scalar_dense`, `aten::to` rather than `aten::copy_`), else the innermost op;
    - range: the innermost other range above `op` that is not a ProfilerStep;
    - op_chain: names from the outermost to the innermost op, joined by " > ";
    - python_frame: the user-code line around the innermost op, if the trace has stacks.
    """
    ids = pl.DataFrame({"op_id": op_ids.cast(pl.Int64)}).drop_nulls().unique()
    ops = trace.ops.select("op_id", "name", "parent_id", "python_frame")
    if ids.is_empty() or ops.is_empty():
        return pl.DataFrame(
            schema={
                "op_id": pl.Int64,
                "op": pl.String,
                "range": pl.String,
                "op_chain": pl.String,
                "python_frame": pl.String,
            }
        )
    # Walk up: level 0 is the op itself.
    cur = ids.join(ops, on="op_id", how="left").select(
        "op_id", pl.col("python_frame"), pl.concat_list(pl.col("name")).alias("chain"), pl.col("parent_id").alias("_up")
    )
    parents = ops.select(pl.col("op_id").alias("_up"), pl.col("name").alias("_pname"), pl.col("parent_id").alias("_pp"))
    for _ in range(_MAX_DEPTH):
        if cur.filter(pl.col("_up").is_not_null()).is_empty():
            break
        cur = (
            cur.join(parents, on="_up", how="left")
            .with_columns(
                chain=pl.when(pl.col("_pname").is_not_null())
                .then(pl.concat_list(pl.col("_pname"), pl.col("chain")))
                .otherwise(pl.col("chain")),
                _up=pl.col("_pp"),
            )
            .drop("_pname", "_pp")
        )
    chain = pl.col("chain")
    namespaced = chain.list.eval(pl.element().str.contains(NAMESPACED_OP))
    first_ns = namespaced.list.arg_max()
    has_ns = namespaced.list.any()
    op_pos = pl.when(has_ns).then(first_ns).otherwise(chain.list.len() - 1)
    out = cur.with_columns(_pos=op_pos).with_columns(
        op=chain.list.get(pl.col("_pos")),
        range=chain.list.head(pl.col("_pos"))
        .list.eval(pl.element().filter(~pl.element().str.contains(STEP_RE)))
        .list.last(),
        op_chain=chain.list.join(" > "),
    )
    return out.select("op_id", "op", "range", "op_chain", "python_frame")
