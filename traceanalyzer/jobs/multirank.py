"""Whole multi-rank jobs: one result per rank file, then a cross-rank comparison.

Two pure functions, so that the per-file part can be mapped over thousands of files by any
engine (a process pool here; Ray, Dask, Spark or a batch array elsewhere) and only the small
per-rank results travel to the one place that compares them:

- `rank_result(trace, options)`: one rank's step windows, collective kernels and GPU idle time
  by cause (the same numbers as `analyse_gaps` on that file alone).
- `cross_rank(results, options)`: a row per rank (step time, GPU busy, idle by cause), the rank
  whose step takes longest, and the stragglers.

Definitions:
- step time: mean over the rank's steps of the GPU-extended ProfilerStep window (as in `gaps`);
  without steps, the GPU span.
- collective kernels: GPU kernels whose name matches `collective_pattern` (NCCL/RCCL). The k-th
  occurrence of a kernel name on each rank is taken to be the same collective (ranks issue
  collectives in the same order).
- lateness: how much later a rank starts a step (or a collective) than the median rank (negative:
  earlier). In a collective every rank waits for the last to arrive, so the latest starters are
  the stragglers and the others' waiting shows up as long collective kernels. A straggler is a
  rank late by `straggler_min_us` or more; its row names its latest collective.
- cause of a rank's lateness: over the interval it was late by (ending where it started), the GPU
  idle time on that rank by cause (as `gaps` classifies it); the rest of the interval the GPU was
  busy with earlier work (`gpu_busy`).
- clocks: taken as aligned when the ranks' first common step windows overlap; otherwise each
  rank is shifted so that its first common step starts with the lowest rank's, and the result
  says so (step-start lateness is then zero by construction and is not reported).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.health import SEVERITIES, worst_first
from traceanalyzer.analyses.intervals import series_of
from traceanalyzer.causes import CAUSES
from traceanalyzer.jobs.rank_session import RankSession
from traceanalyzer.jobs.stragglers import CollectiveResult, compare
from traceanalyzer.options import Options, RankOptions
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace
from traceanalyzer.units import Shown

MultiRankOptions = RankOptions  # the name this module used before the options bundle
_RANK_IN_NAME = re.compile(r"(?i)(?:rank|worker|node|proc)[-_]?(\d+)")


@dataclass(frozen=True)
class RankResult:
    """What one rank file contributes: small tables and scalars only (picklable, and written
    as Parquet by the cache), never the trace or the Session.

    Times are int64 ns on the rank's own clock (`*_ns`); `devices`, `idle_by_cause` and
    `culprits` are the µs display views of the gaps tables (as `GapsResult` shows them)."""

    path: str
    rank: int | None
    rank_source: str  # "distributedInfo", "file name" or "none"
    world_size: int | None
    origin_ns: int
    has_gpu_work: bool
    steps: pl.DataFrame  # step, start_ns, end_ns (this rank's own clock)
    collectives: pl.DataFrame  # see collectives.RANK_COLL_SCHEMA
    exposed: pl.DataFrame  # cidx, start_ns, end_ns: collective time no compute kernel hid
    devices_ns: pl.DataFrame  # as GapsResult.devices_ns
    idle_by_cause_ns: pl.DataFrame  # as GapsResult.idle_by_cause_ns
    culprits_ns: pl.DataFrame  # as GapsResult.culprits_ns, in a total order
    findings: pl.DataFrame  # rule, severity, message: the rank's own findings
    idle_gaps: pl.DataFrame = field(repr=False)  # start_ns, end_ns, cause, op, python_frame
    warnings: tuple[str, ...] = ()  # the loader's warnings for this file
    health: pl.DataFrame = field(default_factory=pl.DataFrame)  # check, severity, message, unreliable

    # the µs display views of the ns tables (units.Shown)
    devices = Shown("devices_ns")
    idle_by_cause = Shown("idle_by_cause_ns")
    culprits = Shown("culprits_ns")

    @property
    def worst_health(self) -> str | None:
        """The most severe health check of this rank (error, warning, info), None when clean."""
        if not self.health.height:
            return None
        return min(self.health["severity"].to_list(), key=SEVERITIES.index)

    @property
    def damaged(self) -> bool:
        """Whether the loader had to salvage or fix this file."""
        return bool(self.warnings)


@dataclass(frozen=True)
class SkippedFile:
    """A file of the directory that is not a trace (a stray `config.json`): skipped, said."""

    path: str
    reason: str


@dataclass(frozen=True)
class MultiRankResult:
    """The ranks of one job compared: per-rank rows, stragglers, collectives, clock alignment.

    The tables hold int64 ns (`*_ns`; a mean step time is a float of ns); `ranks`, `stragglers`,
    `collectives` and `longest_idle_by_cause` are their µs display views (`units.display_us`).
    Collective starts are on the aligned clock, shown from `origin_ns`: the earliest of them."""

    options: RankOptions
    ranks_ns: pl.DataFrame  # one row per rank, see cross_rank
    stragglers_ns: pl.DataFrame  # rank, what, late_by_ns, cause, cause_ns, op, python_frame
    collectives_ns: pl.DataFrame  # rank, name, k, start_ns (aligned), late_by_ns (vs the median rank), dur_ns
    longest_rank: int | None
    longest_idle_by_cause_ns: pl.DataFrame  # cause, idle_ns, gaps, share_of_idle for longest_rank
    clocks_aligned: bool
    alignment_note: str
    matched: CollectiveResult | None = None  # collectives matched across ranks (stragglers.compare)
    origin_ns: int = 0  # the earliest aligned collective start: where `collectives.start_us` counts from

    # the µs display views of the ns tables (units.Shown)
    ranks = Shown("ranks_ns")
    stragglers = Shown("stragglers_ns")
    collectives = Shown("collectives_ns")
    longest_idle_by_cause = Shown("longest_idle_by_cause_ns")


def rank_from_name(path: str) -> int | None:
    """The rank a file name states (`worker3`, `rank_3`, `node-3`), if any."""
    m = _RANK_IN_NAME.search(path.replace("\\", "/").rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _total_order(culprits: pl.DataFrame) -> pl.DataFrame:
    """The culprits in `gaps`' order (idle desc, cause) with the remaining ties broken by the
    other columns: `gaps` leaves equal rows in group_by order, and two executors must give the
    same JSON."""
    rest = [c for c in ("op", "python_frame", "phase") if c in culprits.columns]
    return culprits.sort(["idle_ns", "cause", *rest], descending=[True] + [False] * (1 + len(rest)), nulls_last=True)


def rank_result(
    trace: Trace | Session, options: Options | None = None, comm_args: pl.DataFrame | None = None
) -> RankResult:
    """One rank's contribution: a pure function of one trace (or of a Session over it), and of
    the collectives' metadata read from its raw JSON (`rank_io.comm_args`; None: none known)."""
    ses = trace if isinstance(trace, Session) else RankSession(trace, options, comm_args=comm_args)
    trace = ses.trace
    gaps = ses.gaps
    if trace.meta.rank is not None:
        rank, source = trace.meta.rank, "distributedInfo"
    else:
        rank = rank_from_name(trace.path)
        source = "file name" if rank is not None else "none"
    # A rank with neither steps nor GPU work has nothing to align or compare.
    steps = windows.step_windows(trace)
    steps = steps if trace.steps.height or trace.gpu.height else steps.clear()
    coll, exposed = ses.collectives_of(comm_args)  # computed once: `communication` reads them too
    origin = trace.meta.origin_ns
    idle_schema = {"start_ns": pl.Int64, "end_ns": pl.Int64} | dict.fromkeys(("cause", "op", "python_frame"), pl.String)
    if gaps.has_gpu_work:  # Series cast and added (a frame's `select` is a polars query)
        start, dur, *named = series_of(gaps.all_gaps_ns, ["start_ns", "duration_ns", "cause", "op", "python_frame"])
        idle = pl.DataFrame(
            [start.cast(pl.Int64), (start + dur).cast(pl.Int64).alias("end_ns"), *(c.cast(pl.String) for c in named)]
        )
    else:
        idle = pl.DataFrame(schema=idle_schema)
    # A rank's row names its findings (rule, severity, message), not their savings or evidence:
    # without a finished `findings` no what-if is replayed (on small ranks the graph and replays
    # were a quarter of the rank's time) and no evidence that needs an analysis of its own is
    # computed (data_loading's stage breakdown: a third of a DLRM rank's time where it fires).
    from traceanalyzer.findings import evaluate

    rank_findings = ses.computed().get("findings")
    if rank_findings is None:
        rank_findings = evaluate(ses, estimate=False, full=False)
    found = pl.DataFrame(
        [(f.rule, f.severity, f.message) for f in rank_findings],
        schema={"rule": pl.String, "severity": pl.String, "message": pl.String},
        orient="row",
    )
    empty = pl.DataFrame()
    return RankResult(
        trace.path,
        rank,
        source,
        trace.meta.world_size,
        origin,
        gaps.has_gpu_work,
        steps,
        coll,
        exposed,
        gaps.devices_ns if gaps.has_gpu_work else empty,
        gaps.idle_by_cause_ns if gaps.has_gpu_work else empty,
        _total_order(gaps.culprits_ns) if gaps.has_gpu_work else empty,
        found,
        idle,
        tuple(trace.warnings),
        pl.DataFrame(
            [(h.check, h.severity, h.message, ", ".join(h.unreliable)) for h in ses.health],
            schema={"check": pl.String, "severity": pl.String, "message": pl.String, "unreliable": pl.String},
            orient="row",
        ),
    )


def _health_cells(results: list[RankResult]) -> dict[int, str]:
    """Each rank's health checks in one cell, worst first ("check (severity), ..."), by index in
    `results`: one query for every rank (a sort per rank was ~1.5 ms, 0.1 CPU-s at 64 ranks)."""
    parts = [r.health.with_columns(_i=pl.lit(i, pl.Int64)) for i, r in enumerate(results) if r.health.height]
    if not parts:
        return {}
    # worst first over all the rows, then a stable sort by rank: each rank's rows keep that order
    h = worst_first(pl.concat(parts, how="vertical_relaxed"), "check").sort("_i", maintain_order=True)
    cells = h.group_by("_i", maintain_order=True).agg(cell=pl.format("{} ({})", "check", "severity").str.join(", "))
    return dict(zip(cells["_i"].to_list(), cells["cell"].to_list(), strict=True))


def _per_rank_row(i: int, r: RankResult, health: str = "") -> dict:
    """One rank's row of `ranks_ns`: integer ns sums (the mean step time a float of ns);
    `health` its cell of `_health_cells`."""
    by_cause = dict.fromkeys(CAUSES, 0)
    if r.has_gpu_work:
        for row in r.idle_by_cause_ns.iter_rows(named=True):
            by_cause[row["cause"]] = row["idle_ns"]
        window, busy, idle = (int(r.devices_ns[c].sum()) for c in ("window_ns", "busy_ns", "idle_ns"))
    else:
        window = busy = idle = 0
    step_ns = (r.steps["end_ns"] - r.steps["start_ns"]).mean() if r.steps.height else None
    return {
        "_i": i,
        "rank": r.rank if r.rank is not None else i,
        "file": r.path.replace("\\", "/").rsplit("/", 1)[-1],
        "steps": r.steps.filter(pl.col("step").is_not_null()).height,
        "step_time_ns": step_ns,
        "window_ns": window,
        "gpu_busy_ns": busy,
        "busy_share": busy / window if window else None,
        "idle_ns": idle,
        **{f"idle_{c}_ns": v for c, v in by_cause.items()},
        "findings": ", ".join(dict.fromkeys(r.findings["rule"].to_list())) if r.findings.height else "",
        "health": health,
        "damaged": r.damaged,
    }


def _lateness_cause(r: RankResult, start_ns: int, late_ns: int) -> dict:
    """GPU idle by cause on rank r over [start - late, start] (own clock); the rest is busy."""
    a, b = start_ns - late_ns, start_ns
    if b <= r.origin_ns:
        return {"cause": "before the trace", "cause_ns": None, "op": None, "python_frame": None}
    a = max(a, r.origin_ns)
    ov = r.idle_gaps.filter((pl.col("start_ns") < b) & (pl.col("end_ns") > a)).with_columns(
        ov_ns=pl.min_horizontal("end_ns", pl.lit(b)) - pl.max_horizontal("start_ns", pl.lit(a))
    )
    idle_ns = int(ov["ov_ns"].sum()) if ov.height else 0
    by = ov.group_by("cause").agg(ns=pl.col("ov_ns").sum()).sort("ns", descending=True) if ov.height else None
    busy_ns = (b - a) - idle_ns
    if by is None or busy_ns >= by["ns"][0]:
        return {"cause": "gpu_busy", "cause_ns": busy_ns, "op": None, "python_frame": None}
    cause = by["cause"][0]
    top = ov.filter(pl.col("cause") == cause).sort("ov_ns", descending=True).row(0, named=True)
    return {"cause": cause, "cause_ns": by["ns"][0], "op": top["op"], "python_frame": top["python_frame"]}


def cross_rank(results: list[RankResult], options: Options | RankOptions | None = None) -> MultiRankResult:
    """Compare the ranks of one job. `results` in any order; rows come out sorted by rank."""
    opts = Options.of(options).ranks
    health = _health_cells(results)
    rows = (
        pl.DataFrame([_per_rank_row(i, r, health.get(i, "")) for i, r in enumerate(results)])
        if results
        else pl.DataFrame()
    )
    by_i = dict(enumerate(results))
    rank_of = {row["_i"]: row["rank"] for row in rows.iter_rows(named=True)} if results else {}

    # Clock alignment on the first step common to all ranks.
    starts = {i: r.steps.sort("start_ns") for i, r in by_i.items() if r.steps.height}
    common = None
    if len(starts) == len(results) and results:
        sets = [set(s["step"].drop_nulls().to_list()) for s in starts.values()]
        inter = set.intersection(*sets) if sets else set()
        common = min(inter) if inter else None
    first = {}
    for i, s in starts.items():
        row = s.filter(pl.col("step") == common) if common is not None else s.head(1)
        first[i] = row.row(0, named=True)
    shift = {i: 0 for i in by_i}
    if len(first) >= 2:
        overlap = max(f["start_ns"] for f in first.values()) < min(f["end_ns"] for f in first.values())
        if overlap:
            aligned, note = (
                True,
                "clocks aligned: the ranks' first common step windows overlap, so start times are compared as recorded",
            )
        else:
            ref = min(first, key=lambda i: (rank_of[i], i))
            shift = {i: first[ref]["start_ns"] - f["start_ns"] for i, f in first.items()}
            aligned = False
            note = (
                f"clocks NOT aligned (the ranks' first common step windows do not overlap): each rank was shifted so that "
                f"its step {first[ref]['step']} starts with rank {rank_of[ref]}'s; step-start lateness is not measurable"
            )
    else:
        aligned, note = True, "fewer than two ranks with steps or GPU work: nothing to align"

    late_rows = []
    step_late = {}
    if aligned and len(first) >= 2:
        typical = pl.Series([f["start_ns"] for f in first.values()]).median()
        for i, f in first.items():
            late = int(f["start_ns"] - typical)
            step_late[i] = late
            if late >= opts.straggler_min_us * 1000:  # the threshold flag is in µs
                what = f"step {f['step']} start" if f["step"] is not None else "first GPU work"
                late_rows.append(
                    {
                        "rank": rank_of[i],
                        "what": what,
                        "late_by_ns": late,
                        **_lateness_cause(by_i[i], f["start_ns"], late),
                    }
                )

    coll = [
        r.collectives.with_columns(_i=pl.lit(i), aligned_ns=pl.col("ts_ns") + shift[i])
        for i, r in by_i.items()
        if r.collectives.height
    ]
    coll_table = pl.DataFrame()
    coll_late = {}
    t0 = 0
    if coll:
        c = pl.concat(coll, how="vertical_relaxed")
        c = c.with_columns(n_ranks=pl.col("_i").n_unique().over("name", "k")).filter(pl.col("n_ranks") >= 2)
        c = c.with_columns(
            late_ns=(pl.col("aligned_ns") - pl.col("aligned_ns").median().over("name", "k")).round(0).cast(pl.Int64)
        )
        t0 = c["aligned_ns"].min() if c.height else 0
        coll_table = c.sort("aligned_ns").select(
            rank=pl.col("_i").replace_strict(rank_of, return_dtype=pl.Int64),
            name="name",
            k="k",
            start_ns="aligned_ns",
            late_by_ns="late_ns",
            dur_ns=pl.col("end_ns") - pl.col("ts_ns"),
        )
        worst = c.sort("late_ns", descending=True).unique("_i", keep="first")
        for w in worst.iter_rows(named=True):
            coll_late[w["_i"]] = w["late_ns"]
            if w["late_ns"] >= opts.straggler_min_us * 1000:
                late_rows.append(
                    {
                        "rank": rank_of[w["_i"]],
                        "what": f"collective {w['name'][:60]} #{w['k']}",
                        "late_by_ns": w["late_ns"],
                        **_lateness_cause(by_i[w["_i"]], w["ts_ns"], w["late_ns"]),
                    }
                )

    straggler_schema = {
        "rank": pl.Int64,
        "what": pl.String,
        "late_by_ns": pl.Int64,
        "cause": pl.String,
        "cause_ns": pl.Int64,
        "op": pl.String,
        "python_frame": pl.String,
    }
    # Latest first; equal lateness (copies of one rank) by rank, so that the order is the same every run.
    stragglers = pl.DataFrame(late_rows, schema=straggler_schema).sort(
        ["late_by_ns", "rank", "what"], descending=[True, False, False]
    )

    longest, longest_idle = (
        None,
        pl.DataFrame(schema={"cause": pl.String, "idle_ns": pl.Int64, "gaps": pl.UInt32, "share_of_idle": pl.Float64}),
    )
    if results:
        rows = rows.with_columns(
            step_start_late_ns=pl.col("_i").replace_strict(step_late, default=None, return_dtype=pl.Int64),
            collective_late_ns=pl.col("_i").replace_strict(coll_late, default=None, return_dtype=pl.Int64),
        )
        timed = rows.filter(pl.col("step_time_ns").is_not_null())
        if timed.height:
            top = timed.sort("step_time_ns", descending=True).row(0, named=True)
            longest = top["rank"]
            g = by_i[top["_i"]]
            if g.has_gpu_work:
                longest_idle = g.idle_by_cause_ns
        rows = rows.sort("rank", "_i").drop("_i")
    matched = compare(results, shift, rank_of) if results else None
    return MultiRankResult(opts, rows, stragglers, coll_table, longest, longest_idle, aligned, note, matched, t0)
