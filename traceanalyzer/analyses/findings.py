"""The rule registry: each rule reads the overview analyses, compares one number with its
threshold (a field of `FindingOptions`) and, when it fires, returns a Finding with its evidence
numbers, the events behind it and a recommendation.

Severity: `high` when the measured value is at least twice as far past the threshold (twice the
threshold, or half of it for "below" rules), else `medium`; capture caveats are `info`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import polars as pl

from traceanalyzer.analyses import gpu_time
from traceanalyzer.analyses.attribution import op_context
from traceanalyzer.analyses.copies import CopiesResult, analyse_copies
from traceanalyzer.analyses.cpu_activity import blocking_calls
from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
from traceanalyzer.analyses.intervals import coverage_index, covered, merge
from traceanalyzer.analyses.kernels import KernelsResult, analyse_kernels
from traceanalyzer.analyses.stages import StagesResult, analyse_stages
from traceanalyzer.analyses.steps import StepsResult, analyse_steps
from traceanalyzer.options import (
    DATA_LOADING_PATTERN,
    SYNC_API_PATTERN,
    FindingOptions,
    GapOptions,
    KernelOptions,
    StageOptions,
    StepOptions,
)
from traceanalyzer.trace import Trace

RULE_IDS = (
    "data_loading",
    "sync_stalls",
    "pageable_copies",
    "launch_bound",
    "no_tensor_cores",
    "single_tensor_optimizer",
    "low_gpu_utilization",
    "capture_caveats",
)
SINGLE_TENSOR = "_single_tensor_"
MAX_EVENTS = 5


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # high | medium | info
    message: str
    evidence: dict[str, Any]
    recommendation: str
    events: tuple[dict[str, Any], ...] = ()


@dataclass
class Overview:
    """The analyses the rules read, computed once and only when a rule needs them."""

    trace: Trace
    options: FindingOptions = field(default_factory=FindingOptions)
    step_options: StepOptions = field(default_factory=StepOptions)
    kernel_options: KernelOptions = field(default_factory=KernelOptions)
    stage_mapping: list[tuple[str, str]] | None = None
    gap_options: GapOptions = field(default_factory=GapOptions)
    stage_options: StageOptions = field(default_factory=StageOptions)

    @cached_property
    def steps(self) -> StepsResult:
        return analyse_steps(self.trace, self.step_options)

    @cached_property
    def stages(self) -> StagesResult:
        return analyse_stages(self.trace, self.stage_options, mapping=self.stage_mapping)

    @cached_property
    def pipeline(self) -> StagesResult:
        return self.stages if not self.stage_mapping else analyse_stages(self.trace, self.stage_options)

    @cached_property
    def kernels(self) -> KernelsResult:
        return analyse_kernels(self.trace, self.kernel_options)

    @cached_property
    def gaps(self) -> GapsResult:
        return analyse_gaps(self.trace, self.gap_options)

    @cached_property
    def copies(self) -> CopiesResult:
        return analyse_copies(self.trace)

    @property
    def busy_share(self) -> float | None:
        d = self.gaps.devices
        if not self.gaps.has_gpu_work or d.is_empty() or not d["window_us"].sum():
            return None
        return float(d["busy_us"].sum() / d["window_us"].sum())

    @property
    def window_us(self) -> float:
        d = self.gaps.devices
        return float(d["window_us"].sum()) if self.gaps.has_gpu_work and d.height else 0.0


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    thresholds: tuple[str, ...]  # FindingOptions fields
    advice: str
    check: Callable[[Overview], Finding | None]


def _sev(value: float, threshold: float, below: bool = False) -> str:
    if below:
        return "high" if value <= threshold / 2 else "medium"
    return "high" if threshold > 0 and value >= 2 * threshold else "medium"


def _us(df: pl.DataFrame, origin: int, *cols: str) -> list[dict]:
    return (
        df.head(MAX_EVENTS)
        .select(*cols, start_us=(pl.col("ts_ns") - origin) / 1000.0, duration_us=pl.col("dur_ns") / 1000.0)
        .to_dicts()
    )


# --- the rules -------------------------------------------------------------------------------

DATA_ADVICE = "load data in parallel and ahead of the GPU: DataLoader(num_workers>0, pin_memory=True, prefetch_factor>=2, persistent_workers=True)"


def _data_loading(ov: Overview) -> Finding | None:
    st = ov.pipeline
    if "data_loading" not in st.average or not st.average_step_us:
        return None
    share = st.average["data_loading"] / st.average_step_us
    th = ov.options.data_loading_share
    if share < th:
        return None
    ranges = ov.trace.ops.filter(pl.col("name").str.contains(DATA_LOADING_PATTERN)).sort("dur_ns", descending=True)
    per = "step" if st.window_kind == "steps" else "trace"
    return Finding(
        "data_loading",
        _sev(share, th),
        f"data loading takes {share:.1%} of {per} time ({st.average['data_loading']:,.0f} of {st.average_step_us:,.0f} µs per {per})",
        {
            "data_loading_us_per_step": st.average["data_loading"],
            "step_us": st.average_step_us,
            "share": share,
            "ranges": ranges.height,
        },
        DATA_ADVICE,
        tuple(_us(ranges, ov.trace.meta.origin_ns, "name")),
    )


def _idle_while_blocked_ns(ov: Overview, calls: pl.DataFrame) -> int:
    """GPU idle time (any device, inside the windows) during which some CPU thread sat in one
    of `calls`."""
    if calls.is_empty():
        return 0
    wins = gpu_time.windows(ov.trace)
    idle = gpu_time.clip_to_windows(gpu_time.idle_intervals(gpu_time.busy_intervals(ov.trace), wins), wins)
    idle = idle.filter(pl.col("end_ns") > pl.col("start_ns")).with_columns(_g=pl.lit(0))
    index = coverage_index(merge(calls.with_columns(_g=pl.lit(0)), ["_g"]), ["_g"])
    return int(covered(idle, index, ["_g"], "start_ns", "end_ns", "_ov")["_ov"].sum() or 0)


def _sync_stalls(ov: Overview) -> Finding | None:
    # Small on purpose: switch to analyses.syncs when it lands.
    if not ov.trace.has_gpu_work or not ov.window_us:
        return None
    calls = blocking_calls(ov.trace).filter(pl.col("name").str.contains(SYNC_API_PATTERN))
    idle_us = _idle_while_blocked_ns(ov, calls) / 1000.0
    share = idle_us / ov.window_us
    th = ov.options.sync_stall_share
    if share < th:
        return None
    calls = calls.sort("dur_ns", descending=True)
    ctx = op_context(ov.trace, calls["op_id"]).select("op_id", "op")
    top = calls.join(ctx, on="op_id", how="left").sort("dur_ns", descending=True)
    by_api = ", ".join(
        f"{r['name']} ×{r['len']}"
        for r in calls.group_by("name").len().sort("len", descending=True).iter_rows(named=True)
    )
    return Finding(
        "sync_stalls",
        _sev(share, th),
        f"the GPU sat idle {idle_us:,.0f} µs ({share:.1%} of the window) while the CPU waited in synchronising calls ({by_api})",
        {
            "idle_while_blocked_us": idle_us,
            "share": share,
            "sync_calls": calls.height,
            "blocked_us": calls["dur_ns"].sum() / 1000.0,
        },
        "avoid host syncs inside the loop: no .item(), .cpu(), .tolist(), print(tensor) or torch.cuda.synchronize() per step; "
        "keep values on the GPU, use non_blocking copies to pinned memory, and read metrics every N steps",
        tuple(_us(top, ov.trace.meta.origin_ns, "name", "op")),
    )


def _pageable_copies(ov: Overview) -> Finding | None:
    copies = ov.copies.copies
    if copies.is_empty() or "host_memory" not in copies.columns:
        return None
    pageable = copies.filter(pl.col("host_memory") == "pageable")
    moved = int(pageable["bytes"].sum() or 0) if pageable.height else 0
    th = ov.options.pageable_copy_bytes
    if not pageable.height or moved < th:
        return None
    top = pageable.sort("bytes", descending=True, nulls_last=True).head(MAX_EVENTS)
    return Finding(
        "pageable_copies",
        _sev(moved, th),
        f"{pageable.height:,} copies to or from pageable host memory moved {moved / 2**20:,.1f} MiB "
        f"({pageable['duration_us'].sum():,.0f} µs of copy time, CPU blocked {pageable['blocked_us'].sum() or 0:,.0f} µs)",
        {
            "copies": pageable.height,
            "bytes": moved,
            "duration_us": pageable["duration_us"].sum(),
            "blocked_us": pageable["blocked_us"].sum(),
        },
        "copy from pinned memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then .to(device, non_blocking=True)",
        tuple(top.select("direction", "bytes", "start_us", "duration_us", "op", "python_frame").to_dicts()),
    )


def _launch_bound(ov: Overview) -> Finding | None:
    k = ov.kernels
    s = k.short
    busy = ov.busy_share
    if (
        s.total_outside_graphs < ov.options.launch_bound_min_kernels
        or s.count_share_outside_graphs is None
        or busy is None
    ):
        return None
    th = ov.options.launch_bound_short_share
    g = ov.gaps
    row = g.idle_by_cause.filter(pl.col("cause") == "launch_latency")
    latency_us = float(row["idle_us"][0]) if row.height else 0.0
    latency_share = latency_us / ov.window_us if ov.window_us else 0.0
    if (
        s.count_share_outside_graphs < th
        or busy >= ov.options.low_gpu_utilization
        or latency_share < ov.options.launch_latency_share
    ):
        return None
    short_names = (
        ov.trace.gpu.filter((pl.col("kind") == "kernel") & (pl.col("dur_ns") < int(s.threshold_us * 1000)))
        .group_by("name")
        .agg(calls=pl.len(), total_us=pl.col("dur_ns").sum() / 1000.0)
        .sort("calls", descending=True)
        .head(MAX_EVENTS)
    )
    return Finding(
        "launch_bound",
        _sev(s.count_share_outside_graphs, th),
        f"{s.count_share_outside_graphs:.0%} of kernels launched outside CUDA graphs run under {s.threshold_us:g} µs, "
        f"GPU busy only {busy:.0%}, and launch latency leaves it idle {latency_us:,.0f} µs ({latency_share:.1%} of the window)",
        {
            "short_kernels": s.count_outside_graphs,
            "kernels": s.total_outside_graphs,
            "short_share": s.count_share_outside_graphs,
            "busy_share": busy,
            "launch_latency_idle_us": latency_us,
            "launch_latency_share": latency_share,
        },
        "fuse small kernels with torch.compile (mode='reduce-overhead' also uses CUDA graphs), capture the step in a CUDA graph, "
        "or batch more work per launch",
        tuple(short_names.to_dicts()),
    )


def _no_tensor_cores(ov: Overview) -> Finding | None:
    k = ov.kernels
    if not k.total_us:
        return None
    share = k.matmul_conv_no_tc_us / k.total_us
    th = ov.options.no_tensor_cores_share
    if share < th:
        return None
    top = k.table.filter(pl.col("matmul_conv") & ~pl.col("tensor_cores")).head(MAX_EVENTS)
    return Finding(
        "no_tensor_cores",
        _sev(share, th),
        f"matmul/conv kernels without Tensor Cores take {share:.1%} of kernel time ({k.matmul_conv_no_tc_us:,.0f} µs)",
        {
            "matmul_conv_no_tc_us": k.matmul_conv_no_tc_us,
            "matmul_conv_us": k.matmul_conv_us,
            "kernel_us": k.total_us,
            "share": share,
        },
        "use mixed precision (torch.autocast with bfloat16/float16) and, on Ampere or newer, allow TF32: "
        "torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))",
        tuple(top.select("kernel", "calls", "total_us", "share").to_dicts()),
    )


def _single_tensor(ov: Overview) -> Finding | None:
    t = ov.trace
    names = pl.concat(
        [
            t.ops.select("name"),
            t.python.select("name"),
            t.gpu.filter(pl.col("kind") == "kernel").select("name"),
        ]
    ).filter(pl.col("name").fill_null("").str.contains(SINGLE_TENSOR, literal=True))
    th = ov.options.single_tensor_min
    if names.height < max(th, 1):
        return None
    top = names.group_by("name").agg(events=pl.len()).sort("events", descending=True).head(MAX_EVENTS)
    return Finding(
        "single_tensor_optimizer",
        "medium",
        f"{names.height:,} events of a single-tensor optimizer ({top['name'][0]}): one small kernel per parameter",
        {"events": names.height},
        "use the multi-tensor implementations: torch.optim.AdamW(..., foreach=True) or fused=True",
        tuple(top.to_dicts()),
    )


def _low_gpu_utilization(ov: Overview) -> Finding | None:
    busy = ov.busy_share
    th = ov.options.low_gpu_utilization
    if busy is None or busy >= th:
        return None
    causes = ov.gaps.idle_by_cause.head(3)
    top = ", ".join(f"{r['cause']} {r['share_of_idle']:.0%}" for r in causes.iter_rows(named=True))
    where = "over the profiled steps" if ov.gaps.window_kind == "steps" else "over the GPU span"
    return Finding(
        "low_gpu_utilization",
        _sev(busy, th, below=True),
        f"the GPU was busy {busy:.1%} of the time {where}" + (f"; idle by cause: {top}" if top else ""),
        {
            "busy_share": busy,
            "window_us": ov.window_us,
            "idle_by_cause": {r["cause"]: r["idle_us"] for r in ov.gaps.idle_by_cause.iter_rows(named=True)},
        },
        "see `traceanalyzer gaps` for every idle gap and the op and Python line behind it",
        tuple(ov.gaps.culprits.head(MAX_EVENTS).to_dicts()),
    )


def _capture_caveats(ov: Overview) -> Finding | None:
    cav = ov.steps.caveats
    if not cav:
        return None
    return Finding(
        "capture_caveats",
        "info",
        "; ".join(c.message for c in cav),
        {"caveats": [c.kind for c in cav], "steps": ov.steps.count},
        "profile with torch.profiler.schedule(wait=1, warmup=1, active=5) and call prof.step() once per iteration, after fetching the batch",
        tuple({"kind": c.kind, **c.evidence} for c in cav),
    )


RULES: tuple[Rule, ...] = (
    Rule("data_loading", "Data loading share of step time", ("data_loading_share",), DATA_ADVICE, _data_loading),
    Rule(
        "sync_stalls",
        "GPU idle while the CPU waits in synchronising calls",
        ("sync_stall_share",),
        "remove per-step .item()/.cpu()/synchronize(); read metrics every N steps",
        _sync_stalls,
    ),
    Rule(
        "pageable_copies",
        "Copies to or from pageable host memory",
        ("pageable_copy_bytes",),
        "pin host memory (pin_memory=True) and copy with non_blocking=True",
        _pageable_copies,
    ),
    Rule(
        "launch_bound",
        "Many short kernels and launch latency",
        ("launch_bound_short_share", "launch_bound_min_kernels", "low_gpu_utilization", "launch_latency_share"),
        "torch.compile to fuse kernels, CUDA graphs to launch them at once",
        _launch_bound,
    ),
    Rule(
        "no_tensor_cores",
        "Matmul/conv time on kernels without Tensor Cores",
        ("no_tensor_cores_share",),
        "mixed precision (torch.autocast) or TF32 on Ampere and newer",
        _no_tensor_cores,
    ),
    Rule(
        "single_tensor_optimizer",
        "Single-tensor (per-parameter) optimizer",
        ("single_tensor_min",),
        "foreach=True or fused=True in the optimizer",
        _single_tensor,
    ),
    Rule(
        "low_gpu_utilization",
        "GPU busy share over the steps",
        ("low_gpu_utilization",),
        "find the idle gaps and their causes with `traceanalyzer gaps`",
        _low_gpu_utilization,
    ),
    Rule(
        "capture_caveats",
        "How the trace was captured (steps, warm-up, data loading outside steps)",
        (),
        "profile several steps with a schedule that skips warm-up",
        _capture_caveats,
    ),
)
RULES_BY_ID = {r.id: r for r in RULES}


def evaluate(overview: Overview, rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """Every finding that fires, in registry order."""
    return [f for f in (r.check(overview) for r in rules) if f is not None]


def analyse_findings(trace: Trace, options: FindingOptions | None = None) -> list[Finding]:
    return evaluate(Overview(trace, options or FindingOptions()))
