"""Profiled steps: duration, GPU busy share, outliers, and caveats about how the trace was
captured.

A step is an analysis window (`analyses.windows`): a `ProfilerStep#N` range extended to the GPU
side, or, without ProfilerStep, the whole trace as one step (step null). Busy share is the union of GPU work (kernels, memcpys,
memsets; all streams) inside the step over the step's duration, per device, summed over the
devices that did work; `kernel_share` counts kernels only (the TensorBoard plugin's "GPU
utilization").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import windows
from traceanalyzer.analyses.cpu_activity import data_loading_ranges
from traceanalyzer.analyses.intervals import coverage_index, covered, merge_sorted
from traceanalyzer.analyses.step_detection import step_kind
from traceanalyzer.options import Options, StepOptions
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us, us_expr

STEP_COLUMNS = {
    "step": pl.Int64,
    "name": pl.String,
    "kind": pl.String,  # prefill | decode | mixed for LLM serving steps that say so, else null
    "start_ns": pl.Int64,
    "duration_ns": pl.Int64,
    "cpu_duration_ns": pl.Int64,
    "gpu_busy_ns": pl.Int64,
    "busy_share": pl.Float64,
    "kernel_share": pl.Float64,
    "outlier": pl.Boolean,
    "warmup": pl.Boolean,  # a slow step at the start (left out of the averages by default)
}


@dataclass(frozen=True)
class Caveat:
    """Something about how the trace was captured that limits what it can tell."""

    kind: str  # warm_up | too_few_steps | no_steps | data_loading_outside_steps | no_gpu_activity
    message: str
    evidence: dict


@dataclass(frozen=True, repr=False)
class StepsResult(Compact):
    """The steps (analysis windows) with their duration and GPU busy share, and the capture caveats.

    `table_ns` and `by_kind_ns` hold ns on the trace clock; `table`, `by_kind`, `median_us` and
    `mean_us` are their µs display views (`units`)."""

    options: StepOptions
    table_ns: pl.DataFrame  # STEP_COLUMNS, one row per step in time order
    median_ns: float | None
    mean_ns: float | None
    caveats: tuple[Caveat, ...]
    window_kind: str = "steps"  # see analyses.windows.window_kind
    source: str = "profiler"  # how the steps were found (see analyses.step_detection)
    by_kind_ns: pl.DataFrame = field(default_factory=pl.DataFrame)  # kind, steps, mean_ns, median_ns
    origin_ns: int = 0  # the trace start

    # the µs display views of the ns tables (units.Shown)
    table = Shown("table_ns")
    by_kind = Shown("by_kind_ns")

    @property
    def median_us(self) -> float | None:
        """The median step duration (warm-up steps left out unless kept), µs."""
        return None if self.median_ns is None else duration_us(self.median_ns)

    @property
    def mean_us(self) -> float | None:
        """The mean step duration, µs."""
        return None if self.mean_ns is None else duration_us(self.mean_ns)

    @property
    def count(self) -> int:
        """How many steps the table holds (1 for a trace without ProfilerStep)."""
        return self.table.height


def _busy_per_step(trace: Trace) -> pl.DataFrame:
    """step, busy_ns (all GPU work, summed over devices), kernel_ns (kernels alone) and
    device_window_ns (window × devices with work).

    One sort of the activities serves both unions (a filter of the sorted rows stays sorted), and
    each window's busy time is the union's time inside it (`intervals.covered`: prefix sums and an
    as-of join) rather than the union clipped to every window and summed (an overlap join, its
    sort and a group-by: most of `steps` at 311 MB). The same integers: the time of disjoint
    intervals inside a window is their clipped lengths summed."""
    gpu = (
        trace.gpu.lazy()
        .filter(pl.col("kind").is_not_null() & pl.col("device").is_not_null())
        .select("device", "kind", start_ns="ts_ns", end_ns="end_ns")
        .sort("device", "start_ns")
        .collect()
    )
    wins = windows.device_windows(trace)
    kernels = gpu.filter(pl.col("kind") == "kernel").drop("kind")
    per = wins
    for out, acts in (("busy_ns", gpu.drop("kind")), ("kernel_ns", kernels)):
        index = coverage_index(merge_sorted(acts, ["device"]), ["device"], presorted=True)
        per = covered(per, index, ["device"], "start_ns", "end_ns", out)
    return per.group_by("step").agg(
        busy_ns=pl.col("busy_ns").sum(),
        kernel_ns=pl.col("kernel_ns").sum(),
        device_window_ns=(pl.col("end_ns") - pl.col("start_ns")).sum(),
    )


def _warmup(durations: pl.Series, factor: float) -> pl.Series:
    """The slow steps at the start: each leading step longer than `factor` times the median of
    the steps after the leading run (at least two left to judge by)."""
    n = durations.len()
    flags = [False] * n
    if n >= 3:
        for k in range(n - 2):
            rest = durations.slice(k + 1).median()
            if not rest or durations[k] <= factor * rest:
                break
            flags[k] = True
    return pl.Series("warmup", flags, dtype=pl.Boolean)


def _durations(trace: Trace, opts: StepOptions) -> pl.DataFrame:
    """One row per analysis window (the ProfilerSteps, or the trace as one step: step null): step,
    name, start_ns, kind, duration_ns, cpu_duration_ns, outlier, warmup; no GPU time."""
    steps = windows.step_windows(trace).lazy()  # one query (`chain.collect`), run as the eager calls were
    if trace.steps.height:
        cpu = trace.steps.lazy().select("step", "name", cpu_ns=pl.col("cpu_end_ns") - pl.col("cpu_start_ns"))
        steps = steps.join(cpu, on="step", how="left")
    else:
        steps = steps.with_columns(name=pl.lit(None, pl.String), cpu_ns=pl.col("end_ns") - pl.col("start_ns"))
    t = steps.select(
        "step",
        "name",
        "start_ns",
        kind=step_kind(pl.col("name")),
        duration_ns=pl.col("end_ns") - pl.col("start_ns"),
        cpu_duration_ns=pl.col("cpu_ns"),
    ).pipe(chain.collect)
    median = t["duration_ns"].median()
    if median is None or "outlier" in t.columns:
        return t.with_columns(
            outlier=pl.col("duration_ns") > opts.outlier_factor * median,
            warmup=_warmup(t["duration_ns"], opts.outlier_factor),
        )
    # the two columns as Series, put beside: no query (`with_columns` was one)
    outlier = (t["duration_ns"] > opts.outlier_factor * median).alias("outlier")
    return t.hstack([outlier, _warmup(t["duration_ns"], opts.outlier_factor)])


def _step_table(trace: Trace, opts: StepOptions) -> pl.DataFrame:
    """`_durations` and the GPU busy time of each step (`STEP_COLUMNS`)."""
    t = _durations(trace, opts)
    if trace.has_gpu_work:
        t = t.join(_busy_per_step(trace), on="step", how="left", nulls_equal=True)
        t = t.with_columns(
            gpu_busy_ns=pl.col("busy_ns"),
            busy_share=pl.col("busy_ns") / pl.col("device_window_ns"),
            kernel_share=pl.col("kernel_ns") / pl.col("device_window_ns"),
        )
    else:
        t = t.with_columns(
            gpu_busy_ns=pl.lit(0, pl.Int64), busy_share=pl.lit(None, pl.Float64), kernel_share=pl.lit(None, pl.Float64)
        )
    return t.select(list(STEP_COLUMNS)).cast(STEP_COLUMNS)


def _data_loading_outside_steps(trace: Trace, pattern: str) -> tuple[int, int]:
    """How many data-loading ranges lie outside every step window, and their summed duration
    (ns). Once per Trace and pattern: the caveats are asked twice in a summary (the capture
    caveats rule, then the steps), and the pattern is tried on every op name (~15 ms at 311 MB)."""

    def build() -> tuple[int, int]:
        data = data_loading_ranges(trace, pattern)
        if not (data.height and trace.steps.height):
            return 0, 0
        inside = (
            data.lazy()
            .select("op_id", "ts_ns", "end_ns")
            .join_where(
                trace.steps.lazy().select(s="start_ns", e="end_ns"),
                pl.col("ts_ns") < pl.col("e"),
                pl.col("end_ns") > pl.col("s"),
            )
            .select("op_id")
            .unique()
        )
        outside = chain.collect(data.lazy().join(inside, on="op_id", how="anti"))
        return outside.height, int(outside["dur_ns"].sum()) if outside.height else 0

    return trace.derived(f"data_loading_outside_steps {pattern}", build)


def _caveats(trace: Trace, table: pl.DataFrame, opts: StepOptions, data_pattern: str) -> list[Caveat]:
    out: list[Caveat] = []
    if not trace.has_gpu_work:
        out.append(
            Caveat(
                "no_gpu_activity",
                "no GPU activity in this trace (captured without ProfilerActivity.CUDA, or on a machine "
                "without a GPU): GPU idle time, copies and kernels cannot be analysed",
                {"gpu_events": 0, "cpu_ops": trace.ops.height},
            )
        )
    if trace.steps.is_empty():
        out.append(
            Caveat(
                "no_steps",
                "no ProfilerStep in this trace: it counts as one step, so per-step numbers are over the whole "
                "trace; profile with "
                "torch.profiler.schedule(...) and call prof.step() every iteration",
                {"steps": 0},
            )
        )
    else:
        if table.height < opts.min_steps:
            out.append(
                Caveat(
                    "too_few_steps",
                    f"only {table.height} profiled step(s): too few to trust averages (want at least {opts.min_steps})",
                    {"steps": table.height, "min_steps": opts.min_steps},
                )
            )
        warm = table.filter(pl.col("warmup")) if table["warmup"].any() else table.clear()  # a filter is a query
        if warm.height:
            rest_median = table.filter(~pl.col("warmup"))["duration_ns"].median()
            left_out = "left out of the step averages" if opts.warmup_steps == "exclude" else "kept in the averages"
            out.append(
                Caveat(
                    "warm_up",
                    f"{warm.height} warm-up step(s) at the start ({', '.join(f'#{s}' for s in warm['step'].to_list())}) "
                    f"took up to {warm['duration_ns'].max() / rest_median:.1f}× the median of the others ({left_out}): "
                    "allocator, cuDNN autotuning, compilation; raise `warmup` in the profiler schedule",
                    {
                        "steps": warm["step"].to_list(),
                        "duration_us": warm.select(us_expr("duration_ns", 0))["duration_us"].to_list(),
                        "median_others_us": duration_us(rest_median),
                    },
                )
            )
    # Data loading outside every step window: time the loop spent that no step accounts for.
    ranges, outside_ns = _data_loading_outside_steps(trace, data_pattern)
    if ranges:
        out.append(
            Caveat(
                "data_loading_outside_steps",
                f"{ranges} data-loading range(s) ({duration_us(outside_ns):,.0f} µs) lie outside "
                "every ProfilerStep: call prof.step() after fetching the batch so loading counts in a step",
                {"ranges": ranges, "duration_us": duration_us(outside_ns)},
            )
        )
    return out


def step_caveats(trace: Trace, options: Options | StepOptions | None = None) -> tuple[Caveat, ...]:
    """The capture caveats of `analyse_steps` (the same ones: they read the steps' durations only),
    without the GPU busy time of each step, for what needs the caveats alone (the health checks)."""
    bundle = Options.of(options)
    return tuple(_caveats(trace, _durations(trace, bundle.steps), bundle.steps, bundle.patterns.data_loading_pattern))


def analyse_steps(trace: Trace, options: Options | StepOptions | None = None, source: str = "profiler") -> StepsResult:
    """The steps: durations, GPU busy share, outliers, warm-up, kinds, capture caveats;
    `source` says how the trace's steps were found (see analyses.step_detection)."""
    bundle = Options.of(options)
    opts = bundle.steps
    table = _step_table(trace, opts)
    counted = table.filter(~pl.col("warmup")) if opts.warmup_steps == "exclude" else table
    median = counted["duration_ns"].median() if counted.height else None
    mean = counted["duration_ns"].mean() if counted.height else None
    caveats = tuple(_caveats(trace, table, opts, bundle.patterns.data_loading_pattern))
    by_kind = (
        counted.filter(pl.col("kind").is_not_null())
        .group_by("kind")
        .agg(steps=pl.len(), mean_ns=pl.col("duration_ns").mean(), median_ns=pl.col("duration_ns").median())
        .sort("kind")
    )
    return StepsResult(
        opts, table, median, mean, caveats, windows.window_kind(trace), source, by_kind, trace.meta.origin_ns
    )
