"""Rules over the whole step: data loading, launch-bound work, GPU utilisation, Tensor Cores,
single-tensor optimizers, and how the trace was captured."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer import chain
from traceanalyzer.analyses.steps import Caveat
from traceanalyzer.analyses.verdict import COMPILED_LAUNCH_HINT, compiled_model
from traceanalyzer.analyses.windows import step_count
from traceanalyzer.findings.engine import MAX_EVENTS, Finding, Later, Rule, events_of, per_unit, severity
from traceanalyzer.patterns import SINGLE_TENSOR_OPTIMIZER

if TYPE_CHECKING:
    from traceanalyzer.session import Session

DATA_ADVICE = (
    "load data in parallel and ahead of the GPU: DataLoader(num_workers>0, pin_memory=True, "
    "prefetch_factor>=2, persistent_workers=True)"
)


def _data_loading(ses: Session) -> list[Finding]:
    # Data loading that left the GPU idle, not loading hidden behind GPU work: the gaps `gaps`
    # blames on it, as a share of the steady-state window.
    g = ses.gaps
    if not g.has_gpu_work:
        return _data_loading_cpu_only(ses)
    window = g.steady_window_us
    if window <= 0:
        return []
    idle = g.steady_idle_us("data_loading")
    share = idle / window
    th = ses.options.findings.data_loading_share
    if share < th:
        return []
    ranges = ses.activity.data_ranges
    per = per_unit(ses)
    n = step_count(ses.trace)
    return [
        Finding(
            "data_loading",
            severity(share, th),
            f"the GPU sat idle {idle / 1000:,.1f} ms in all ({share:.1%} of the {window / 1000:,.1f} ms "
            f"{_steady_name(g)}) while the CPU loaded data ({idle / n / 1000:,.1f} ms per {per})",
            {
                "data_loading_idle_us": idle,
                "window_us": window,
                "share": share,
                # the stage breakdown is an analysis of its own, for this one number: only in full
                "data_loading_stage_us_per_step": Later(lambda: ses.pipeline_stages.average.get("data_loading")),
                "ranges": ranges.height,
            },
            DATA_ADVICE,
            Later(lambda: events_of(ranges.sort("dur_ns", descending=True), ses.trace.meta.origin_ns, "name")),
            at_stake_us=idle,
        )
    ]


def _steady_name(g) -> str:
    """What the steady-state window is, in words."""
    base = "of profiled steps" if g.window_kind == "steps" else "GPU span"
    return base + (" after start-up" if g.startup_window_us else "")


def _data_loading_cpu_only(ses: Session) -> list[Finding]:
    """Without GPU work no idle GPU waits on the loader: the share of step time spent loading
    (the pipeline stage) is what a CPU-only run loses to it."""
    st = ses.pipeline_stages
    if "data_loading" not in st.average or not st.average_step_us:
        return []
    share = st.average["data_loading"] / st.average_step_us
    th = ses.options.findings.data_loading_share
    if share < th:
        return []
    per = per_unit(ses)
    gpu = "no GPU event read (the file is cut short)" if ses.trace.gpu_cut_off else "no GPU work in this trace"
    return [
        Finding(
            "data_loading",
            severity(share, th),
            f"{gpu}; data loading takes {share:.1%} of {per} time "
            f"({st.average['data_loading']:,.0f} of {st.average_step_us:,.0f} µs per {per})",
            {
                "data_loading_stage_us_per_step": st.average["data_loading"],
                "step_us": st.average_step_us,
                "share": share,
            },
            DATA_ADVICE,
        )
    ]


def _launch_bound(ses: Session) -> list[Finding]:
    s = ses.kernels.short
    g = ses.gaps
    busy = g.steady_busy_share
    o = ses.options.findings
    if s.total_outside_graphs < o.launch_bound_min_kernels or s.count_share_outside_graphs is None or busy is None:
        return []
    latency_us = g.steady_idle_us("launch_latency")
    latency_share = latency_us / g.steady_window_us if g.steady_window_us > 0 else 0.0
    th = o.launch_bound_short_share
    if s.count_share_outside_graphs < th or busy >= o.low_gpu_utilization or latency_share < o.launch_latency_share:
        return []
    return [
        Finding(
            "launch_bound",
            severity(s.count_share_outside_graphs, th),
            f"{s.count_share_outside_graphs:.0%} of kernels launched outside CUDA graphs run under {s.threshold_us:g} µs, "
            f"GPU busy only {busy:.0%} of the {g.steady_window_us / 1000:,.1f} ms {_steady_name(g)}, and launch latency "
            f"leaves it idle {latency_us:,.0f} µs in all ({latency_share:.1%} of that window)",
            {
                "short_kernels": s.count_outside_graphs,
                "kernels": s.total_outside_graphs,
                "short_share": s.count_share_outside_graphs,
                "busy_share": busy,
                "launch_latency_idle_us": latency_us,
                "launch_latency_share": latency_share,
            },
            _launch_advice(ses),
            Later(lambda: tuple(ses.kernels.short_names.head(MAX_EVENTS).to_dicts())),
            at_stake_us=latency_us,
        )
    ]


def _launch_advice(ses: Session) -> str:
    """Fusion advice that fits: a model already compiled is told about CUDA graphs instead."""
    if compiled_model(ses.trace):
        return COMPILED_LAUNCH_HINT
    return (
        "fuse small kernels with torch.compile (mode='reduce-overhead' also uses CUDA graphs), capture the step "
        "in a CUDA graph, or batch more work per launch"
    )


def _no_tensor_cores(ses: Session) -> list[Finding]:
    k = ses.kernels
    # On a GPU without Tensor Cores (compute capability below 7.0) no kernel could use them.
    if not k.total_ns or k.no_tensor_cores_devices:
        return []
    share = k.matmul_conv_no_tc_us / k.total_us  # of the µs as shown, as the outputs always gave it
    th = ses.options.findings.no_tensor_cores_share
    if share < th:
        return []
    return [
        Finding(
            "no_tensor_cores",
            severity(share, th),
            f"matmul/conv kernels without Tensor Cores take {share:.1%} of kernel time ({k.matmul_conv_no_tc_us:,.0f} µs)",
            {
                "matmul_conv_no_tc_us": k.matmul_conv_no_tc_us,
                "matmul_conv_us": k.matmul_conv_us,
                "kernel_us": k.total_us,
                "share": share,
            },
            "use mixed precision (torch.autocast with bfloat16/float16) and, on Ampere or newer, allow TF32: "
            "torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True "
            "(or torch.set_float32_matmul_precision('high'))",
            Later(
                lambda: tuple(
                    k.table.filter(pl.col("matmul_conv") & ~pl.col("tensor_cores"))
                    .head(MAX_EVENTS)
                    .select("kernel", "calls", "total_us", "share")
                    .to_dicts()
                )
            ),
            at_stake_us=k.matmul_conv_no_tc_us,
        )
    ]


def _single_tensor(ses: Session) -> list[Finding]:
    t = ses.trace
    names = chain.collect(  # one query, run as the eager calls were
        pl.concat(
            [
                t.ops.lazy().select("name"),
                t.python.lazy().select("name"),
                t.gpu.lazy().filter(pl.col("kind") == "kernel").select("name"),
            ]
        ).filter(pl.col("name").fill_null("").str.contains(SINGLE_TENSOR_OPTIMIZER, literal=True))
    )
    th = ses.options.findings.single_tensor_min
    if names.height < max(th, 1):
        return []
    top = (
        names.group_by("name").agg(events=pl.len()).sort(["events", "name"], descending=[True, False]).head(MAX_EVENTS)
    )
    return [
        Finding(
            "single_tensor_optimizer",
            "medium",
            f"{names.height:,} events of a single-tensor optimizer ({top['name'][0]}): one small kernel per parameter",
            {"events": names.height},
            "use the multi-tensor implementations: torch.optim.AdamW(..., foreach=True) or fused=True",
            tuple(top.to_dicts()),
        )
    ]


def _low_gpu_utilization(ses: Session) -> list[Finding]:
    g = ses.gaps
    busy = g.steady_busy_share
    th = ses.options.findings.low_gpu_utilization
    if busy is None or busy >= th:
        return []
    causes = g.steady_idle_by_cause.head(3)
    top = ", ".join(f"{r['cause']} {r['share_of_idle']:.0%}" for r in causes.iter_rows(named=True))
    where = f"of the {g.steady_window_us / 1000:,.1f} ms " + (
        "of profiled steps" if g.window_kind == "steps" else "GPU span"
    )
    if g.startup_window_us:
        where += f" after {g.startup_window_us / 1000:,.1f} ms of start-up (set aside)"
    return [
        Finding(
            "low_gpu_utilization",
            severity(busy, th, below=True),
            f"the GPU was busy {busy:.1%} {where}" + (f"; idle by cause (share of idle): {top}" if top else ""),
            {
                "busy_share": busy,
                "window_us": g.steady_window_us,
                "startup_set_aside_us": g.startup_window_us,
                "idle_by_cause": {r["cause"]: r["idle_us"] for r in g.steady_idle_by_cause.iter_rows(named=True)},
            },
            "see `traceanalyzer gaps` for every idle gap and the op and Python line behind it",
            Later(lambda: tuple(g.culprits.filter(pl.col("phase") == "steady").head(MAX_EVENTS).to_dicts())),
            at_stake_us=g.steady_idle_us(),
        )
    ]


def _capture_caveats(ses: Session) -> list[Finding]:
    # The caveats read the steps' durations only (`Session.step_caveats`: those of `steps` when
    # computed): a rank's row does not pay for each step's GPU busy time (~5 ms of a DLRM rank).
    cav = list(ses.step_caveats)
    g = ses.gaps
    if g.has_gpu_work and g.window_us and g.startup_window_us * 2 >= g.window_us:
        cav.append(
            Caveat(
                "mostly_startup",
                f"start-up (one-time CUDA/cuDNN/cuBLAS initialisation, first launches) takes "
                f"{g.startup_window_us / 1000:,.1f} of the {g.window_us / 1000:,.1f} ms analysed: the steady state "
                "after it is short; profile after a warm-up",
                {"startup_us": g.startup_window_us, "window_us": g.window_us},
            )
        )
    if not cav:
        return []
    return [
        Finding(
            "capture_caveats",
            "info",
            "; ".join(c.message for c in cav),
            {"caveats": [c.kind for c in cav], "steps": Later(lambda: ses.steps.count)},
            "profile with torch.profiler.schedule(wait=1, warmup=1, active=5) and call prof.step() once per "
            "iteration, after fetching the batch",
            tuple({"kind": c.kind, **c.evidence} for c in cav),
        )
    ]


RULES = (
    Rule(
        "data_loading",
        "GPU idle while the CPU loaded data (gaps of cause data_loading), as a share of the window",
        ("data_loading_share",),
        DATA_ADVICE,
        _data_loading,
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
        ("min_steps", "outlier_factor"),
        "profile several steps with a schedule that skips warm-up",
        _capture_caveats,
    ),
)
