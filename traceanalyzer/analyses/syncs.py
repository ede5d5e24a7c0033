"""Every point where the CPU waited for the GPU, and the GPU idle bubble that followed.

A sync is one runtime call that holds the CPU thread until the GPU catches up (see
`cpu_activity.blocking_calls`): cudaStreamSynchronize / cudaDeviceSynchronize /
cudaEventSynchronize and their hip and driver equivalents, a synchronous cudaMemcpy /
hipMemcpyWithStream, and a cudaMemcpyAsync that involves pageable host memory. Its `kind`:

- `implicit`: the call was issued inside a namespaced op (`aten::item`,
  `aten::_local_scalar_dense`, `aten::to` / `.cpu()`, `aten::nonzero`, ...): user code asked for a
  value and the op synchronised on its behalf. An op of those names that contains no such call
  (`.item()` on a CPU tensor) is not a sync.
- `explicit`: no op around the call (torch.cuda.synchronize(), stream / event .synchronize()).
- `gpu_wait`: cudaStreamWaitEvent / hipStreamWaitEvent, a wait on the GPU side that does not hold
  the CPU; listed apart, with no blocked time or bubble.

Per sync: `blocked_us` is the call's duration; `waited_for` the GPU activity on its device that
finished last while the call was in progress. GPU idle time is charged to a sync exactly where
`gaps` (with its default thresholds) gives a gap the cause `sync` and names that call: the
device's idle intervals (complement of all kernels, memcpys and memsets, clipped to the step
windows), judged from the thread that launched the work ending each; a gap is a sync's when that
thread sat in a blocking call as the GPU ran dry (the wait drained the queue) or spent most of the
gap blocked, unless the work was queued already or data loading filled most of the gap. Each gap is
charged to one call at most. `bubble_us` is the charged gap the call returned into (GPU idle
until the next GPU work started), so it equals that gap; `idle_while_blocked_us` sums charged
gaps that closed while the call still held the CPU (a pageable copy staged in chunks leaves such
gaps). A sync's bubble plus idle while blocked, summed over all syncs, is the `sync` idle time of
`gaps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses import sync_calls, windows
from traceanalyzer.analyses.attribution import op_context, python_line_at
from traceanalyzer.analyses.cpu_activity import blocking_calls

# The gap pieces, their classification and the sync a gap is blamed on come from gaps itself, so
# that a sync's bubble is by construction the gap `gaps` blames on it.
from traceanalyzer.analyses.gap_causes import ClassifiedGaps, classify_gaps
from traceanalyzer.keys import grouped
from traceanalyzer.options import Options, SyncOptions
from traceanalyzer.patterns import GPU_WAIT_API, NAMESPACED_OP
from traceanalyzer.reprs import Compact, Unread
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown, duration_us

GPU_WAIT = "gpu_wait"  # the kind of a GPU-side wait: it holds no CPU thread
IS_STALL = pl.col("kind") != GPU_WAIT  # a sync that held the CPU: the one definition of a stall

SYNC_COLUMNS = [
    "sync_id",
    "kind",
    "api",
    "start_ns",
    "blocked_ns",
    "bubble_ns",
    "idle_while_blocked_ns",
    "waited_for",
    "waited_for_stream",
    "op",
    "range",
    "python_frame",
    "op_chain",
    "step",
    "tid",
    "device",
]


@dataclass(frozen=True, repr=False)
class SyncsResult(Compact):
    """Every sync of a trace, its bubble and its site, with the totals that other outputs quote.

    The tables hold int64 ns (`*_ns`, sums as integers); `syncs`, `summary`, `by_api` and
    `per_step` are their µs display views (`units.display_us`), the totals `*_us` likewise."""

    trace_path: str
    options: SyncOptions
    syncs_ns: pl.DataFrame  # the listed syncs (all kinds), SYNC_COLUMNS, longest blocked first
    summary_ns: pl.DataFrame  # by site (kind, op, range, python_frame)
    by_api_ns: pl.DataFrame  # every call, whatever min_blocked_us: kind, api, calls, blocked_ns, bubble_ns
    per_step_ns: pl.DataFrame  # step, step_ns, syncs, blocked_ns, bubble_ns, shares
    steps: int  # steps the per-step figures divide by (1 without ProfilerStep)
    sync_idle_ns: int = 0  # GPU idle caused by syncs: bubbles + idle while blocked = gaps' `sync` idle
    blocked_ns: int = 0  # CPU time blocked in synchronising calls (all of them)
    window_ns: int = 0  # the analysis windows' total duration
    origin_ns: int = 0  # the trace start
    note: str | None = None
    # every blocking call (whatever min_blocked_us) with its site: sync_id, kind, op, range, python_frame
    sites: pl.DataFrame = field(default_factory=pl.DataFrame)

    # the µs display views of the ns tables (units.Shown)
    syncs = Shown("syncs_ns")
    summary = Shown("summary_ns")
    by_api = Shown("by_api_ns")
    per_step = Shown("per_step_ns")

    @property
    def sync_idle_us(self) -> float:
        """GPU idle caused by syncs, µs."""
        return duration_us(self.sync_idle_ns)

    @property
    def blocked_us(self) -> float:
        """CPU time blocked in synchronising calls, µs."""
        return duration_us(self.blocked_ns)

    @property
    def window_us(self) -> float:
        """The analysis windows' total duration, µs."""
        return duration_us(self.window_ns)

    @property
    def bubble_ns(self) -> int:
        """The bubbles after the calls that held the CPU, all of them (the rest of `sync_idle_ns`
        is idle while they still blocked)."""
        stalls = self.by_api_ns.filter(IS_STALL) if self.by_api_ns.height else self.by_api_ns
        return int(stalls["bubble_ns"].sum()) if stalls.height else 0

    @property
    def stalls(self) -> pl.DataFrame:
        """The listed syncs that held the CPU (every kind but the GPU-side waits)."""
        return self.syncs.filter(IS_STALL) if self.syncs.height else self.syncs

    @property
    def stalls_ns(self) -> pl.DataFrame:
        """`stalls` in ns (`start_ns`, `blocked_ns`, ...)."""
        return self.syncs_ns.filter(IS_STALL) if self.syncs_ns.height else self.syncs_ns

    @property
    def waits(self) -> pl.DataFrame:
        """The listed GPU-side waits (cudaStreamWaitEvent): they hold no CPU thread."""
        return self.syncs.filter(~IS_STALL) if self.syncs.height else self.syncs

    @property
    def stall_apis(self) -> pl.DataFrame:
        """`by_api` for the calls that held the CPU: every one, whatever `min_blocked_us`."""
        return self.by_api.filter(IS_STALL) if self.by_api.height else self.by_api

    @property
    def wait_calls(self) -> int:
        """How many GPU-side waits the trace holds (listed or not)."""
        return int(self.by_api.filter(~IS_STALL)["calls"].sum()) if self.by_api.height else 0


def charged_gaps(
    trace: Trace, options: Options | None = None, classified: ClassifiedGaps | None = None
) -> pl.DataFrame:
    """GPU idle pieces exactly as `gaps` builds and classifies them, each gap whose cause is
    `sync` with the blocking call `gaps` names for it: device, step, start_ns, end_ns, runtime_id
    (null for the gaps of other causes)."""
    schema = {"device": pl.Int64, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "runtime_id": pl.Int64}
    if not trace.has_gpu_work:
        return pl.DataFrame(schema=schema)
    pieces = (classified or classify_gaps(trace, options)).pieces
    named = {"runtime_id": pl.col("sync_call")}
    return pieces.select(named.get(c, pl.col(c)).cast(t).alias(c) for c, t in schema.items())


def analyse_syncs(
    trace: Trace,
    options: Options | SyncOptions | None = None,
    *,
    classified: ClassifiedGaps | None = None,
    blocking: pl.DataFrame | None = None,
    lean: bool = False,
) -> SyncsResult:
    """Every sync, its bubble and its site; `classified` is the trace's `classify_gaps` result
    when already computed with the same options (the bubbles come from it), `blocking` its
    `cpu_activity.blocking_calls` (the Session passes both). `lean` (a rank's row): the totals,
    `summary_ns` and `by_api_ns` only, the other tables `reprs.Unread` (each call's device, step
    and the work it waited for are not looked up)."""
    bundle = Options.of(options)
    opts = bundle.syncs
    blocking = blocking if blocking is not None else blocking_calls(trace)
    waits = trace.runtime.lazy().filter(pl.col("name").str.contains(GPU_WAIT_API))  # in the concat's query
    # each chain of frame steps is one polars query (`chain.collect`), run as the eager calls were
    calls = pl.concat(
        [blocking.lazy().with_columns(_blocking=pl.lit(True)), waits.with_columns(_blocking=pl.lit(False))],
        how="diagonal_relaxed",
    ).pipe(chain.collect)
    step_table = windows.step_windows(trace)  # the steps' time summed by Series (a select was a query)
    n_steps = windows.step_count(trace)
    total_ns = int((step_table.get_column("end_ns") - step_table.get_column("start_ns")).sum() or 0)
    if calls.is_empty():
        empty = pl.DataFrame(schema={c: pl.Null for c in SYNC_COLUMNS})
        return SyncsResult(
            trace.path,
            opts,
            empty,
            pl.DataFrame(),
            pl.DataFrame(),
            pl.DataFrame(),
            n_steps,
            window_ns=total_ns,
            origin_ns=trace.meta.origin_ns,
            note="no synchronising runtime call in this trace",
        )
    gaps = charged_gaps(trace, bundle, classified)
    # The gap the call returned into is its bubble; gaps that opened and closed while it still
    # held the CPU (a pageable copy staged in chunks, say) are idle time while blocked.
    ends = blocking.lazy().select("runtime_id", _call_end="end_ns")  # in the bubble's query
    gap_len, after = pl.col("end_ns") - pl.col("start_ns"), pl.col("end_ns") >= pl.col("_call_end")
    bubble = (
        gaps.lazy()
        .filter(pl.col("runtime_id").is_not_null())
        .join(ends, on="runtime_id", how="left")
        .group_by("runtime_id")
        .agg(bubble_ns=gap_len.filter(after).sum(), idle_while_blocked_ns=gap_len.filter(~after).sum())
    )
    calls = sync_calls.without_lookups(calls) if lean else sync_calls.with_lookups(trace, calls)
    ctx = op_context(trace, calls["op_id"])
    calls = chain.collect(
        calls.lazy().join(ctx.lazy(), on="op_id", how="left").join(bubble, on="runtime_id", how="left")
    )
    # A call outside any op (torch.cuda.synchronize() in the loop) is named by its Python line.
    outside = chain.collect(
        calls.lazy().filter(pl.col("python_frame").is_null()).select("runtime_id", "pid", "tid", "ts_ns")
    )
    lines = python_line_at(trace, outside, "runtime_id")
    calls = calls.lazy().join(lines.lazy().rename({"python_frame": "_line"}), on="runtime_id", how="left")
    kind = (
        pl.when(~pl.col("_blocking"))
        .then(pl.lit(GPU_WAIT))
        .when(pl.col("op").fill_null("").str.contains(NAMESPACED_OP))
        .then(pl.lit("implicit"))
        .otherwise(pl.lit("explicit"))
    )
    blocked = pl.when(pl.col("_blocking")).then(pl.col("dur_ns")).otherwise(0)
    # One sync point per op instance: aten::to's cudaMemcpyAsync and the cudaStreamSynchronize
    # after it are two calls but one place where user code waited.
    point = (
        pl.when(kind == "implicit")
        .then(pl.lit("o") + pl.col("op_id").cast(pl.String))
        .otherwise(pl.lit("r") + pl.col("runtime_id").cast(pl.String))
    )
    table = calls.select(
        sync_id=pl.col("runtime_id"),
        kind=kind,
        api=pl.col("name"),
        start_ns=pl.col("ts_ns"),
        blocked_ns=blocked,
        bubble_ns=pl.when(pl.col("_blocking")).then(pl.col("bubble_ns").fill_null(0)),
        idle_while_blocked_ns=pl.when(pl.col("_blocking")).then(pl.col("idle_while_blocked_ns").fill_null(0)),
        waited_for=pl.when(pl.col("_blocking")).then(pl.col("waited_for")),
        waited_for_stream=pl.when(pl.col("_blocking")).then(pl.col("waited_for_stream")),
        op="op",
        range="range",
        python_frame=pl.coalesce("python_frame", "_line"),  # else the Python line of a call outside any op
        op_chain="op_chain",
        step="step",
        tid="tid",
        device="device",
        _point=point,
    ).pipe(chain.collect)
    stalls = table.filter(IS_STALL)
    summary = (
        grouped(  # the texts by their codes (`keys`)
            stalls.lazy(),
            ["kind", "op", "range", "python_frame"],
            pl.len().alias("calls"),
            pl.col("_point").n_unique().alias("sync_points"),
            pl.col("api").unique().sort().str.join(", ").alias("apis"),
            pl.col("blocked_ns").sum(),
            pl.col("bubble_ns").sum(),
            pl.col("idle_while_blocked_ns").sum(),
        )
        .with_columns(
            points_per_step=pl.col("sync_points") / n_steps,
            blocked_ns_per_step=pl.col("blocked_ns") / n_steps,
            bubble_ns_per_step=pl.col("bubble_ns") / n_steps,
            blocked_share=pl.col("blocked_ns") / total_ns if total_ns else pl.lit(None, pl.Float64),
            bubble_share=pl.col("bubble_ns") / total_ns if total_ns else pl.lit(None, pl.Float64),
        )
        .sort(
            "bubble_ns",
            "blocked_ns",
            "kind",
            "op",
            "range",
            "python_frame",
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
        .select(
            "kind",
            "op",
            "range",
            "python_frame",
            "apis",
            "calls",
            "sync_points",
            "points_per_step",
            "blocked_ns",
            "bubble_ns",
            "idle_while_blocked_ns",
            "blocked_ns_per_step",
            "bubble_ns_per_step",
            "blocked_share",
            "bubble_share",
        )
    ).pipe(chain.collect)
    totals = {
        "sync_idle_ns": int(stalls["bubble_ns"].sum() + stalls["idle_while_blocked_ns"].sum()),
        "blocked_ns": int(stalls["blocked_ns"].sum()),
        "window_ns": total_ns,
        "origin_ns": trace.meta.origin_ns,
    }
    by_api = (
        table.lazy()
        .group_by("kind", "api")
        .agg(calls=pl.len(), blocked_ns=pl.col("blocked_ns").sum(), bubble_ns=pl.col("bubble_ns").sum())
        .sort("calls", "kind", "api", descending=[True, False, False])  # ties in one order every run
    ).pipe(chain.collect)
    if lean:
        unread = [Unread(f"SyncsResult.{name}") for name in ("syncs_ns", "per_step_ns", "sites")]
        return SyncsResult(trace.path, opts, unread[0], summary, by_api, unread[1], n_steps, **totals, sites=unread[2])
    agg = (
        stalls.filter(pl.col("step").is_not_null() | pl.lit(trace.steps.is_empty()))
        .group_by("step")
        .agg(
            syncs=pl.len(),
            sync_points=pl.col("_point").n_unique(),
            blocked_ns=pl.col("blocked_ns").sum(),
            bubble_ns=pl.col("bubble_ns").sum(),
        )
    )
    per_step = (
        step_table.select("step", step_ns=pl.col("end_ns") - pl.col("start_ns"))
        .join(agg, on="step", how="left", nulls_equal=True)
        .with_columns(pl.col("syncs", "sync_points").fill_null(0), pl.col("blocked_ns", "bubble_ns").fill_null(0))
        .select(
            "step",
            "step_ns",
            syncs="syncs",
            sync_points="sync_points",
            blocked_ns="blocked_ns",
            bubble_ns="bubble_ns",
            blocked_share=pl.col("blocked_ns") / pl.col("step_ns"),
            bubble_share=pl.col("bubble_ns") / pl.col("step_ns"),
        )
        .sort("step")
    )
    listed = table.filter(~IS_STALL | (pl.col("blocked_ns") >= opts.min_blocked_us * 1000))
    listed = listed.sort("blocked_ns", "sync_id", descending=[True, False]).select(SYNC_COLUMNS)
    return SyncsResult(
        trace.path,
        opts,
        listed,
        summary,
        by_api,
        per_step,
        n_steps,
        **totals,
        sites=stalls.select("sync_id", "kind", "op", "range", "python_frame"),
    )
