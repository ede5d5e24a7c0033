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

import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.arrays import covered_between, union_sorted
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.intervals import merge_sorted
from traceanalyzer.analyses.stage_layers import (
    IV_SCHEMA,
    PIPELINE_STAGES,
    mapping_layers,
    pipeline_layers,
    tensorboard_layers,
)
from traceanalyzer.errors import UsageError
from traceanalyzer.links import int64_arrays
from traceanalyzer.options import Options, StageOptions
from traceanalyzer.reprs import Compact
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, display_us, mean_us

__all__ = [
    "PIPELINE_STAGES",
    "TENSORBOARD_STAGES",
    "StagesResult",
    "analyse_stages",
    "priority_breakdown",
    "read_mapping",
]
TENSORBOARD_STAGES = ("Kernel", "Memcpy", "Memset", "Runtime", "DataLoader", "CPU Exec", "Other")
RESERVED = {"sync_wait", "other_gpu", "other_cpu", "gpu_idle"}


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


def _covered_until(union: pl.DataFrame, before: pl.Series, x: pl.Series) -> pl.Series:
    """Time of a disjoint sorted union (`before`: the time it covers before each interval)
    from -inf to each x: the interval starting last by x, binary searched (`search_sorted`, as
    the as-of join of `intervals.covered`), counted up to x or its end."""
    s, e = union.get_column("start_ns"), union.get_column("end_ns")
    i = s.search_sorted(x.fill_null(s[0] - 1), side="right").cast(pl.Int64) - 1
    found = i >= 0
    at = i.zip_with(found, pl.Series([0], dtype=pl.Int64).new_from_index(0, i.len())).cast(pl.UInt32)
    until = before.gather(at) + x.zip_with(x < e.gather(at), e.gather(at)) - s.gather(at)
    return until.zip_with(found & x.is_not_null(), pl.Series([0], dtype=pl.Int64).new_from_index(0, x.len()))


def priority_breakdown(layers: list[tuple[str, pl.DataFrame]], wins: pl.DataFrame, remainder: str) -> pl.DataFrame:
    """Give each moment of each window to the first layer (in list order) covering it; several
    layers may share a stage name. Returns step, stage, ns (remainder = uncovered time).

    One timeline: the union of the first k layers is the union of the first k - 1 merged
    (`merge_sorted`, linear) with layer k sorted alone and swept again (`intervals.merge_sorted`),
    never re-sorted; the time it covers in each window is two binary searches in its prefix sums.
    A stage's time in a window is what its union covers there less what the one before did."""
    if (fast := _breakdown_numpy(layers, wins, remainder)) is not None:
        return fast
    start, end = wins.get_column("start_ns"), wins.get_column("end_ns")
    zero = pl.Series([0], dtype=pl.Int64).new_from_index(0, wins.height)
    union = pl.DataFrame(schema=IV_SCHEMA)
    prev, rows = zero, []
    for stage, iv in layers:
        if iv.height:
            layer = iv.select(list(IV_SCHEMA)).cast(IV_SCHEMA).sort("start_ns")
            union = merge_sorted(union.merge_sorted(layer, "start_ns") if union.height else layer, [])
        cov = zero
        if union.height:
            length = union.get_column("end_ns") - union.get_column("start_ns")
            before = length.cum_sum() - length
            d = _covered_until(union, before, end) - _covered_until(union, before, start)
            cov = d.zip_with(d > 0, zero)  # clipped at 0, as `intervals.covered`
        rows.append(pl.DataFrame({"step": wins.get_column("step"), "stage": stage, "ns": cov - prev}))
        prev = cov
    rest = wins.select("step", stage=pl.lit(remainder), ns=pl.col("end_ns") - pl.col("start_ns") - prev)
    rows.append(rest)
    return pl.concat(rows).group_by("step", "stage", maintain_order=True).agg(pl.col("ns").sum())


def _breakdown_numpy(layers: list[tuple[str, pl.DataFrame]], wins: pl.DataFrame, remainder: str) -> pl.DataFrame | None:
    """`priority_breakdown` on numpy arrays, where numpy is imported: the same unions and binary
    searches, each a call on an array where each Series call was a query (~300 a DLRM rank's
    stages). The union grows by a merge of two sorted arrays (a search for where the layer's rows
    go), then one sweep. None (the Series version) where a time or step is null or not an
    integer, an interval ends before it starts, or a step repeats (the group-by sums such rows)."""
    np = sys.modules.get("numpy")
    cols = int64_arrays([wins.get_column("start_ns"), wins.get_column("end_ns")]) if np is not None else None
    if cols is None or wins.is_empty():
        return None
    step = wins.get_column("step")
    if wins.height > 1 and ((k := int64_arrays([step])) is None or np.unique(k[0]).size < wins.height):
        return None
    start, end = cols
    us, ue = np.empty(0, np.int64), np.empty(0, np.int64)
    prev = np.zeros(wins.height, np.int64)
    by_stage: dict[str, np.ndarray] = {}
    for stage, iv in layers:
        if iv.height:
            if (a := int64_arrays([iv.get_column("start_ns"), iv.get_column("end_ns")])) is None or (a[1] < a[0]).any():
                return None
            order = np.argsort(a[0], kind="stable")
            us, ue = union_sorted(us, ue, a[0][order], a[1][order])
        cov = covered_between(us, ue, start, end) if us.size else prev * 0
        by_stage[stage] = by_stage.get(stage, 0) + (cov - prev)
        prev = cov
    by_stage[remainder] = by_stage.get(remainder, 0) + (end - start - prev)
    n = len(by_stage)
    return pl.DataFrame(
        [
            pl.concat([step] * n),
            pl.Series("stage", [s for s in by_stage for _ in range(wins.height)], pl.String),
            pl.Series("ns", np.concatenate(list(by_stage.values())), pl.Int64),
        ]
    )


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
        layers, remainder, view_name = tensorboard_layers(trace), "Other", "tensorboard"
        stages = TENSORBOARD_STAGES
    elif view != "pipeline":
        raise UsageError(None, f"unknown view {view!r}: use pipeline or tensorboard")
    elif mapping:
        layers, remainder, view_name = mapping_layers(trace, mapping, blocked), "gpu_idle", "mapping"
        stages = tuple(n for n, _ in mapping) + ("sync_wait", "other_gpu", "other_cpu", "gpu_idle")
    else:
        layers, remainder, view_name = pipeline_layers(trace, bundle.patterns, blocked), "gpu_idle", "pipeline"
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
