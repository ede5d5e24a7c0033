"""The layers of each view of the stage breakdown (`analyses.stages`), in priority order: the
CPU and GPU intervals of each stage. In the pipeline and mapping views an interval's stage
comes from its op's chain (`attribution.distinct_chains`: each distinct chain matched once), as
a code in the view's stage names gathered by op row; the tensorboard view is by kind and name."""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.attribution import distinct_chains
from traceanalyzer.analyses.intervals import filled, positions
from traceanalyzer.analyses.modules import op_modules
from traceanalyzer.analyses.op_tree import is_row_number
from traceanalyzer.options import PatternOptions
from traceanalyzer.patterns import D2H_COPY, H2D_COPY, MODEL_CPU, PROFILER_STEP, TB_DATALOADER
from traceanalyzer.trace import Trace

PIPELINE_STAGES = (
    "data_loading",
    "h2d",
    "forward",
    "backward",
    "optimizer",
    "d2h",
    "sync_wait",
    "other_cpu",
    "gpu_idle",
)
IV_SCHEMA = {"start_ns": pl.Int64, "end_ns": pl.Int64}


def _iv(df: pl.DataFrame) -> pl.DataFrame:
    return (
        df.select(start_ns=pl.col("ts_ns"), end_ns=pl.col("end_ns"))
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .cast(IV_SCHEMA)
    )


def _chain_labels(trace: Trace, labels: list[pl.Expr]) -> pl.DataFrame:
    """op_id and the `labels` (expressions of `op_chain`) of every op: the modules it ran in
    (`nn.Module: Name` frames of with_modules traces), then its ops and ranges, outermost first,
    ' > ' joined; stage patterns match against it. Each distinct chain is labelled once
    (`attribution.distinct_chains`): a string per op held 120 MB at 311 MB."""
    per_op, chains = distinct_chains(trace, trace.ops["op_id"])
    modules = op_modules(trace)
    if modules.is_empty():  # no module frames: a label per chain, given to its ops by a gather
        classes = chains.with_columns(op_chain=pl.col("op_chain").fill_null(""))
        labelled = classes.select("chain", *labels)
        at = pl.Series("chain", [None], dtype=pl.UInt32).new_from_index(0, int(per_op["chain"].max() or 0) + 1)
        at = at.scatter(labelled["chain"], pl.int_range(labelled.height, dtype=pl.UInt32, eager=True))
        rows = at.gather(per_op["chain"])
        return pl.DataFrame([per_op["op_id"], *(labelled.get_column(c).gather(rows) for c in labelled.columns[1:])])
    modules = modules.select(
        "op_id",
        _mods=pl.lit("nn.Module: ") + pl.col("module_path").str.replace_all("/", " > nn.Module: ", literal=True),
    )
    per_op = per_op.join(modules, on="op_id", how="left", maintain_order="left")
    classes = per_op.select("chain", "_mods").unique(maintain_order=True)
    classes = classes.join(chains, on="chain", how="left", maintain_order="left").with_columns(
        op_chain=pl.when(pl.col("_mods").is_not_null())
        .then(pl.col("_mods") + pl.lit(" > ") + pl.col("op_chain").fill_null(""))
        .otherwise(pl.col("op_chain").fill_null(""))
    )
    labelled = classes.select("chain", "_mods", *labels)
    out = per_op.join(labelled, on=["chain", "_mods"], how="left", nulls_equal=True, maintain_order="left")
    return out.select("op_id", *[c for c in labelled.columns if c not in ("chain", "_mods")])


def _label(rules: list[tuple[str, str]], fallback: pl.Expr) -> pl.Expr:
    chain = pl.col("op_chain").fill_null("")
    expr = None
    for name, pattern in rules:
        cond = chain.str.contains(pattern)
        expr = pl.when(cond).then(pl.lit(name)) if expr is None else expr.when(cond).then(pl.lit(name))
    return fallback if expr is None else expr.otherwise(fallback)


def _labelled(
    trace: Trace, rules: list[tuple[str, str]], cpu_fallback: pl.Expr, gpu_fallback: str, names: tuple[str, ...]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(cpu intervals, gpu intervals): start_ns, end_ns, label (its position in `names`, UInt32;
    the gpu ones with `_copy`: 1 host to device, 2 device to host, 0 neither). The labels depend
    on the op chain only: each op's chain is matched once, and the ops, runtime calls and GPU
    activities get their op's label by a gather (a call without an op gets the label of an
    empty chain). A CPU interval inside the op that encloses it (its parent, or a runtime
    call's op) under the same label is left out: it adds nothing to its layer's union (1 GB:
    ~2.3 M CPU intervals, most of them nested)."""
    enum = pl.Enum(names)
    cpu_label = _label(rules, cpu_fallback).cast(enum).to_physical().cast(pl.UInt32).alias("_cpu")
    gpu_label = _label(rules, pl.lit(gpu_fallback)).cast(enum).to_physical().cast(pl.UInt32).alias("_gpu")
    labels = _chain_labels(trace, [cpu_label, gpu_label])
    empty = pl.DataFrame({"op_chain": [""]}).select(cpu_label, gpu_label).row(0)
    ops = trace.ops
    n_ops = ops.height
    by_row = is_row_number(ops["op_id"])  # every Trace: an op's label is row op_id of a column
    if by_row:  # a scatter by op id, then gathers, rather than a join of every call and activity
        cpu_of = pl.Series([None], dtype=pl.UInt32).new_from_index(0, n_ops)
        cpu_of = cpu_of.scatter(labels["op_id"], labels["_cpu"]) if labels.height else cpu_of
        gpu_of = pl.Series([None], dtype=pl.UInt32).new_from_index(0, n_ops)
        gpu_of = gpu_of.scatter(labels["op_id"], labels["_gpu"]) if labels.height else gpu_of
    else:
        rows = ops.select("op_id").join(labels, on="op_id", how="left", maintain_order="left")
        cpu_of, gpu_of = rows["_cpu"], rows["_gpu"]
    cpu_of, gpu_of = cpu_of.fill_null(empty[0]), gpu_of.fill_null(empty[1])

    def at(df: pl.DataFrame) -> pl.Series:
        """The row in `trace.ops` of each op id of df (null: no such op)."""
        if by_row:
            i = df["op_id"].cast(pl.Int64)
            return pl.select(pl.when((i >= 0) & (i < n_ops)).then(i).cast(pl.UInt32)).to_series()
        row = ops.select("op_id", _row=pl.int_range(n_ops, dtype=pl.UInt32))
        return df.select("op_id").join(row, on="op_id", how="left", maintain_order="left")["_row"]

    step = ops["name"].str.contains(PROFILER_STEP).fill_null(True)  # ProfilerStep ranges are no stage's
    ts, te = ops["ts_ns"], ops["end_ns"]

    def kept(start: pl.Series, end: pl.Series, label: pl.Series, up: pl.Series) -> pl.Series:
        """Not empty, and not inside the op `up` (an op's parent, a runtime call's op) under its
        own label, when that op is in the layer (no ProfilerStep range): such an interval adds
        nothing. Series operations, each helper let go once used (no query holding them all)."""
        if not by_row:
            return end > start
        has = up.is_not_null()
        up = up.fill_null(0)  # masked by `has`
        inside = has & ~step.gather(up)
        inside = inside & (cpu_of.gather(up) == label)
        inside = inside & (start >= ts.gather(up))
        inside = (inside & (end <= te.gather(up))).fill_null(False)
        return ~inside & (end > start)

    parent = ops["parent_id"].cast(pl.UInt32) if by_row else pl.Series([None], dtype=pl.UInt32).new_from_index(0, n_ops)
    own = kept(ts, te, cpu_of, parent) & ~step
    op_rows = pl.DataFrame({"start_ns": ts.filter(own), "end_ns": te.filter(own), "label": cpu_of.filter(own)})
    del own, parent
    rt = trace.runtime
    rt_op = at(rt)
    rt_label = pl.concat([cpu_of, pl.Series([empty[0]], dtype=pl.UInt32)]).gather(rt_op.fill_null(n_ops))
    rs, re = rt["ts_ns"], rt["end_ns"]
    own = kept(rs, re, rt_label, rt_op)
    rt_rows = pl.DataFrame({"start_ns": rs.filter(own), "end_ns": re.filter(own), "label": rt_label.filter(own)})
    del own, rt_label, rt_op
    cpu = pl.concat([op_rows, rt_rows])
    g = trace.gpu
    g_op = at(g)
    gpu = (
        g.select(
            "ts_ns",
            "end_ns",
            label=pl.lit(pl.concat([gpu_of, pl.Series([empty[1]], dtype=pl.UInt32)])).gather(
                pl.lit(g_op.fill_null(n_ops))
            ),
            _copy=pl.lit(_copy_direction(g)),
        )
        .rename({"ts_ns": "start_ns"})
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    return cpu.cast(IV_SCHEMA), gpu.cast(IV_SCHEMA)


def _copy_direction(g: pl.DataFrame) -> pl.Series:
    """Per GPU activity: 1 a host-to-device memcpy, 2 device-to-host, 0 neither (UInt8). The
    names matched on the memcpy rows alone (a when/then matched every kernel's name: 12 ms of
    two regular expressions over 93 k names at 311 MB, for 17 k copies)."""
    copy = (g.get_column("kind") == "memcpy").fill_null(False)
    rows = positions(copy)
    out = filled(0, g.height, pl.UInt8)
    if not rows.len():
        return out.alias("_copy")
    names = g.get_column("name").gather(rows)
    h2d, d2h = names.str.contains(H2D_COPY).fill_null(False), names.str.contains(D2H_COPY).fill_null(False)
    code = filled(0, rows.len(), pl.UInt8).zip_with(~d2h, filled(2, rows.len(), pl.UInt8))
    return out.scatter(rows, code.zip_with(~h2d, filled(1, rows.len(), pl.UInt8))).alias("_copy")


def pipeline_layers(trace: Trace, opts: PatternOptions, blocked: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(stage, intervals) of the pipeline view in priority order (`stages` module docstring):
    GPU work by the phase of its op's chain, the copies by direction, the blocking calls, then
    the CPU side of the phases and the rest of the traced CPU time."""
    rules = [
        ("data_loading", opts.data_loading_pattern),
        ("backward", opts.backward_pattern),
        ("optimizer", opts.optimizer_pattern),
    ]
    cpu_fallback = (
        pl.when(pl.col("op_chain").fill_null("").str.contains(MODEL_CPU))
        .then(pl.lit("forward"))
        .otherwise(pl.lit("other_cpu"))
    )
    cpu, gpu = _labelled(trace, rules, cpu_fallback, "forward", PIPELINE_STAGES)
    code = {name: i for i, name in enumerate(PIPELINE_STAGES)}

    def g(label: str) -> pl.DataFrame:
        return gpu.filter((pl.col("label") == code[label]) & (pl.col("_copy") == 0)).select(list(IV_SCHEMA))

    def c(label: str) -> pl.DataFrame:
        return cpu.filter(pl.col("label") == code[label]).select(list(IV_SCHEMA))

    loading = gpu.filter(pl.col("label") == code["data_loading"]).select(list(IV_SCHEMA))
    return [
        ("data_loading", pl.concat([c("data_loading"), loading])),
        ("h2d", gpu.filter(pl.col("_copy") == 1).select(list(IV_SCHEMA))),
        ("forward", g("forward")),
        ("backward", g("backward")),
        ("optimizer", g("optimizer")),
        ("d2h", gpu.filter(pl.col("_copy") == 2).select(list(IV_SCHEMA))),
        ("sync_wait", _iv(blocked)),
        ("forward", c("forward")),
        ("backward", c("backward")),
        ("optimizer", c("optimizer")),
        ("other_cpu", c("other_cpu")),
    ]


def mapping_layers(trace: Trace, rules: list[tuple[str, str]], blocked: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """(stage, intervals) of a mapping file's view: GPU work by rule, the blocking calls, CPU
    time by rule, then the GPU and CPU time no rule matched."""
    names = tuple(dict.fromkeys([*(name for name, _ in rules), "other_gpu", "other_cpu"]))
    cpu, gpu = _labelled(trace, rules, pl.lit("other_cpu"), "other_gpu", names)
    code = {name: i for i, name in enumerate(names)}

    def g(label: str) -> pl.DataFrame:
        return gpu.filter(pl.col("label") == code[label]).select(list(IV_SCHEMA))

    def c(label: str) -> pl.DataFrame:
        return cpu.filter(pl.col("label") == code[label]).select(list(IV_SCHEMA))

    layers = [(name, g(name)) for name, _ in rules]
    layers.append(("sync_wait", _iv(blocked)))
    layers += [(name, c(name)) for name, _ in rules]
    layers += [("other_gpu", g("other_gpu")), ("other_cpu", c("other_cpu"))]
    return layers


def tensorboard_layers(trace: Trace) -> list[tuple[str, pl.DataFrame]]:
    """(category, intervals) of the TensorBoard plugin's step breakdown, in its priority order."""
    ops = trace.ops.filter(~pl.col("name").str.contains(PROFILER_STEP))
    loader = pl.col("name").str.contains(TB_DATALOADER)
    return [
        ("Kernel", _iv(trace.gpu.filter(pl.col("kind") == "kernel"))),
        ("Memcpy", _iv(trace.gpu.filter(pl.col("kind") == "memcpy"))),
        ("Memset", _iv(trace.gpu.filter(pl.col("kind") == "memset"))),
        ("Runtime", _iv(trace.runtime)),
        ("DataLoader", _iv(ops.filter(loader))),
        ("CPU Exec", _iv(ops.filter(~loader))),
    ]
