"""Steps, whatever the trace: the iterations every per-step number is counted over.

`--steps` (StepOptions.steps) says where steps come from:

- `profiler`: the `ProfilerStep#N` ranges `prof.step()` writes;
- `range:REGEX`: the outermost ops or record_function ranges whose name matches REGEX;
- `python:REGEX`: the outermost Python frames (with_stack) whose name matches REGEX;
- `none`: the trace is one step;
- `auto` (default): ProfilerStep when present; else the outermost record_function range, else
  Python frame (a model's top `nn.Module`, or a function named like a step: `STEP_FUNCTION`), that
  repeats at least `MIN_REPEATS` times without overlapping itself with a
  steady cadence (the spread of the intervals between starts at most their mean) and
  encloses more than half of the GPU launches (optimizer and data-loading ranges are phases of
  an iteration, never one) (vLLM/SGLang `execute_*` ranges, a model's top
  `forward`), names compared with their numbers blanked (`execute_context_0(0)_generation_4(4)`
  and `..._generation_3(3)` are one range); else, for training without `prof.step()`, the
  cycles between the ends of successive optimizer steps (one boundary per iteration: with both
  zero_grad and step recorded, the step marks it); else one step.

Whatever found them, the ranges are extended to the GPU side by `trace.extend_steps`, the one
definition of a step. `kind` labels LLM serving steps `prefill`, `decode` or `mixed` when the
range's name tells (`prefill` / `decode`, or vLLM's `context_N` and `generation_M` counts).
"""

from __future__ import annotations

import dataclasses

import polars as pl

from traceanalyzer.analyses.intervals import reach
from traceanalyzer.options import Options
from traceanalyzer.patterns import NN_MODULE, STEP_FUNCTION, ZERO_GRAD
from traceanalyzer.trace import Trace, extend_steps

MIN_REPEATS = 3
MIN_LAUNCH_SHARE = 0.5
RANGE_SCHEMA = {
    "step": pl.Int64,
    "name": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "cpu_start_ns": pl.Int64,
    "cpu_end_ns": pl.Int64,
    "op_id": pl.Int64,
}
_VLLM = r"context_(\d+)\(\d+\)_generation_(\d+)"


def _outermost(df: pl.DataFrame) -> pl.DataFrame:
    """Occurrences not nested inside an earlier one of the same set (same thread)."""
    df = df.sort("pid", "tid", "ts_ns", pl.col("end_ns"), descending=[False, False, False, True])
    furthest = reach("end_ns", ["pid", "tid"])
    return df.filter(furthest.is_null() | (pl.col("ts_ns") >= furthest))


def _ranges(df: pl.DataFrame, id_col: str | None) -> pl.DataFrame:
    """Step ranges (RANGE_SCHEMA) from events (name, pid, tid, ts_ns, end_ns), in time order."""
    out = (
        df.sort("ts_ns")
        .with_row_index("step")
        .select(
            pl.col("step").cast(pl.Int64),
            "name",
            "pid",
            "tid",
            cpu_start_ns="ts_ns",
            cpu_end_ns="end_ns",
            op_id=pl.col(id_col) if id_col else pl.lit(None, pl.Int64),
        )
    )
    return out.cast(RANGE_SCHEMA)


def _launch_share(trace: Trace, occ: pl.DataFrame) -> float:
    """Share of GPU launches whose call started inside one of `occ`'s occurrences."""
    launches = trace.gpu.filter(pl.col("launch_ts_ns").is_not_null()).select("launch_ts_ns").sort("launch_ts_ns")
    if launches.is_empty() or occ.is_empty():
        return 0.0
    j = launches.join_asof(
        occ.select(_s="ts_ns", _e="end_ns").sort("_s"), left_on="launch_ts_ns", right_on="_s", strategy="backward"
    )
    return j.filter(pl.col("launch_ts_ns") < pl.col("_e")).height / launches.height


def _steady(occ: pl.DataFrame) -> bool:
    starts = occ.sort("ts_ns")["ts_ns"]
    gaps = starts.diff().drop_nulls()
    return bool(gaps.len()) and gaps.mean() > 0 and (gaps.std() or 0.0) <= gaps.mean()


def _best_repeating(trace: Trace, events: pl.DataFrame, key: pl.Expr) -> tuple[str, pl.DataFrame] | None:
    """The outermost group of `events` (by `key`) that repeats steadily and encloses most GPU
    launches: (its name, its occurrences)."""
    if events.is_empty():
        return None
    groups = events.with_columns(_key=key).group_by("_key").agg(pl.len().alias("n")).filter(pl.col("n") >= MIN_REPEATS)
    best = None
    for key_value, n in groups.sort("n").iter_rows():
        occ = events.with_columns(_key=key).filter(pl.col("_key") == key_value)
        if _outermost(occ).height != occ.height or not _steady(occ):
            continue  # nested in itself (recursion) or irregular
        share = _launch_share(trace, occ)
        if share <= MIN_LAUNCH_SHARE:
            continue
        # The outermost qualifying group: the most launches enclosed, then the fewest repeats.
        rank = (round(share, 2), -n)
        if best is None or rank > best[0]:
            best = (rank, key_value, occ)
    return (best[1], best[2]) if best else None


def _python_candidates(trace: Trace) -> pl.DataFrame:
    """Python frames that can be an iteration: a model's top module (an `nn.Module:` frame in no
    other), or a function named like an engine's or a training loop's step. A frame inside the
    model (a layer's `forward` called 36 times in one pass) repeats too, but is not a step."""
    py = trace.python
    if py.is_empty():
        return py
    modules = py.filter(pl.col("name").str.contains(NN_MODULE))
    top_modules = _outermost(modules) if modules.height else modules
    named = py.filter(pl.col("name").str.contains(STEP_FUNCTION))
    return pl.concat([top_modules, named.join(top_modules.select("frame_id"), on="frame_id", how="anti")])


def _cycles(trace: Trace, pattern: str) -> pl.DataFrame | None:
    """Steps between the ends of successive optimizer steps (training without prof.step()).

    One boundary per iteration: an iteration that holds both `Optimizer.zero_grad#...` and
    `Optimizer.step#...` is one cycle, so only one kind of annotation marks it: the optimizer's
    step (it ends the iteration's update), else zero_grad when no step is recorded. Whether
    zero_grad launched kernels (set_to_none=False) or none (set_to_none=True) changes nothing."""
    opt = _outermost(trace.ops.filter(pl.col("name").str.contains(pattern)))
    zero = opt.filter(pl.col("name").str.contains(ZERO_GRAD))
    steps = opt.join(zero.select("op_id"), on="op_id", how="anti")
    opt = steps if steps.height >= MIN_REPEATS else zero
    if opt.height < MIN_REPEATS or not _steady(opt):
        return None
    opt = opt.sort("ts_ns")
    first = trace.gpu["launch_ts_ns"].min() if trace.gpu.height else None
    lo = min(first, opt["ts_ns"][0]) if first is not None else opt["ts_ns"][0]
    starts = opt["end_ns"].shift(1).fill_null(lo)
    return _ranges(opt.with_columns(ts_ns=starts), "op_id")


def detect_step_ranges(trace: Trace, options: Options | None = None) -> tuple[pl.DataFrame, str]:
    """(step ranges, how they were found) for the options' `steps` spec (see module docstring)."""
    opts = Options.of(options)
    spec = opts.steps.steps
    profiler = trace.steps[list(RANGE_SCHEMA)] if trace.steps.height else None  # picked by name: no query
    if spec == "none":
        return pl.DataFrame(schema=RANGE_SCHEMA), "none: one step"
    if spec == "profiler" or (spec == "auto" and profiler is not None):
        return (profiler if profiler is not None else pl.DataFrame(schema=RANGE_SCHEMA)), "profiler"
    if spec.startswith("range:"):
        hits = _outermost(trace.ops.filter(pl.col("name").str.contains(spec[6:])))
        return _ranges(hits, "op_id"), spec
    if spec.startswith("python:"):
        hits = _outermost(trace.python.filter(pl.col("name").str.contains(spec[7:])))
        return _ranges(hits, None), spec
    # A phase of an iteration (its optimizer step, its data loading) is not an iteration.
    phase = "|".join(f"(?:{p})" for p in (opts.patterns.optimizer_pattern, opts.patterns.data_loading_pattern))
    ranges = trace.ops.filter((pl.col("kind") == "user_annotation") & ~pl.col("name").str.contains(phase))
    found = _best_repeating(trace, ranges, pl.col("name").str.replace_all(r"\d+", "#"))
    if found:
        return _ranges(found[1], "op_id"), f"auto: repeating range {found[0]!r}"
    found = _best_repeating(trace, _python_candidates(trace), pl.col("name"))
    if found:
        return _ranges(found[1], None), f"auto: repeating Python frame {found[0]!r}"
    cycles = _cycles(trace, opts.patterns.optimizer_pattern)
    if cycles is not None:
        return cycles, "auto: cycles between optimizer steps"
    return pl.DataFrame(schema=RANGE_SCHEMA), "auto: none found, one step"


def step_kind(name: pl.Expr) -> pl.Expr:
    """prefill | decode | mixed when a step's name tells, else null."""
    ctx = name.str.extract(_VLLM, 1).cast(pl.Int64)
    gen = name.str.extract(_VLLM, 2).cast(pl.Int64)
    lower = name.str.to_lowercase()
    return (
        pl.when(lower.str.contains("prefill"))
        .then(pl.lit("prefill"))
        .when(lower.str.contains("decode"))
        .then(pl.lit("decode"))
        .when((ctx > 0) & (gen > 0))
        .then(pl.lit("mixed"))
        .when(ctx > 0)
        .then(pl.lit("prefill"))
        .when(gen > 0)
        .then(pl.lit("decode"))
        .otherwise(pl.lit(None, pl.String))
    )


def with_steps(trace: Trace, options: Options | None = None) -> tuple[Trace, str]:
    """The trace with its `steps` table as the options say, and how the steps were found. A
    trace whose steps are already the answer is returned as it is."""
    ranges, source = detect_step_ranges(trace, options)
    if source == "profiler":
        return trace, source
    return dataclasses.replace(trace, steps=extend_steps(ranges, trace.gpu)), source
