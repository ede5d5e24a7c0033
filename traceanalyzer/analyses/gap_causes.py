"""GPU idle gaps and their CPU-side causes: the one classification `gaps`, `syncs`, the rules
and the report read.

For each device, idle time is the complement of the union of its kernels, memcpys and memsets
inside the analysis windows (see analyses.windows and gpu_time). Each gap gets one cause, decided
from the work that ended it (the "next" activity) and the thread that launched that work:

- the work was queued before the gap began (its launch call had returned, or it was launched
  before the trace): `kernel_spacing` when the gap is shorter than `kernel_spacing_us` (the
  device's own spacing between kernels already queued: shown, never a headline), else `gpu_wait`
  (it waited on another stream, an event, a collective's peers or a graph dependency);
- it was launched during the gap, by a call that itself took at least `slow_launch_us` and
  covers most of the gap, or by an op (the one around the launch call) that took at least
  `slow_launch_us` of the gap and most of it, while the thread was mostly issuing launches:
  `slow_launch` (first launch of a module, lazy initialisation, autotuning, JIT);
- otherwise the CPU interval from the gap's start until that launch call returned decides:
  `data_loading` when a data-loading range fills over half of it; `sync` when the thread was
  blocked in a synchronising call at the instant the GPU went idle (the sync drained the queue;
  the gap is its bubble); `gpu_wait` when the work, once launched, still waited longer than the
  CPU took to launch it (and over `launch_latency_us`); `launch_latency` when the launch came
  within `launch_latency_us` of the gap's start; else what the thread did for the largest part
  of the interval, each moment counted once, by priority: `data_loading` (in a data-loading
  range), `sync` (blocked in a synchronising call), `runtime_call` (a runtime call that neither
  launches nor synchronises: stream or event creation, cudaMalloc/cudaFree, module loading),
  `launch_latency` (issuing launches: in launch calls or in the ops that launch), `cpu_bound` (in
  ops that launched nothing, or in Python frames with no op under them, or in a wrapper that is
  no op a user called, `Torch-Compiled Region` say: the Python that runs compiled code between
  its launches), `untraced` (no event).
A gap with no next activity (idle until the window ends) is judged from the step's thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses import gpu_time, windows
from traceanalyzer.analyses.cpu_activity import THREAD, CpuActivity, by_gap, rows_at, step_thread_of
from traceanalyzer.analyses.gap_edges import edge_activities, next_activity
from traceanalyzer.analyses.gap_overlaps import largest_overlap, longest_other_call
from traceanalyzer.analyses.intervals import collected, filled, filter_rows, positions, series_of
from traceanalyzer.analyses.layer_coverage import covered_many, on_bands
from traceanalyzer.analyses.startup import find_startup
from traceanalyzer.causes import CAUSES, HINTS, LAYERS, MEANINGS, UNCOVERED, by_layer_share
from traceanalyzer.options import GapOptions, Options
from traceanalyzer.trace import Trace

# The causes, their meanings and advice live in the registry (traceanalyzer.causes); they are
# re-exported here for the modules that read them with the classification.
__all__ = [
    "CAUSES",
    "CAUSE_DTYPE",
    "HINTS",
    "MEANINGS",
    "PHASE_DTYPE",
    "PIECE_COLUMNS",
    "ClassifiedGaps",
    "classify_gaps",
    "largest_overlap",
]

# A gap's cause and phase as codes (one byte a row, not a string): the registry's names, in its order.
CAUSE_DTYPE = pl.Enum(CAUSES)
PHASE_DTYPE = pl.Enum(["startup", "steady"])

# The columns of the classified pieces kept (`ClassifiedGaps.pieces`): those `gap_culprits`,
# `gaps`, `syncs` and the copy rules read. The activities around a gap are kept as their rows
# of `Trace.gpu` (`gpu_id`), not as copies of their names.
PIECE_COLUMNS = (
    "gap_id",
    "device",
    "step",
    "phase",
    "start_ns",
    "end_ns",
    "cause",
    "pid",
    "tid",
    "cpu_a",
    "cpu_b",
    "t_python",
    "t_cpu_op",
    "prev_gpu_id",
    "next_gpu_id",
    "next_start_ns",
    "next_stream",
    "launch_api",
    "launch_ts_ns",
    "launch_end_ns",
    "launch_tid",
    "launch_op_id",
    "launched_before_trace",
    "sync_call",
    "rt_call",
    "rt_call_overlap_ns",
)


def _layer_time(layers: tuple[str, ...]) -> pl.Expr:
    first, *rest = (pl.col(f"t_{layer}") for layer in layers)
    return sum(rest, first)


def _cause(name: str) -> pl.Expr:
    """A cause as a code of CAUSE_DTYPE: the classifier's branches pick codes, not strings."""
    return pl.lit(name, dtype=CAUSE_DTYPE)


def _on_bands(act: CpuActivity) -> pl.DataFrame:
    """The blocked time's index on the bands' axis (`layer_coverage.on_bands`: the sync layer's
    threads are among the bands'), so that it is measured on one int64 axis like the layer
    unions: the keyed measure sorted the gaps twice more (1 GB: +33 MB)."""
    return on_bands(act.blocked, act.bands, THREAD)


def _classify(gaps: pl.DataFrame, act: CpuActivity, o: GapOptions, ops: pl.DataFrame) -> pl.DataFrame:
    latency = int(o.launch_latency_us * 1000)
    spacing = int(o.kernel_spacing_us * 1000)
    slow = int(o.slow_launch_us * 1000)
    start, end = pl.col("start_ns"), pl.col("end_ns")
    known = pl.col("launch_ts_ns").is_not_null()
    queued = (known & (pl.col("launch_end_ns") <= start)) | pl.col("launched_before_trace").fill_null(False)
    # The op around the call that launched the next work (a slow launch is its time).
    gaps = gaps.hstack(rows_at(ops, "op_id", gaps["launch_op_id"], _op_ts_ns="ts_ns", _op_end_ns="end_ns"))
    gaps = gaps.with_columns(
        # The CPU interval that explains a gap: from its start until the call launching the
        # next work returned. A blocking launch (a pageable cudaMemcpyAsync staging its data)
        # is part of the wait, so it counts as time blocked.
        cpu_a=start,
        cpu_b=pl.min_horizontal(pl.coalesce("launch_end_ns", "end_ns"), "end_ns").clip(lower_bound=start),
    )
    # The covered times on narrow columns, put alongside in the gaps' order: each `covered`
    # sorts its frame twice, and the gaps carry ~40 columns.
    q = pl.DataFrame([*series_of(gaps, [*THREAD, "start_ns", "cpu_a", "cpu_b"]), (gaps["start_ns"] + 1).alias("_gs1")])
    at_start = covered_many(q, [_on_bands(act)], THREAD, "start_ns", "_gs1", ["_blocked_at_start"], act.bands)
    u = [f"_u{k}" for k in range(len(act.unions))]
    gaps = gaps.hstack([*at_start, *covered_many(q, list(act.unions), THREAD, "cpu_a", "cpu_b", u, act.bands)])
    # A launch that blocks (a pageable cudaMemcpyAsync staging its data) is time blocked, not a
    # slow launch: the copy rules and `sync` speak of it.
    blocking_ids = act.blocking.get_column("runtime_id").implode()
    # the steps below and the causes one lazy query (four frame calls before it were four)
    lf = gaps.lazy().with_columns(_launch_blocks=pl.col("launch_runtime_id").is_in(blocking_ids).fill_null(False))
    # Each moment of the interval to the first layer covering it (causes.LAYERS).
    lf = lf.with_columns(
        [
            (pl.col(f"_u{k}") - (pl.col(f"_u{k - 1}") if k else 0)).clip(0).alias(f"t_{name}")
            for k, name in enumerate(LAYERS)
        ]
    ).with_columns(
        pl.col("cpu_b").sub(pl.col("cpu_a")).sub(pl.col(f"_u{len(LAYERS) - 1}")).clip(0).alias(f"t_{UNCOVERED}")
    )
    lf = lf.drop([f"_u{k}" for k in range(len(LAYERS))])
    # The terms below are columns of one lazy query, each computed once in its own stage, and
    # the branches compare columns: the one expression they made (a term used in several
    # branches written out in each) took ~1.4 ms on a DLRM rank's 214 gaps, a sixth of `gaps`.
    span = pl.col("cpu_b") - pl.col("cpu_a")
    # Each cause decided by the thread's time sums its layers (causes.by_layer_share), in the
    # order the layers win, so the first of equal shares wins.
    shares = [(f"_share{i}", _layer_time(layers), cause) for i, (cause, layers) in enumerate(by_layer_share())]
    terms = {name: t for name, t, _ in shares} | {
        "_span": span,
        "_known": known,
        "_queued": queued,
        "_launch_in_gap": (
            pl.min_horizontal("launch_end_ns", "end_ns") - pl.max_horizontal("launch_ts_ns", "start_ns")
        ).clip(0),
        "_waited_after": end - pl.col("launch_end_ns"),
        "_op_in_gap": (
            (pl.min_horizontal("_op_end_ns", "end_ns") - pl.max_horizontal("_op_ts_ns", "start_ns"))
            .clip(0)
            .fill_null(0)
        ),
    }
    largest = pl.col("_largest")
    by_cpu = pl.when(pl.col("pid").is_null()).then(_cause("untraced"))
    for name, _, cause_name in shares:
        t = pl.col(name)
        by_cpu = by_cpu.when((t > 0) & (t >= largest)).then(_cause(cause_name))
    by_cpu = by_cpu.otherwise(_cause("untraced"))
    known, queued, span = pl.col("_known"), pl.col("_queued"), pl.col("_span")
    launch_in_gap, waited_after, op_in_gap = pl.col("_launch_in_gap"), pl.col("_waited_after"), pl.col("_op_in_gap")
    cause = (
        pl.when(queued & ((end - start) < spacing))
        .then(_cause("kernel_spacing"))
        .when(queued)
        .then(_cause("gpu_wait"))
        .when(
            known
            & ~pl.col("_launch_blocks")
            & ((pl.col("launch_end_ns") - pl.col("launch_ts_ns")) >= slow)
            & (launch_in_gap * 2 >= end - start)
        )
        .then(_cause("slow_launch"))
        # Data loading that fills most of the gap is the cause even right after a sync.
        .when(pl.col("t_data_loading") > span / 2)
        .then(_cause("data_loading"))
        # The thread was blocked in a sync when the GPU ran dry: the sync drained the queue,
        # and the gap is its bubble (the time to launch new work after it returned).
        .when(pl.col("_blocked_at_start") > 0)
        .then(_cause("sync"))
        # Launched, then still waiting longer than the CPU took: the GPU waited on something.
        .when(known & (waited_after > latency) & (waited_after > span))
        .then(_cause("gpu_wait"))
        .when(known & (span <= latency))
        .then(_cause("launch_latency"))
        # The op that launches the work took over `slow_launch_us` of the gap itself: lazy
        # initialisation (a library's first call, autotuning, JIT), a slow launch, not per-kernel
        # launch overhead. Many launches by many ops in a long gap stay launch_latency.
        .when((pl.col("_by_cpu") == "launch_latency") & (op_in_gap >= slow) & (op_in_gap * 2 >= end - start))
        .then(_cause("slow_launch"))
        .otherwise(pl.col("_by_cpu"))
    )
    return collected(
        lf.with_columns(**terms)
        .with_columns(_largest=pl.max_horizontal([pl.col(name) for name, _, _ in shares]))
        .with_columns(_by_cpu=by_cpu)
        .with_columns(cause=cause)
        .drop(*terms, "_largest", "_by_cpu")
    )


def _init_key(trace: Trace, pieces: pl.DataFrame) -> pl.Series:
    """init_key: the name start-up tells one-time calls from churn by (a runtime_call gap's
    call, a slow_launch gap's next activity), null elsewhere. Made on those few rows and put in
    place: a when/then over every piece wrote a new column of names (+37 MB at 1 GB)."""
    cause = pieces.get_column("cause")  # Series calls throughout (five were a query each)
    rows = positions((cause == "runtime_call") | (cause == "slow_launch"))
    is_call = cause[rows] == "runtime_call"
    names = rows_at(trace.runtime, "runtime_id", pieces.get_column("rt_call")[rows], _rt_name="name")
    key = names.get_column("_rt_name").zip_with(is_call, pieces.get_column("next_name")[rows])
    return filled(None, pieces.height, pl.String).scatter(rows, key).alias("init_key")


@dataclass(frozen=True)
class ClassifiedGaps:
    """Every idle piece (a gap clipped to one window) with its cause, before naming culprits.
    `syncs` builds on this so that a sync's bubble is by construction the gap blamed on it."""

    pieces: (
        pl.DataFrame
    )  # PIECE_COLUMNS: gap_id, device, step, start_ns, end_ns, cause, phase, pid, tid, sync_call, ...
    per_window: pl.DataFrame  # device, step, start_ns, end_ns, window_ns, busy_ns
    # What the culprits are named from (`gap_culprits`): the blocking calls and the data-loading
    # ranges of the CpuActivity, not the whole of it. Its layer unions serve the classification
    # only, so they can go before the gaps are named (1 GB: ~70 MB).
    blocking: pl.DataFrame
    data_ranges: pl.DataFrame
    startup_end_ns: int | None = None  # where the start-up set aside ends (see analyses.startup)
    startup_window_ns: int = 0  # window time inside the start-up, summed over devices
    startup_busy_ns: int = 0  # GPU busy time inside it


def classify_gaps(trace: Trace, options: Options | None = None, activity: CpuActivity | None = None) -> ClassifiedGaps:
    """Idle pieces per device and window, each with the thread that explains it and a cause;
    `sync_call` is the blocking call (runtime_id) a `sync` gap is blamed on. Needs GPU work.
    `activity` is the trace's CpuActivity when already built (it must use the same pattern)."""
    opts = Options.of(options)
    busy = gpu_time.busy_intervals(trace)
    wins = windows.device_windows(trace)
    per_window = gpu_time.busy_by_window(busy, wins)
    idle = gpu_time.idle_intervals(busy, wins)
    # Sorted while narrow (the window's bounds left behind), before the next activity's dozen
    # columns are put beside it: a sort copies every column it carries. Each helper column goes
    # once read: the pieces are the widest frame here (1 GB: 276 k rows, ~2 MB a column).
    pieces = collected(  # one query (four frame calls were four)
        gpu_time.clip_to_windows(idle, wins)
        .lazy()
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select("device", "step", "start_ns", "end_ns", "prev_end_ns", "next_start_ns")
        .sort("device", "start_ns")
        .with_row_index("gap_id")
    )
    del idle
    prev_id, next_id = edge_activities(trace, pieces)
    pieces = pieces[[c for c in pieces.columns if c != "prev_end_ns"]].hstack([prev_id, next_id])  # no query
    del prev_id, next_id
    pieces = next_activity(trace, pieces)
    # The thread whose timeline explains the gap: the one that launched the work ending it,
    # else the step's own thread (its columns joined to the step column alone).
    step = step_thread_of(trace, pieces.select("step", "device"))
    pieces = collected(
        pieces.lazy()
        .with_columns(
            pid=pl.coalesce(pl.col("launch_pid"), step.get_column("step_pid")),
            tid=pl.coalesce(pl.col("launch_tid"), step.get_column("step_tid")),
        )
        .drop("launch_pid")
    )
    del step
    act = activity or CpuActivity.of(trace, opts.patterns.data_loading_pattern)
    pieces = _classify(pieces, act, opts.gaps, trace.ops)  # in gap_id order
    # What the classification's steps left (layer times, helper columns) goes now, not at the
    # end: what is kept and the next activity's name (the start-up's key) go on (1 GB: ~20 MB).
    pieces = pieces[[*(c for c in PIECE_COLUMNS if c in pieces.columns), "next_name"]]
    # (the gaps of a cause as five columns filtered by Series, and what is found put at its
    # gap's row, gap_id: a filter of the pieces' ~25 columns and a join were a query each)
    narrow = pl.DataFrame([pieces.get_column(c) for c in ("gap_id", "pid", "tid", "cpu_a", "cpu_b")])
    cause = pieces.get_column("cause")
    sync_call = largest_overlap(filter_rows(narrow, cause == "sync"), act.blocking, "runtime_id", "sync_call", True)
    pieces = pieces.hstack(by_gap(pieces.height, sync_call))
    # The runtime call a runtime_call gap sat in (the longest on its thread in the interval): the
    # culprit `gaps` names, and the key by which start-up tells one-time calls from churn. The
    # other calls' columns are gathered only when such gaps exist.
    rc = filter_rows(narrow, cause == "runtime_call")
    rt_call = longest_other_call(trace, rc, act.runtime_other.get_column("runtime_id"))
    pieces = pieces.hstack(by_gap(pieces.height, rt_call))
    del narrow, cause
    pieces = pieces.hstack([_init_key(trace, pieces)])
    pieces = pieces[[c for c in pieces.columns if c != "next_name"]]
    first_step = trace.steps.sort("start_ns")["step"][0] if trace.steps.height >= 2 else None
    boundaries = (
        wins.filter(pl.col("step").is_not_null())["start_ns"].unique().sort() if first_step is not None else None
    )
    startup = find_startup(pieces, wins, busy, opts.gaps.startup_gap_us, first_step, boundaries)
    phase = pl.lit("steady", dtype=PHASE_DTYPE)
    if startup.end_ns is not None:
        phase = pl.when(pl.col("start_ns") < startup.end_ns).then(pl.lit("startup", dtype=PHASE_DTYPE)).otherwise(phase)
    # Only what the readers read is kept (PIECE_COLUMNS): the rest were steps of the classification.
    pieces = collected(pieces.lazy().with_columns(phase=phase).select(PIECE_COLUMNS))
    return ClassifiedGaps(
        pieces, per_window, act.blocking, act.data_ranges, startup.end_ns, startup.window_ns, startup.busy_ns
    )
