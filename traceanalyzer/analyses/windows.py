"""The analysis windows: the one definition of "a step" every analysis uses.

- With ProfilerStep ranges: one window per step, the GPU-extended step of `Trace.steps` (from
  the later of its start and the previous step's end to the later of its end and the end of the
  last GPU activity launched inside it, as the TensorBoard plugin defines it).
- Without: the trace counts as one step (`step` null) spanning its GPU work, from the first GPU
  activity's start to the last one's end over all devices; a trace without GPU work spans all
  its timed events.

Every device is judged over the same windows.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.trace import Trace

WINDOW_SCHEMA = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
DEVICE_WINDOW_SCHEMA = {"device": pl.Int64, **WINDOW_SCHEMA}


def window_kind(trace: Trace) -> str:
    """`steps` (ProfilerStep), `gpu_span` (no steps: the GPU work's span) or `trace_span`."""
    if trace.steps.height:
        return "steps"
    return "gpu_span" if trace.gpu.height else "trace_span"


def describe(kind: str) -> str:
    """The window kind in words, for headlines."""
    return {
        "steps": "over the profiled steps",
        "gpu_span": "over the GPU span (no ProfilerStep: the trace counts as one step)",
        "trace_span": "over the whole trace (no ProfilerStep, no GPU work)",
    }[kind]


def step_windows(trace: Trace) -> pl.DataFrame:
    """step, start_ns, end_ns: one row per step in time order (one row, step null, without
    ProfilerStep). Made once per Trace: a small rank's analyses ask ~16 times (two queries each)."""
    return trace.derived("step_windows", lambda: _step_windows(trace))


def _step_windows(trace: Trace) -> pl.DataFrame:
    if trace.steps.height:
        return trace.steps.select(list(WINDOW_SCHEMA)).sort("start_ns")
    if trace.gpu.height:
        lo, hi = trace.gpu["ts_ns"].min(), trace.gpu["end_ns"].max()
    else:
        lo, hi = trace.meta.origin_ns, trace.meta.end_ns
    return pl.DataFrame({"step": [None], "start_ns": [lo], "end_ns": [hi]}, schema=WINDOW_SCHEMA)


def step_count(trace: Trace) -> int:
    """How many steps per-step figures divide by: the ProfilerSteps, else 1."""
    return max(trace.steps.height, 1)


def devices(trace: Trace) -> list[int]:
    """The devices that did GPU work, in order."""
    # through a select: `gpu["device"]` would keep a one-valued column in full (`one_valued`)
    return list(
        trace.derived(
            "devices",
            lambda: tuple(sorted(trace.gpu.select(pl.col("device").drop_nulls().unique()).to_series().to_list())),
        )
    )


def device_windows(trace: Trace) -> pl.DataFrame:
    """device, step, start_ns, end_ns: every step window for every device with GPU work."""
    return trace.derived("device_windows", lambda: _device_windows(trace))


def _device_windows(trace: Trace) -> pl.DataFrame:
    # every device x every window, in the cross join's order, built from lists (the join, its
    # select and cast were three queries, ~0.8 ms a small rank)
    devs, wins = devices(trace), step_windows(trace)
    cols = {c: wins.get_column(c).to_list() * len(devs) for c in WINDOW_SCHEMA}
    return pl.DataFrame({"device": [d for d in devs for _ in range(wins.height)], **cols}, schema=DEVICE_WINDOW_SCHEMA)


def step_of(
    df: pl.DataFrame, steps: pl.DataFrame, at: str, start: str = "cpu_start_ns", end: str = "cpu_end_ns"
) -> pl.DataFrame:
    """Add `step`: the step of `steps` (a `Trace.steps` table) whose [start, end) holds `df[at]`
    (by default its CPU range); null outside every step or without steps.

    The step starting last at or before each time is one `search_sorted` among the sorted step
    starts (what an as-of join backward finds, ties to the last), without sorting `df`: the
    rest are Series calls (the join, its sorts and column edits were ~7 polars queries a call,
    ~25 µs each, asked a few times a DLRM rank)."""
    if steps.is_empty() or df.is_empty():
        return df.with_columns(step=pl.lit(None, pl.Int64))
    s = steps if steps.get_column(start).is_sorted() else steps.sort(start)
    starts, ends, ids = s.get_column(start), s.get_column(end), s.get_column("step")
    if starts.null_count():  # an as-of join skips a null start; no search over nulls
        s = s.filter(starts.is_not_null())
        starts, ends, ids = s.get_column(start), s.get_column(end), s.get_column("step")
    if starts.is_empty():
        return df.with_columns(step=pl.lit(None, pl.Int64))
    t = df.get_column(at)
    if t.null_count():  # a null time is in no step: searched as a time before every step
        t = t.fill_null(starts.min() - 1)
    pos = starts.search_sorted(t, side="right").cast(pl.Int64)  # the steps starting at or before t
    has = pos > 0
    j = (pos - has.cast(pl.Int64)).cast(pl.UInt32)  # the last of them (row 0 where none: masked)
    none = pl.Series([None], dtype=ids.dtype).new_from_index(0, t.len())
    step = ids[j].zip_with(has & (t < ends[j]), none).alias("step")
    return df.with_columns(step) if "step" in df.columns else df.hstack([step])
