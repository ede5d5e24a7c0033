"""Compare two traces of the same program: before and after one change.

Everything is put per step so that traces with different step counts compare: a step is the
GPU-extended ProfilerStep range (`Trace.steps`); a trace without ProfilerStep counts as one
step spanning its GPU work (its whole span when there is none). Ops and kernels are matched by
name, so traces from different GPUs or schema versions compare.

Noise: the spread of a trace's step times is their median absolute deviation scaled by 1.4826
(a robust standard deviation). A change in median step time is real only when it exceeds the
larger of the two spreads and `min_change_pct` of the before median; otherwise it is "within
noise".
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.op_tree import self_time
from traceanalyzer.causes import CAUSES
from traceanalyzer.options import DiffOptions, Options
from traceanalyzer.patterns import PROFILER_STEP
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace
from traceanalyzer.units import duration_us, us_expr, us_name

MAD_TO_SD = 1.4826


def _us(ns: float | None) -> float | None:
    """A duration in ns (or None) in µs, through the display helper."""
    return None if ns is None else duration_us(ns)


@dataclass(frozen=True)
class TraceProfile:
    """One trace reduced to per-step numbers.

    Step times and the op and kernel totals are int64 ns over all the steps (`*_ns`); `ops`,
    `kernels` and `step_times_us` are their µs-per-step display views. `metrics` holds the
    per-step figures the diff prints, already in their display units (µs, %, counts)."""

    path: str
    step_count: int
    steps_kind: str  # "steps" or "span" (no ProfilerStep: the whole trace counts as one step)
    step_times_ns: tuple[int, ...]
    metrics: dict[str, float | None]  # metric name -> value (per step unless said otherwise)
    ops_ns: pl.DataFrame  # name, count, self_ns: over all the steps
    kernels_ns: pl.DataFrame  # name, count, duration_ns: over all the steps
    findings: tuple[str, ...]
    per_step: int = 1  # the number of steps the totals are divided by (`windows.step_count`)

    @property
    def step_times_us(self) -> tuple[float, ...]:
        """The step times in µs."""
        return tuple(duration_us(t) for t in self.step_times_ns)

    @property
    def ops(self) -> pl.DataFrame:
        """name, count_per_step, self_us_per_step."""
        return self._per_step(self.ops_ns, "self_ns")

    @property
    def kernels(self) -> pl.DataFrame:
        """name, count_per_step, us_per_step."""
        return self._per_step(self.kernels_ns, "duration_ns")

    def _per_step(self, totals: pl.DataFrame, time: str) -> pl.DataFrame:
        out = "self_us_per_step" if time == "self_ns" else "us_per_step"
        return totals.select(
            "name",
            count_per_step=pl.col("count") / self.per_step,
            **{out: us_expr(time, 0) / self.per_step},
        )


@dataclass(frozen=True)
class DiffResult:
    """Two traces compared per step: the verdict, the metrics side by side, ops and kernels matched."""

    before: TraceProfile
    after: TraceProfile
    options: DiffOptions
    median_before_ns: float | None  # a median of integer ns: a float of ns (x.5 for an even count)
    median_after_ns: float | None
    change_pct: float | None  # growth of the median step time, percent (negative = faster)
    noise_ns: float
    verdict: str  # faster | slower | within noise | not comparable
    summary: pl.DataFrame  # metric, before, after, delta, change_pct
    ops: pl.DataFrame  # name, before/after per step, delta_us
    kernels: pl.DataFrame
    kernels_appeared: pl.DataFrame
    kernels_vanished: pl.DataFrame
    findings_appeared: tuple[str, ...]
    findings_resolved: tuple[str, ...]
    stages_source: str  # always "stages" (the analysis stage times come from); kept in the JSON output

    @property
    def median_before_us(self) -> float | None:
        """The median step time before, µs."""
        return _us(self.median_before_ns)

    @property
    def median_after_us(self) -> float | None:
        """The median step time after, µs."""
        return _us(self.median_after_ns)

    @property
    def noise_us(self) -> float:
        """The step-to-step spread the verdict allows, µs."""
        return duration_us(self.noise_ns)


def _clip(df: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """Rows of df (ts_ns, end_ns) intersected with the windows, clipped to them."""
    if df.is_empty():
        return df.with_columns(step=pl.lit(None, pl.Int64))
    w = wins.rename({"start_ns": "_ws", "end_ns": "_we"})
    return (
        df.join_where(w, pl.col("ts_ns") < pl.col("_we"), pl.col("end_ns") > pl.col("_ws"))
        .with_columns(ts_ns=pl.max_horizontal("ts_ns", "_ws"), end_ns=pl.min_horizontal("end_ns", "_we"))
        .drop("_ws", "_we")
    )


def _starting_in(df: pl.DataFrame, wins: pl.DataFrame) -> pl.DataFrame:
    """Rows of df whose start falls inside a window (counted once)."""
    if df.is_empty():
        return df
    w = wins.rename({"start_ns": "_ws", "end_ns": "_we"})
    return df.join_where(w, pl.col("ts_ns") >= pl.col("_ws"), pl.col("ts_ns") < pl.col("_we")).drop("_ws", "_we")


def _op_table(trace: Trace, wins: pl.DataFrame) -> pl.DataFrame:
    """name, count, self_ns: self CPU time of ops by name over the steps (ProfilerStep ranges
    left out; an op counts in the step it starts in)."""
    ops = trace.ops
    if ops.is_empty():
        return pl.DataFrame(schema={"name": pl.String, "count": pl.UInt32, "self_ns": pl.Int64})
    ops = ops.join(self_time(ops).rename({"self_ns": "_self"}), on="op_id", how="left")
    ops = _starting_in(ops.filter(~pl.col("name").str.contains(PROFILER_STEP)), wins)
    return ops.group_by("name").agg(count=pl.len(), self_ns=pl.col("_self").sum())


def _kernel_table(trace: Trace, wins: pl.DataFrame) -> pl.DataFrame:
    """name, count, duration_ns: kernel time by name, clipped to the steps."""
    k = _clip(trace.gpu.filter(pl.col("kind") == "kernel").select("name", "ts_ns", "end_ns"), wins)
    if k.is_empty():
        return pl.DataFrame(schema={"name": pl.String, "count": pl.UInt32, "duration_ns": pl.Int64})
    return k.group_by("name").agg(count=pl.len(), duration_ns=(pl.col("end_ns") - pl.col("ts_ns")).sum())


def _copies(per: pl.DataFrame, n: int) -> dict[str, float]:
    """Copies per step, from the `copies` analysis' totals per step."""
    out = {
        "copies_per_step": float(per["copies"].sum()) / n if per.height else 0.0,
        "copy_mb_per_step": float(per["bytes"].fill_null(0).sum()) / 2**20 / n if per.height else 0.0,
    }
    # per_step has no columns at all when the trace has no copy; times summed as integer ns.
    for col in ("exposed_ns", "blocked_ns"):
        if col in per.columns:
            out[f"copy_{us_name(col)}_per_step"] = duration_us(per[col].fill_null(0).sum()) / n if per.height else 0.0
    return out


def _syncs(per: pl.DataFrame, n: int) -> dict[str, float]:
    """Syncs per step, from the `syncs` analysis' totals per step."""
    out = {"syncs_per_step": float(per["syncs"].sum()) / n if per.height else 0.0}
    # per_step has no columns at all without syncs; times summed as integer ns.
    for col in ("blocked_ns", "bubble_ns"):
        if col in per.columns:
            out[f"sync_{us_name(col)}_per_step"] = duration_us(per[col].fill_null(0).sum()) / n if per.height else 0.0
    return out


def profile(trace: Trace | Session, options: Options | DiffOptions | None = None) -> TraceProfile:
    """One trace reduced to per-step numbers, all read from one Session (the findings read the
    same gaps, stages, copies and syncs as the metrics)."""
    ses = trace if isinstance(trace, Session) else Session(trace, options)
    trace = ses.trace
    wins = windows.step_windows(trace)
    n = windows.step_count(trace)
    times = tuple((wins["end_ns"] - wins["start_ns"]).to_list())
    gaps = ses.gaps
    metrics: dict[str, float | None] = {}
    if gaps.has_gpu_work:
        metrics["gpu_busy_pct"] = 100.0 * gaps.busy_share if gaps.busy_share is not None else None
        metrics["idle_us_per_step"] = duration_us(int(gaps.devices_ns["idle_ns"].sum())) / n
        for c in CAUSES:
            metrics[f"idle_{c}_us_per_step"] = gaps.idle_us(c) / n
    else:
        metrics["gpu_busy_pct"] = None
    for k, v in ses.stages.average.items():
        metrics[f"stage_{k}_us_per_step"] = v
    metrics.update(_copies(ses.copies.per_step_ns, n))
    metrics.update(_syncs(ses.syncs.per_step_ns, n))
    kernels = _kernel_table(trace, wins)
    metrics["kernels_per_step"] = float(kernels["count"].sum()) / n if kernels.height else 0.0
    metrics["kernel_us_per_step"] = duration_us(int(kernels["duration_ns"].sum())) / n if kernels.height else 0.0
    return TraceProfile(
        path=trace.path,
        step_count=trace.steps.height,
        steps_kind="steps" if trace.steps.height else "span",
        step_times_ns=times,
        metrics=metrics,
        ops_ns=_op_table(trace, wins),
        kernels_ns=kernels,
        findings=tuple(f"{f.rule}: {f.message}" for f in ses.findings),
        per_step=n,
    )


def spread(times: tuple[float, ...]) -> float:
    """Median absolute deviation of step times × 1.4826, in their unit (0 with fewer than two steps)."""
    if len(times) < 2:
        return 0.0
    s = pl.Series(times)
    return float((s - s.median()).abs().median() * MAD_TO_SD)


def _matched(before: pl.DataFrame, after: pl.DataFrame, value: str) -> pl.DataFrame:
    j = before.join(after, on="name", how="full", coalesce=True, suffix="_after").rename(
        {value: f"{value}_before", "count_per_step": "count_per_step_before"}
    )
    return (
        j.with_columns(
            pl.col(f"{value}_before").fill_null(0.0),
            pl.col(f"{value}_after").fill_null(0.0),
            pl.col("count_per_step_before").fill_null(0.0),
            pl.col("count_per_step_after").fill_null(0.0),
        )
        .with_columns(
            delta_us=pl.col(f"{value}_after") - pl.col(f"{value}_before"),
        )
        # ties by name: the same output whichever order group_by gave the rows
        .sort(pl.col("delta_us").abs(), "name", descending=[True, False])
    )


def compare(before: TraceProfile, after: TraceProfile, options: DiffOptions | None = None) -> DiffResult:
    """The per-step numbers of two profiles side by side, with a noise-aware verdict."""
    opts = options or DiffOptions()
    med_b = float(pl.Series(before.step_times_ns).median()) if before.step_times_ns else None
    med_a = float(pl.Series(after.step_times_ns).median()) if after.step_times_ns else None
    noise = max(spread(before.step_times_ns), spread(after.step_times_ns))
    if not med_b or not med_a:
        change, verdict = None, "not comparable"
    else:
        change = (med_a - med_b) / med_b * 100.0
        threshold = max(noise, med_b * opts.min_change_pct / 100.0)
        verdict = "within noise" if abs(med_a - med_b) <= threshold else ("slower" if med_a > med_b else "faster")

    rows: list[tuple[str, float | None, float | None]] = [
        ("step_count", float(len(before.step_times_ns)), float(len(after.step_times_ns))),
        ("step_median_us", _us(med_b), _us(med_a)),
        ("step_spread_us", duration_us(spread(before.step_times_ns)), duration_us(spread(after.step_times_ns))),
    ]
    keys = list(dict.fromkeys([*before.metrics, *after.metrics]))
    rows += [(k, before.metrics.get(k), after.metrics.get(k)) for k in keys]
    summary = pl.DataFrame(
        rows, schema={"metric": pl.String, "before": pl.Float64, "after": pl.Float64}, orient="row"
    ).with_columns(
        delta=pl.col("after") - pl.col("before"),
        change_pct=pl.when(pl.col("before") != 0).then(
            (pl.col("after") - pl.col("before")) / pl.col("before").abs() * 100.0
        ),
    )
    kernels = _matched(before.kernels, after.kernels, "us_per_step")
    ops = _matched(before.ops, after.ops, "self_us_per_step")
    appeared = kernels.filter(pl.col("count_per_step_before") == 0).sort(
        "us_per_step_after", "name", descending=[True, False]
    )
    vanished = kernels.filter(pl.col("count_per_step_after") == 0).sort(
        "us_per_step_before", "name", descending=[True, False]
    )
    return DiffResult(
        before=before,
        after=after,
        options=opts,
        median_before_ns=med_b,
        median_after_ns=med_a,
        change_pct=change,
        noise_ns=noise,
        verdict=verdict,
        summary=summary,
        ops=ops,
        kernels=kernels,
        kernels_appeared=appeared.select(
            "name", count_per_step="count_per_step_after", us_per_step="us_per_step_after"
        ),
        kernels_vanished=vanished.select(
            "name", count_per_step="count_per_step_before", us_per_step="us_per_step_before"
        ),
        findings_appeared=tuple(f for f in after.findings if _kind(f) not in {_kind(g) for g in before.findings}),
        findings_resolved=tuple(f for f in before.findings if _kind(f) not in {_kind(g) for g in after.findings}),
        stages_source="stages",
    )


def _kind(finding: str) -> str:
    """What makes two findings the same: the rule before the first colon."""
    return finding.split(":")[0]


def analyse_diff(
    before: Trace | Session, after: Trace | Session, options: Options | DiffOptions | None = None
) -> DiffResult:
    """Compare two traces (or Sessions) of the same program, per step."""
    bundle = Options.of(options)
    return compare(profile(before, bundle), profile(after, bundle), bundle.diff)
