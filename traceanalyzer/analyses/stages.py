"""Where each step's time went: every moment of a step given to exactly one stage, by priority.

The "pipeline" view (default), in priority order:

- `data_loading`: CPU inside a data-loading range (DataLoader `__next__`...), or GPU work
  launched from one;
- `h2d`: a host-to-device copy running on the GPU;
- `forward`, `backward`, `optimizer`: GPU work launched by an op of that phase (the phase
  comes from the op's chain: `autograd::engine::evaluate_function` / `*Backward*` ranges are
  backward, `Optimizer.step#…` / `Optimizer.zero_grad#…` optimizer, the rest forward);
- `d2h`: a device-to-host copy running on the GPU;
- `sync_wait`: a CPU thread blocked in a synchronising call (cudaStreamSynchronize, a
  pageable-memory copy, …) while the GPU ran none of the above;
- then the CPU side of the phases, while the GPU ran nothing: `forward` (namespaced ops such as
  `aten::*` and `nn.Module` ranges outside backward and optimizer), `backward`, `optimizer`;
- `other_cpu`: any other traced CPU op, range or runtime call (ProfilerStep ranges excluded);
- `gpu_idle`: the rest: the GPU idle and nothing traced on the CPU.

A mapping file (`--stages FILE`, TOML, `[stages]` table of stage = regular expression, in
priority order) replaces the phases: a stage takes GPU work launched by ops whose chain matches
and, after `sync_wait`, CPU time in such ops; then `other_gpu`, `other_cpu`, `gpu_idle`.

The "tensorboard" view reproduces the TensorBoard profiler plugin's step breakdown: Kernel >
Memcpy > Memset > Runtime > DataLoader (ops named `enumerate(DataLoader)#…__next__`) > CPU Exec
(every other CPU op or annotation, ProfilerStep ranges excluded); Other is the rest.

Windows are the steps of `analyses.windows` (without ProfilerStep, the trace as one step, step
null). GPU work of all devices shares one timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.attribution import distinct_chains
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.intervals import covered
from traceanalyzer.analyses.layer_coverage import cumulative_unions, unband
from traceanalyzer.analyses.modules import op_modules
from traceanalyzer.analyses.op_tree import is_row_number
from traceanalyzer.errors import UsageError
from traceanalyzer.options import Options, PatternOptions, StageOptions
from traceanalyzer.patterns import D2H_COPY, H2D_COPY, MODEL_CPU, PROFILER_STEP, TB_DATALOADER
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, display_us, mean_us

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
TENSORBOARD_STAGES = ("Kernel", "Memcpy", "Memset", "Runtime", "DataLoader", "CPU Exec", "Other")
RESERVED = {"sync_wait", "other_gpu", "other_cpu", "gpu_idle"}
_IV = {"start_ns": pl.Int64, "end_ns": pl.Int64}


@dataclass(frozen=True, repr=False)
class StagesResult(Compact):
    """Each step's time by stage, in priority order, with the average step.

    The tables hold int64 ns (`times_ns`, `table_ns`: durations, summed as integers); `times`
    and `table` are their µs display views (`units.display_us`), the columns the outputs print,
    and `average` / `average_step_us` the means in µs of the integer totals."""

    view: str  # pipeline | tensorboard | mapping
    stages: tuple[str, ...]  # in priority order; the last one is the remainder
    times_ns: pl.DataFrame  # step, stage, time_ns (long form, every step × stage)
    table_ns: pl.DataFrame  # step, duration_ns, then one column per stage (ns)
    total_ns: dict[str, int]  # stage -> its time summed over the steps
    step_total_ns: int  # the steps' durations summed
    window_kind: str  # see analyses.windows.window_kind
    origin_ns: int = 0  # the trace start

    # the µs display views of the ns tables (units.Shown)
    times = Shown("times_ns")

    @property
    def table(self) -> pl.DataFrame:
        """step, duration_us, then one column per stage, in µs (computed once): the long form's
        view pivoted, so a stage's µs are those of `times` to the last digit."""
        if "_table" not in self.__dict__:  # a frozen dataclass forbids setattr, not its __dict__
            durations = display_us(self.table_ns.select("step", "duration_ns"), self.origin_ns)
            self.__dict__["_table"] = _wide(self.times, durations, self.stages)
        return self.__dict__["_table"]

    @property
    def average(self) -> dict[str, float]:
        """stage -> mean µs per step."""
        return {s: mean_us(v, self.table_ns.height) for s, v in self.total_ns.items()}

    @property
    def average_step_us(self) -> float:
        """The mean step, µs."""
        return mean_us(self.step_total_ns, self.table_ns.height)


def read_mapping(path: str) -> list[tuple[str, str]]:
    """Stage rules from a TOML file: `[stages]` with `name = "regex"`, in priority order."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(path, f"cannot read the stage mapping: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(path, f"not valid TOML: {exc}") from exc
    table = data.get("stages")
    if not isinstance(table, dict) or not table:
        raise UsageError(path, 'expected a [stages] table of stage = "regular expression"')
    rules = []
    for name, pattern in table.items():
        if not isinstance(pattern, str):
            raise UsageError(path, f"stage {name!r}: the pattern must be a string")
        if name in RESERVED:
            raise UsageError(path, f"stage name {name!r} is reserved")
        try:
            pl.select(pl.lit("").str.contains(pattern))
        except Exception as exc:  # polars raises ComputeError for a bad regex
            raise UsageError(path, f"stage {name!r}: bad regular expression {pattern!r}: {exc}") from exc
        rules.append((str(name), pattern))
    return rules


def _iv(df: pl.DataFrame) -> pl.DataFrame:
    return (
        df.select(start_ns=pl.col("ts_ns"), end_ns=pl.col("end_ns"))
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .cast(_IV)
    )


def _covered(index: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """step, ns: time of a disjoint union (its coverage index over `_g`) inside each window
    (prefix sums and two join_asofs, `intervals.covered`: no join of the union with the windows)."""
    if index.is_empty():
        return wins.select("step", ns=pl.lit(0, pl.Int64))
    q = wins.select("step", "start_ns", "end_ns", _g=pl.lit(0, pl.Int32)).with_row_index("_w")
    per = covered(q, index, ["_g"], "start_ns", "end_ns", "ns").sort("_w")
    return per.select("step", pl.col("ns").cast(pl.Int64))


def priority_breakdown(layers: list[tuple[str, pl.DataFrame]], wins: pl.DataFrame, remainder: str) -> pl.DataFrame:
    """Give each moment of each window to the first layer (in list order) covering it; several
    layers may share a stage name. Returns step, stage, ns (remainder = uncovered time).

    The unions of the first k layers come from `layer_coverage.cumulative_unions`: each layer sorted
    alone and merged into the union so far (linear), not the union re-sorted with every layer."""
    frames = [iv.select(list(_IV)).cast(_IV).with_columns(_g=pl.lit(0, pl.Int32)) for _, iv in layers]
    indexes, bands = cumulative_unions(frames, ["_g"]) if frames else ([], None)
    indexes = [unband(index, bands, ["_g"]) for index in indexes]  # kept on the bands' axis: keyed again
    del frames
    prev = wins.select("step", prev=pl.lit(0, pl.Int64))
    rows = []
    for (stage, _), index in zip(layers, indexes, strict=True):
        cov = _covered(index, wins)
        step_cov = cov.join(prev, on="step", nulls_equal=True)
        rows.append(step_cov.select("step", stage=pl.lit(stage), ns=pl.col("ns") - pl.col("prev")))
        prev = cov.select("step", prev="ns")
    rest = wins.join(prev, on="step", nulls_equal=True).select(
        "step", stage=pl.lit(remainder), ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("prev")
    )
    rows.append(rest)
    return pl.concat(rows).group_by("step", "stage", maintain_order=True).agg(pl.col("ns").sum())


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

    p = pl.col("_p")
    step = ops["name"].str.contains(PROFILER_STEP).fill_null(True)  # ProfilerStep ranges are no stage's
    # an op row (parent `_p`) or a runtime call (its op `_p`) inside an op of its layer adds nothing
    inside = (
        p.is_not_null()
        & ~pl.lit(step).gather(p)
        & (pl.lit(cpu_of).gather(p) == pl.col("label"))
        & (pl.col("start_ns") >= pl.lit(ops["ts_ns"]).gather(p))
        & (pl.col("end_ns") <= pl.lit(ops["end_ns"]).gather(p))
    ).fill_null(False)
    if not by_row:
        inside = pl.lit(False)
    parent = ops["parent_id"].cast(pl.UInt32) if by_row else pl.Series([None], dtype=pl.UInt32).new_from_index(0, n_ops)
    op_rows = pl.DataFrame({"start_ns": ops["ts_ns"], "end_ns": ops["end_ns"], "label": cpu_of, "_p": parent}).filter(
        ~step
    )
    rt = trace.runtime
    rt_op = at(rt)
    rt_rows = pl.DataFrame(
        {
            "start_ns": rt["ts_ns"],
            "end_ns": rt["end_ns"],
            "label": pl.concat([cpu_of, pl.Series([empty[0]], dtype=pl.UInt32)]).gather(rt_op.fill_null(n_ops)),
            "_p": rt_op,
        }
    )
    cpu = pl.concat([op_rows, rt_rows]).filter(~inside & (pl.col("end_ns") > pl.col("start_ns"))).drop("_p")
    g = trace.gpu
    g_op = at(g)
    memcpy = pl.col("kind") == "memcpy"
    gpu = (
        g.select(
            "ts_ns",
            "end_ns",
            label=pl.lit(pl.concat([gpu_of, pl.Series([empty[1]], dtype=pl.UInt32)])).gather(
                pl.lit(g_op.fill_null(n_ops))
            ),
            _copy=pl.when(memcpy & pl.col("name").str.contains(H2D_COPY))
            .then(pl.lit(1, pl.UInt8))
            .when(memcpy & pl.col("name").str.contains(D2H_COPY))
            .then(pl.lit(2, pl.UInt8))
            .otherwise(pl.lit(0, pl.UInt8)),
        )
        .rename({"ts_ns": "start_ns"})
        .filter(pl.col("end_ns") > pl.col("start_ns"))
    )
    return cpu.cast(_IV), gpu.cast(_IV)


def _pipeline_layers(trace: Trace, opts: PatternOptions, blocked: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
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
        return gpu.filter((pl.col("label") == code[label]) & (pl.col("_copy") == 0)).select(list(_IV))

    def c(label: str) -> pl.DataFrame:
        return cpu.filter(pl.col("label") == code[label]).select(list(_IV))

    loading = gpu.filter(pl.col("label") == code["data_loading"]).select(list(_IV))
    return [
        ("data_loading", pl.concat([c("data_loading"), loading])),
        ("h2d", gpu.filter(pl.col("_copy") == 1).select(list(_IV))),
        ("forward", g("forward")),
        ("backward", g("backward")),
        ("optimizer", g("optimizer")),
        ("d2h", gpu.filter(pl.col("_copy") == 2).select(list(_IV))),
        ("sync_wait", _iv(blocked)),
        ("forward", c("forward")),
        ("backward", c("backward")),
        ("optimizer", c("optimizer")),
        ("other_cpu", c("other_cpu")),
    ]


def _mapping_layers(
    trace: Trace, rules: list[tuple[str, str]], blocked: pl.DataFrame
) -> list[tuple[str, pl.DataFrame]]:
    names = tuple(dict.fromkeys([*(name for name, _ in rules), "other_gpu", "other_cpu"]))
    cpu, gpu = _labelled(trace, rules, pl.lit("other_cpu"), "other_gpu", names)
    code = {name: i for i, name in enumerate(names)}

    def g(label: str) -> pl.DataFrame:
        return gpu.filter(pl.col("label") == code[label]).select(list(_IV))

    def c(label: str) -> pl.DataFrame:
        return cpu.filter(pl.col("label") == code[label]).select(list(_IV))

    layers = [(name, g(name)) for name, _ in rules]
    layers.append(("sync_wait", _iv(blocked)))
    layers += [(name, c(name)) for name, _ in rules]
    layers += [("other_gpu", g("other_gpu")), ("other_cpu", c("other_cpu"))]
    return layers


def _tensorboard_layers(trace: Trace) -> list[tuple[str, pl.DataFrame]]:
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


def _wide(times: pl.DataFrame, durations: pl.DataFrame, stages: tuple[str, ...]) -> pl.DataFrame:
    """step, the duration, then one column per stage: the long form (step, stage, one time
    column) pivoted onto the steps (step, one duration column)."""
    value = times.columns[2]
    wide = times.pivot(on="stage", index="step", values=value, maintain_order=True) if times.height else pl.DataFrame()
    table = durations.join(wide, on="step", how="left", nulls_equal=True) if wide.height else durations
    return table.select("step", durations.columns[1], *[s for s in stages if s in table.columns])


def analyse_stages(
    trace: Trace,
    options: Options | StageOptions | None = None,
    view: str | None = None,
    mapping: list[tuple[str, str]] | None = None,
    *,
    blocking: pl.DataFrame | None = None,
) -> StagesResult:
    """Each moment of each step given to one stage. `view` and `mapping` default to the
    options' `stage_view` and `stage_mapping`; `blocking` is the trace's blocking calls when
    already computed (`cpu_activity.blocking_calls`)."""
    bundle = Options.of(options)
    view = view or bundle.stages.stage_view
    mapping = list(mapping or bundle.stages.stage_mapping)
    blocked = blocking if blocking is not None else (blocking_calls(trace) if view != "tensorboard" else None)
    if view == "tensorboard":
        if mapping:
            raise UsageError(None, "a stage mapping cannot be combined with the tensorboard view")
        layers, remainder, view_name = _tensorboard_layers(trace), "Other", "tensorboard"
        stages = TENSORBOARD_STAGES
    elif view != "pipeline":
        raise UsageError(None, f"unknown view {view!r}: use pipeline or tensorboard")
    elif mapping:
        layers, remainder, view_name = _mapping_layers(trace, mapping, blocked), "gpu_idle", "mapping"
        stages = tuple(n for n, _ in mapping) + ("sync_wait", "other_gpu", "other_cpu", "gpu_idle")
    else:
        layers, remainder, view_name = _pipeline_layers(trace, bundle.patterns, blocked), "gpu_idle", "pipeline"
        stages = PIPELINE_STAGES
    wins, window_kind = windows.step_windows(trace), windows.window_kind(trace)
    long = priority_breakdown(layers, wins, remainder)
    times = (
        wins.select("step", "start_ns")
        .join(pl.DataFrame({"stage": list(stages)}), how="cross")
        .join(long, on=["step", "stage"], how="left", nulls_equal=True)
        .select("step", "stage", time_ns=pl.col("ns").fill_null(0).cast(pl.Int64))
    )
    durations = wins.select("step", duration_ns=pl.col("end_ns") - pl.col("start_ns"))
    table = _wide(times, durations, stages)
    total = {s: int(table[s].sum()) for s in stages if s in table.columns}
    step_total = int(durations["duration_ns"].sum())
    return StagesResult(view_name, stages, times, table, total, step_total, window_kind, trace.meta.origin_ns)
