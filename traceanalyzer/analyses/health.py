"""Trace health, checked before any number: damage that makes a number wrong without an error.

Each check returns a `HealthCheck` when it fires: `severity` is `error` (the numbers it names
are wrong: a verdict over them would mislead), `warning` (they are approximate) or `info`;
`unreliable` names the metrics it spoils (`busy_share`, `gap_causes`, `kernel_time`, `steps`).
Checks:

- `missing_gpu_events`: launch calls (kernels, graph launches) whose correlation reaches no GPU
  activity, over `missing_gpu_share` of launches (all of them: an error: the GPU side was not
  recorded, so "idle" is an artefact);
- `clock_skew`: GPU activity that starts before its own launch call by more than `clock_skew_us`
  (only skew explains it: the clocks disagree);
- `queue_drain` (info): GPU activity starting after the CPU's last event, or ending before its
  first, by more than `clock_skew_us`, with none before its own launch: the CPU recording
  stopped first (or began late); nothing is spoilt;
- `stream_overlap`: kernels overlapping on one stream (programmatic dependent launch on
  Hopper/Blackwell): sums of kernel time count the overlap twice; the busy union is unaffected;
- `unlinked_gpu_work`: GPU work whose correlation links to no runtime call (id 0 on AMD, lost
  launches), other than work queued before the trace began, over `unlinked_gpu_share`;
- `overflowing_durations`: activities lasting longer than the whole CPU span (ROCm durations
  that overflow, uninitialised end times);
- `truncated`: the loader salvaged a damaged or cut file (its warnings);
- `sampled`: a down-sampled trace: CPU op external ids and GPU correlation ids far sparser than
  a complete capture's, with no event-record or stream-wait calls to explain waits;
- `crossing_cpu_events` (info): CPU events (ops, Python frames, runtime calls) that start inside
  an earlier event on their thread and end after it, a writer's mistake: kept as they are, and
  nothing is spoilt (busy time is taken from unions);
- `few_steps`, `warm_up`: from the steps analysis.

Evidence is what the outputs print: its durations (`max_lead_us`, `cpu_span_us`, `longest_us`)
are the trace's integer ns shown in µs by `units.duration_us`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses.crossing import crossing_events
from traceanalyzer.analyses.intervals import reach, series_of
from traceanalyzer.analyses.steps import Caveat
from traceanalyzer.options import HealthOptions, Options
from traceanalyzer.patterns import GRAPH_LAUNCH, LAUNCH_API
from traceanalyzer.trace import Trace
from traceanalyzer.units import duration_us
from traceanalyzer.wording import plural

KERNEL_LAUNCH = r"Launch(Kernel|CooperativeKernel)|LaunchKernelEx|^cuLaunchKernel|^hipExtLaunch|" + GRAPH_LAUNCH
EVENT_WAIT_API = r"EventRecord|StreamWaitEvent"
SEVERITIES = ("error", "warning", "info")


def worst_first(checks: pl.DataFrame, *then: str) -> pl.DataFrame:
    """Health-check rows (a `severity` column) errors first, then warnings, then info; ties by
    the columns `then` names."""
    if not checks.height:
        return checks
    order = pl.col("severity").replace_strict(SEVERITIES, list(range(len(SEVERITIES))))
    return checks.with_columns(_s=order).sort("_s", *then).drop("_s")


@dataclass(frozen=True)
class HealthCheck:
    """One problem found in a trace, and the metrics it makes unreliable."""

    check: str
    severity: str  # error | warning | info
    message: str
    evidence: dict
    unreliable: tuple[str, ...] = ()

    def line(self, strong: str = "") -> str:
        """The check in one line, `[severity] check: message (unreliable: ...)`: the one wording
        of every output; `strong` wraps the head (`**` in Markdown)."""
        tail = f" (unreliable: {', '.join(self.unreliable)})" if self.unreliable else ""
        return f"{strong}[{self.severity}] {self.check}{strong}: {self.message}{tail}"


def _missing_gpu_events(trace: Trace, o: HealthOptions) -> HealthCheck | None:
    # the three counts in one query (a filter, the GPU's distinct correlations, an anti join and
    # a filter of what it left were four, ~0.3 ms a small rank); a launch's correlation is
    # never null, so a null among the GPU's matches nothing, as in the join
    corr = pl.col("correlation")
    (seen,) = series_of(trace.gpu, ["correlation"])
    missing = ~corr.is_in(pl.lit(seen).implode())
    launches, n_missing, graphs = chain.collect(
        trace.runtime.lazy()
        .filter(pl.col("name").str.contains(KERNEL_LAUNCH) & corr.is_not_null())
        .select(n=pl.len(), missing=missing.sum(), graphs=(missing & pl.col("name").str.contains(GRAPH_LAUNCH)).sum())
    ).row(0)
    if not launches:
        return None
    share = n_missing / launches
    if share < o.missing_gpu_share:
        return None
    error = trace.gpu.is_empty() or share >= 0.5
    return HealthCheck(
        "missing_gpu_events",
        "error" if error else "warning",
        f"{n_missing:,} of {launches:,} launch calls ({share:.0%}) have no GPU activity in the trace"
        + (f" ({graphs:,} of them graph launches with no kernels)" if graphs else "")
        + ": the GPU side was not fully recorded, so GPU idle time is overstated",
        {"launches": launches, "without_gpu_activity": n_missing, "graph_launches_without_kernels": graphs},
        ("busy_share", "gap_causes"),
    )


def _clock_skew(trace: Trace, o: HealthOptions) -> HealthCheck | None:
    """Only what skew explains: GPU work that starts before its own launch call (the correlation
    link, the trace's ac2g flow, runs backwards). GPU work after the CPU's last event is the queue
    draining after the profiler stopped recording the CPU (or work queued before it began): an info
    line, never an error."""
    tol = int(o.clock_skew_us * 1000)
    # Series compared and counted (no query; three filters were three): a comparison with a null
    # (no launch) is null, which neither `sum` nor `filter` counts
    ts, end, launch = series_of(trace.gpu, ["ts_ns", "end_ns", "launch_ts_ns"])
    early = ts < launch - tol
    n_early = int(early.sum())
    cpu = [t for t in (trace.ops, trace.runtime) if t.height]
    after = before = 0
    if cpu and trace.gpu.height:
        lo = min(t["ts_ns"].min() for t in cpu)
        hi = max(t["end_ns"].max() for t in cpu)
        after = int((ts > hi + tol).sum())
        before = int((end < lo - tol).sum())
    evidence = {
        "before_launch": n_early,
        "after_cpu_end": after,
        "before_cpu_start": before,
        "gpu_activities": trace.gpu.height,
    }
    if n_early:
        lead = int((launch - ts).filter(early).max())
        return HealthCheck(
            "clock_skew",
            "error",
            f"{n_early:,} GPU activities start over {o.clock_skew_us:,.0f} µs before their own launch call (up to "
            f"{lead / 1e6:,.1f} ms): the GPU and CPU clocks disagree",
            evidence | {"max_lead_us": duration_us(lead)},
            ("busy_share", "gap_causes", "steps"),
        )
    if not after and not before:
        return None
    said = []
    if after:
        said.append(
            f"{after:,} GPU activities start after the CPU's last event (the queue draining: the profiler "
            "stopped recording the CPU first)"
        )
    if before:
        said.append(f"{before:,} end before the CPU's first event (queued before the CPU recording began)")
    return HealthCheck(
        "queue_drain", "info", "; ".join(said) + "; no activity starts before its own launch", evidence, ()
    )


def _stream_overlap(trace: Trace, o: HealthOptions) -> HealthCheck | None:
    kernels, over = chain.collect(  # one query for both counts, run as the eager calls were
        trace.gpu.lazy()
        .filter(pl.col("kind") == "kernel")
        .select("device", "stream", "ts_ns", "end_ns")
        .sort("device", "stream", "ts_ns")
        .with_columns(_reach=reach("end_ns", ["device", "stream"]))
        .select(n=pl.len(), over=(pl.col("ts_ns") < pl.col("_reach")).sum())
    ).row(0)
    if not kernels:
        return None
    share = over / kernels
    if share < o.stream_overlap_share:
        return None
    return HealthCheck(
        "stream_overlap",
        "warning",
        f"{over:,} of {kernels:,} kernels ({share:.0%}) start before the previous kernel on their stream ends "
        "(programmatic dependent launch): sums of kernel time count the overlap twice; GPU busy time does not",
        {"overlapping_kernels": over, "kernels": kernels},
        ("kernel_time",),
    )


def _unlinked(trace: Trace, o: HealthOptions) -> HealthCheck | None:
    if trace.gpu.is_empty():
        return None
    first = trace.runtime["correlation"].min() if trace.runtime.height else None  # nulls left out
    # The correlations of the activities without a launch call (one query: `is_null`), counted
    # by Series calls (a `drop_nulls` and two filters were three more).
    runtime_id, correlation = series_of(trace.gpu, ["runtime_id", "correlation"])
    corr = correlation.filter(runtime_id.is_null())
    # Queued before the trace began (an id below every traced call's) is not lost; id 0 is (a
    # null correlation compares null: not counted as queued before).
    queued = int(((corr > 0) & (corr < first)).sum()) if first is not None else 0
    unlinked = corr.len() - queued
    share = unlinked / trace.gpu.height
    if share < o.unlinked_gpu_share:
        return None
    zero = int((corr == 0).sum()) + corr.null_count()
    return HealthCheck(
        "unlinked_gpu_work",
        "warning",
        f"{unlinked:,} of {trace.gpu.height:,} GPU activities ({share:.0%}) link to no launch call"
        + (f" ({zero:,} with correlation id 0)" if zero else "")
        + ": their gaps cannot be traced to a CPU thread, and ops get no GPU time for them",
        {"unlinked": unlinked, "gpu_activities": trace.gpu.height, "correlation_zero": zero},
        ("gap_causes", "op_gpu_time"),
    )


def _overflowing(trace: Trace) -> HealthCheck | None:
    clipped = [w for w in trace.warnings if w.startswith("clipped") and "runs past the end" in w]
    if clipped:
        # The loader already cut them at the trace's end: the numbers near that end are approximate.
        return HealthCheck(
            "overflowing_durations",
            "warning",
            clipped[0] + ": durations that overflowed or were never closed, cut at the end of the trace",
            {"warnings": clipped},
            ("busy_share", "kernel_time"),
        )
    cpu = [t for t in (trace.ops, trace.runtime) if t.height]
    if not cpu or trace.gpu.is_empty():
        return None
    span = max(t["end_ns"].max() for t in cpu) - min(t["ts_ns"].min() for t in cpu)
    (dur,) = series_of(trace.gpu, ["dur_ns"])
    long = dur.filter(dur > max(span, 1))  # a Series filter: no query
    if long.is_empty():
        return None
    return HealthCheck(
        "overflowing_durations",
        "error",
        f"{long.len():,} GPU activities last longer than the whole CPU span ({span / 1e6:,.1f} ms): durations that "
        "overflowed or were never closed",
        {"activities": long.len(), "cpu_span_us": duration_us(span), "longest_us": duration_us(long.max())},
        ("busy_share", "gap_causes", "kernel_time"),
    )


def _truncated(trace: Trace) -> HealthCheck | None:
    hits = [w for w in trace.warnings if "truncated" in w or "damaged" in w or "could not be read" in w]
    if not hits:
        return None
    if trace.gpu_cut_off:  # not a CPU-only trace: its GPU events, if any, were in the part cut off
        launches = trace.runtime.filter(pl.col("name").str.contains(LAUNCH_API)).height if trace.runtime.height else 0
        return HealthCheck(
            "truncated",
            "error",
            f"the file is cut short before any GPU event was read: {trace.ops.height:,} CPU ops, "
            f"{trace.runtime.height:,} runtime calls ({launches:,} kernel launches) and {trace.steps.height:,} steps "
            "were read, no kernel, memcpy or memset; GPU time cannot be told (" + hits[0] + ")",
            {"warnings": hits, "ops": trace.ops.height, "runtime_calls": trace.runtime.height, "launches": launches},
            ("steps", "busy_share", "gap_causes", "kernel_time"),
        )
    return HealthCheck(
        "truncated",
        "warning",
        "the file is damaged or cut short and was read up to where it breaks: " + hits[0],
        {"warnings": hits},
        ("steps",),
    )


def _distinct(s: pl.Series) -> tuple[int, int | None, int | None]:
    """(distinct values but null, min, max) of `s` by Series calls (`drop_nulls` and `unique`
    were a query each)."""
    return s.n_unique() - (1 if s.null_count() else 0), s.min(), s.max()


def _sampled(trace: Trace, o: HealthOptions) -> HealthCheck | None:
    ext_n, ext_min, ext_max = (
        _distinct(series_of(trace.ops, ["external_id"])[0]) if "external_id" in trace.ops.columns else (0, None, None)
    )
    corr_n, corr_min, corr_max = _distinct(series_of(trace.gpu, ["correlation"])[0])
    if ext_n < o.sampled_min_events or corr_n < 2:
        return None
    ext_density = ext_n / (ext_max - ext_min + 1)
    corr_density = corr_n / (corr_max - corr_min + 1)
    waits = trace.runtime.filter(pl.col("name").str.contains(EVENT_WAIT_API)).height
    if ext_density >= o.sampled_density or waits:
        return None
    return HealthCheck(
        "sampled",
        "error",
        f"the trace looks down-sampled: {ext_n:,} CPU ops whose external ids span {ext_max - ext_min + 1:,} "
        f"and {corr_n:,} GPU correlation ids spanning {corr_max - corr_min + 1:,}, with no event-record or "
        "stream-wait calls: idle gaps and their causes are artefacts of the events left out",
        {"external_id_density": ext_density, "correlation_density": corr_density, "ops": trace.ops.height},
        ("busy_share", "gap_causes"),
    )


def _crossing(trace: Trace) -> HealthCheck | None:
    """CPU events that cross on their thread (a writer's mistake): an info line, spoiling nothing."""
    counts = {
        name: crossing_events(t)
        for name, t in (("ops", trace.ops), ("python_frames", trace.python), ("runtime_calls", trace.runtime))
    }
    n = sum(counts.values())
    if not n:
        return None
    return HealthCheck(
        "crossing_cpu_events",
        "info",
        f"{plural(n, 'CPU event')} {'overlaps' if n == 1 else 'overlap'} an earlier event on their thread without "
        "nesting inside it; kept as they are (busy time is taken from unions, so nothing counts twice)",
        {"crossing_events": n, **counts},
        (),
    )


def _from_steps(caveats: Sequence[Caveat]) -> list[HealthCheck]:
    out = []
    for c in caveats:
        if c.kind == "too_few_steps":
            out.append(HealthCheck("few_steps", "info", c.message, c.evidence, ("steps",)))
        elif c.kind in ("first_step_warmup", "warm_up"):
            out.append(HealthCheck("warm_up", "info", c.message, c.evidence, ()))
    return out


def analyse_health(
    trace: Trace, options: Options | HealthOptions | None = None, caveats: Sequence[Caveat] = ()
) -> list[HealthCheck]:
    """Every health check that fires, errors first; the steps' `caveats` (`StepsResult.caveats`,
    or `steps.step_caveats`) add few_steps and warm_up."""
    o = Options.of(options).health
    found = [
        _missing_gpu_events(trace, o),
        _clock_skew(trace, o),
        _overflowing(trace),
        _sampled(trace, o),
        _unlinked(trace, o),
        _stream_overlap(trace, o),
        _truncated(trace),
        _crossing(trace),
    ]
    out = [h for h in found if h is not None] + _from_steps(caveats)
    return sorted(out, key=lambda h: SEVERITIES.index(h.severity))


def unreliable(checks: list[HealthCheck], *metrics: str, severity: tuple[str, ...] = ("error",)) -> list[HealthCheck]:
    """The checks of the given severities that spoil any of `metrics`."""
    return [h for h in checks if h.severity in severity and set(h.unreliable) & set(metrics)]
