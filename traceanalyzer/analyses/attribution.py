"""Who did it: from an op id to the op a user would name, the record_function range around
it, the whole chain and the Python line. Shared by gaps, copies, syncs, kernels, memory and
stages."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.intervals import filter_rows
from traceanalyzer.analyses.op_tree import ancestors, is_row_number
from traceanalyzer.links import innermost_containing, nest
from traceanalyzer.patterns import NAMESPACED_OP, PROFILER_STEP
from traceanalyzer.trace import Trace

CONTEXT_SCHEMA = {
    "op_id": pl.Int64,
    "op": pl.String,
    "named_op_id": pl.Int64,
    "range": pl.String,
    "op_chain": pl.String,
    "python_frame": pl.String,
}


# Up to this many ops, a trace's context is made once for every op and each call filters it: a
# small rank's analyses ask six times (copies, syncs, kernels, roofline, culprits twice), ~1.5 ms
# each in ~15 polars queries, where the whole table of a DLRM rank's 1,673 ops costs ~2 ms once.
WHOLE_CONTEXT_OPS = 1 << 16


def op_context(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """One row per distinct op id of `op_ids` found in the trace: CONTEXT_SCHEMA, by op id.

    - op: the outermost namespaced op of the chain (`aten::item` rather than its inner
      `aten::_local_scalar_dense`, `aten::to` rather than `aten::copy_`), else the innermost op;
      `named_op_id` is its id;
    - range: the innermost other range above `op`;
    ProfilerStep ranges are left out of the chain: an op directly in the step loop has no op
    above it, and a call made directly in the loop has no op at all (no row).
    - op_chain: names from the outermost to the innermost op, joined by " > ";
    - python_frame: the user-code line around the innermost op, if the trace has stacks.
    """
    ops = trace.ops
    if not 0 < ops.height <= WHOLE_CONTEXT_OPS or not is_row_number(ops["op_id"]):
        return _op_context(trace, op_ids)
    whole = trace.derived("op_context", lambda: _op_context(trace, ops["op_id"]))
    # the rows asked for by a mask over the ops (op_id is the row): scatter and index are no
    # polars query, `is_in` of an imploded list is three (~25 µs each)
    ids = op_ids.cast(pl.Int64)
    ids = ids.filter((ids >= 0) & (ids < ops.height)).cast(pl.UInt32)
    asked = pl.Series([False]).new_from_index(0, ops.height).scatter(ids, True)
    return filter_rows(whole, asked[whole.get_column("op_id").cast(pl.UInt32)])  # column by column: no query


def _op_context(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """`op_context` computed for `op_ids`."""
    ops = trace.ops
    anc = ancestors(ops, op_ids)
    if anc.is_empty():
        return pl.DataFrame(schema=CONTEXT_SCHEMA)
    not_step, namespaced_op = _name_marks(trace)
    if is_row_number(ops["op_id"]):  # every Trace: gather by row (UInt32 indexing: no query), no join
        at = anc["ancestor_id"].cast(pl.UInt32)
        keep = not_step[at]
        at = at.filter(keep)
        anc = anc.filter(keep).hstack([ops["name"][at].alias("name"), namespaced_op[at].alias("_ns")])
    else:
        names = ops.select(pl.col("op_id").alias("ancestor_id"), "name", _ns=namespaced_op).filter(not_step)
        anc = anc.join(names, on="ancestor_id", how="inner")
    # the namespaced test per op, one string op, not a `list.eval` (a query of its own per call:
    # most of op_context's time on a small rank)
    chains = (
        anc.sort(["op_id", "level"], descending=[False, True])
        .group_by("op_id", maintain_order=True)
        .agg(chain=pl.col("name"), ids=pl.col("ancestor_id"), _ns=pl.col("_ns"))
    )
    chain = pl.col("chain")
    namespaced = pl.col("_ns")
    op_pos = pl.when(namespaced.list.any()).then(namespaced.list.arg_max()).otherwise(chain.list.len() - 1)
    out = chains.with_columns(_pos=op_pos).with_columns(
        op=chain.list.get(pl.col("_pos")),
        named_op_id=pl.col("ids").list.get(pl.col("_pos")),
        range=chain.list.head(pl.col("_pos")).list.last(),
        op_chain=chain.list.join(" > "),
    )
    if is_row_number(ops["op_id"]):
        out = out.hstack([ops["python_frame"][out["op_id"].cast(pl.UInt32)]])
    else:
        out = out.join(ops.select("op_id", "python_frame"), on="op_id", how="left")
    return out.select(list(CONTEXT_SCHEMA)).cast(CONTEXT_SCHEMA)


def _name_marks(trace: Trace) -> tuple[pl.Series, pl.Series]:
    """Per op (by row): not a ProfilerStep range, and a namespaced op (`aten::...`). Once per
    Trace: each `op_context` of a large trace tested every name again.

    A step is where the call happened, not what made it: a call made directly in the loop
    belongs to no op (its site is then its API and Python line), not to ProfilerStep#N."""

    def marks() -> tuple[pl.Series, pl.Series]:
        names = trace.ops["name"].fill_null("")
        return ~names.str.contains(PROFILER_STEP), names.str.contains(NAMESPACED_OP)

    return trace.derived("op_name_marks", marks)


# Above this many ops, `distinct_chains` numbers the chains level by level of the op tree.
LEVEL_CHAIN_OPS = 1 << 16


def distinct_chains(trace: Trace, op_ids: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The op chains of `op_ids` with each distinct chain made once: (op_id, chain) for every op
    `op_context` gives a row, and (chain, op_chain) per distinct chain, its string `op_context`'s
    of one op that has it. Ops under the same names (from the outermost, ProfilerStep ranges
    left out, as `op_context`) share a chain: a trace of 300k ops has a few thousand, and a
    string per op (up to hundreds of bytes each) is what a question asked of every op, as the
    stage breakdown's patterns, need not hold.

    A chain is numbered from its parent's (`_chain_ids`, level by level of the op tree: one
    int64 key per op), not from the list of every op's ancestors (1 M rows at 311 MB, sorted and
    hashed as lists: 0.2 CPU-s and +76 MB of peak, against 0.1 and +15); the lists remain below
    `LEVEL_CHAIN_OPS` ops (a level costs ~10 polars calls: 3x the lists' time on 20k ops) and
    for an op table whose ids are not its rows or whose depths are not those of its `parent_id`."""
    ops = trace.ops
    none = (
        pl.DataFrame(schema={"op_id": pl.Int64, "chain": pl.UInt32}),
        pl.DataFrame(schema={"chain": pl.UInt32, "op_chain": pl.String}),
    )
    ids = op_ids.cast(pl.Int64).drop_nulls()
    if ids.is_empty() or ops.is_empty():
        return none
    chain = chain_ids(trace)
    if chain is None:
        return _distinct_chains_by_lists(trace, op_ids, none)
    ids = ids.filter((ids >= 0) & (ids < ops.height)).cast(pl.UInt32)
    asked = pl.Series([False]).new_from_index(0, ops.height).scatter(ids, True)
    per_op = pl.DataFrame({"op_id": ops["op_id"].cast(pl.Int64), "chain": chain}).filter(
        asked & (chain != 0)  # 0: no chain (a ProfilerStep range with none above it)
    )
    if per_op.is_empty():
        return none
    firsts = per_op.get_column("chain").arg_unique()  # each chain's first op, in op order
    classes = per_op[firsts].select("chain", _rep="op_id")
    strings = op_context(trace, classes["_rep"]).select(_rep="op_id", op_chain="op_chain")
    chains = classes.join(strings, on="_rep", how="left", maintain_order="left")
    return per_op, chains.select("chain", "op_chain")


def chain_ids(trace: Trace) -> pl.Series | None:
    """Per op (by row) the number of its chain (`_chain_ids`), once per Trace (the stage
    breakdown and the kernels' launching ops read it); None below `LEVEL_CHAIN_OPS` ops, where
    the lists of ancestors cost less, or when the Trace's nesting does not allow it."""
    ops = trace.ops
    if ops.height <= LEVEL_CHAIN_OPS or not is_row_number(ops["op_id"]):
        return None
    return trace.derived("chain_ids", lambda: _chain_ids(trace))


def named_ops(trace: Trace, op_ids: pl.Series) -> pl.DataFrame:
    """op_id, op: `op_context`'s `op` (the op a user would name) for each distinct op id of
    `op_ids` it gives a row. The name depends on the chain only: on a large trace it is made
    once per distinct chain (`chain_ids`) and given to the ops by a gather, not made from the
    ancestors of every op (at 311 MB: the 60k ops launching kernels, +30 MB and 0.08 CPU-s)."""
    chain = chain_ids(trace)
    if chain is None:
        return op_context(trace, op_ids).select("op_id", "op")
    n = trace.ops.height
    ids = op_ids.cast(pl.Int64).drop_nulls().unique(maintain_order=True)
    ids = ids.filter((ids >= 0) & (ids < n))
    per_op = pl.DataFrame({"op_id": ids, "chain": chain.gather(ids.cast(pl.UInt32))}).filter(pl.col("chain") != 0)
    if per_op.is_empty():
        return pl.DataFrame(schema={"op_id": CONTEXT_SCHEMA["op_id"], "op": CONTEXT_SCHEMA["op"]})
    reps = per_op[per_op.get_column("chain").arg_unique()]
    names = op_context(trace, reps["op_id"]).select("op_id", "op")
    by_chain = reps.join(names, on="op_id", how="left", maintain_order="left").select("chain", "op")
    return per_op.join(by_chain, on="chain", how="left", maintain_order="left").select("op_id", "op")


def _chain_ids(trace: Trace) -> pl.Series | None:
    """Per op (by row), a number naming its chain (UInt32; 0: no chain): ops share it exactly
    when the names of their chains (ProfilerStep ranges left out) are equal. Made top-down, one
    tree level at a time: an op's number is that of its parent's chain with its own name code
    appended (a key `parent chain x codes + code`; a key not seen at an earlier level gets the
    next number, in order of first op), and a ProfilerStep range passes its parent's on. None
    when `depth` is not the depth of `parent_id` (a table not nested by `links.nest`)."""
    ops = trace.ops
    n = ops.height
    if "depth" not in ops.columns or ops["depth"].null_count():
        return None
    parent = ops["parent_id"]
    depth = ops["depth"].cast(pl.Int32)
    up = parent.fill_null(n).cast(pl.UInt32)  # n: no parent, the slot of the empty chain
    has_up = up < n
    # depth must be 0 at the top and one more than the parent's elsewhere: then the levels below
    # are a topological order (and a cycle of parent ids is impossible)
    if (depth.filter(~has_up) != 0).any() or (depth.gather(up.filter(has_up)) + 1 != depth.filter(has_up)).any():
        return None
    not_step = _name_marks(trace)[0]
    code = ops["name"].cast(pl.Categorical).to_physical().cast(pl.Int64)  # equal names, equal codes
    width = int(code.max() or 0) + 2
    code = code.fill_null(width - 1)
    if n * width >= 1 << 62:  # pragma: no cover - 2^31 ops under 2^31 names
        return None
    chain = pl.Series("chain", [0], dtype=pl.UInt32).new_from_index(0, n + 1)
    known = pl.DataFrame(schema={"key": pl.Int64, "id": pl.UInt32})  # every chain numbered so far
    order = depth.arg_sort()  # stable: each level's ops in op order
    start = 0
    for length in depth.gather(order).rle().struct.field("len").to_list():
        at = order.slice(start, length)
        start += length
        above = chain.gather(up.gather(at))
        level = pl.DataFrame({"key": above.cast(pl.Int64) * width + code.gather(at), "_own": not_step.gather(at)})
        # a chain may end at several depths (a ProfilerStep range between): numbered once
        fresh = level.filter("_own").select("key").unique(maintain_order=True).join(known, on="key", how="anti")
        known = pl.concat(
            [known, fresh.with_columns(id=pl.int_range(1, fresh.height + 1, dtype=pl.UInt32) + known.height)]
        )
        got = level.join(known, on="key", how="left", maintain_order="left").get_column("id")
        chain.scatter(at, pl.select(pl.when(level.get_column("_own")).then(got).otherwise(above)).to_series())
    return chain.slice(0, n)


def _distinct_chains_by_lists(
    trace: Trace, op_ids: pl.Series, none: tuple[pl.DataFrame, pl.DataFrame]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`distinct_chains` from every op's list of ancestors' name codes."""
    ops = trace.ops
    anc = ancestors(ops, op_ids)
    if anc.is_empty():
        return none
    not_step = _name_marks(trace)[0]
    code = ops["name"].cast(pl.Categorical).to_physical()  # equal names, equal codes
    if is_row_number(ops["op_id"]):
        anc = anc.filter(not_step.gather(anc["ancestor_id"]))
        anc = anc.with_columns(_code=code.gather(anc["ancestor_id"]))
    else:
        codes = ops.select(pl.col("op_id").alias("ancestor_id"), _code=code).filter(not_step)
        anc = anc.join(codes, on="ancestor_id", how="inner")
    # outermost first: by op, then level descending, sorted as one int64 key (a sort on the two
    # columns row-encodes them: 0.1 s for the 1M ancestors of a 311 MB trace's ops)
    top = int(anc["level"].max() or 0) + 1
    key = pl.col("op_id").cast(pl.Int64) * top + (top - 1 - pl.col("level").cast(pl.Int64))
    # (the key orders op_id too: flagged, the group_by takes its sorted path)
    anc = anc.sort(key).with_columns(pl.col("op_id").set_sorted())
    per_op = anc.group_by("op_id", maintain_order=True).agg(_codes=pl.col("_code"))
    del anc
    classes = per_op.group_by("_codes", maintain_order=True).agg(_rep=pl.col("op_id").first()).with_row_index("chain")
    per_op = per_op.join(classes.select("_codes", "chain"), on="_codes", how="left", maintain_order="left")
    strings = op_context(trace, classes["_rep"]).select(_rep="op_id", op_chain="op_chain")
    chains = classes.select("chain", "_rep").join(strings, on="_rep", how="left", maintain_order="left")
    return per_op.select(pl.col("op_id").cast(pl.Int64), "chain"), chains.select("chain", "op_chain")


def python_line_at(trace: Trace, points: pl.DataFrame, key: str) -> pl.DataFrame:
    """key, python_frame: for each point (key, pid, tid, ts_ns), the innermost user-code frame
    its thread was in at that instant (traces captured with with_stack; none otherwise)."""
    user = trace.python.filter(pl.col("is_user"))
    if user.is_empty() or points.is_empty():
        return pl.DataFrame(schema={key: points.schema.get(key, pl.Int64), "python_frame": pl.String})
    user = nest(user.drop("depth", "parent_id"), "frame_id")
    found = innermost_containing(points, user, "frame_id", "_frame", point_end="ts_ns")
    names = user.select(pl.col("frame_id").alias("_frame"), pl.col("name").alias("python_frame"))
    return found.join(names, on="_frame", how="inner").select(key, "python_frame")
