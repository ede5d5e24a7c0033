"""What each rule's fix amounts to as a what-if scenario (`analyses.whatif`), with how far the
replay can be trusted for it, or why its saving cannot be estimated from one trace.

`high`: the scenario removes exactly the time the finding measures (the CPU time of a cause);
`medium`: it removes time by op name (every instance of that op, not only the site); `low`: it
assumes a speed-up the trace cannot show, or removes all of an overhead a fix only reduces.
Any estimate is `low` when the replay of the capture itself is off by over 2 % (engine).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.analyses.scenario import Scenario

if TYPE_CHECKING:
    from traceanalyzer.findings.engine import Finding
    from traceanalyzer.session import Session

# Tensor Cores run matmul and convolution at least twice as fast as the FP32 pipeline (TF32 on
# Ampere, FP16/BF16 on Volta and newer); the real gain depends on shapes, so confidence is low.
TENSOR_CORE_SPEEDUP = 2.0
MAX_KERNEL_NAMES = 20  # the longest non-Tensor-Core kernels sped up in that scenario


def _without(cause: str, confidence: str):
    def spec(ses: Session, f: Finding) -> tuple[Scenario, str]:
        return Scenario(without=(cause,)), confidence

    spec.__doc__ = f"replay without the CPU time of {cause} ({confidence} confidence)"
    return spec


def _site(ses: Session, f: Finding) -> tuple[Scenario, str] | str:
    """replay with the site's blocking calls no longer waiting for the GPU (medium: the copy stays)"""
    e = f.evidence
    same = [pl.col(c).eq_missing(e.get(c)) for c in ("op", "range", "python_frame")]
    ids = ses.syncs.sites.filter(pl.col("kind") == f.rule.removesuffix("_sync"), *same)["sync_id"]
    if ids.is_empty():
        return "no blocking call found at this site"
    return Scenario(unsync=tuple(sorted(ids.to_list())), label=f"no sync waits at {e.get('site')}"), "medium"


def _tensor_cores(ses: Session, f: Finding) -> tuple[Scenario, str] | str:
    """replay with the longest matmul/conv kernels without Tensor Cores 2x faster (low: an assumed factor)"""
    names = (
        ses.kernels.table_ns.filter(pl.col("matmul_conv") & ~pl.col("tensor_cores"))
        .sort("total_ns", descending=True)
        .head(MAX_KERNEL_NAMES)["kernel"]
        .to_list()
    )
    if not names:
        return "no matmul/conv kernel without Tensor Cores to speed up"
    pattern = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    label = f"the {len(names)} longest matmul/conv kernels without Tensor Cores {TENSOR_CORE_SPEEDUP:g}x faster"
    return Scenario(speedup=((pattern, TENSOR_CORE_SPEEDUP),), label=label), "low"


def _launch_overhead(ses: Session, f: Finding) -> tuple[Scenario, str]:
    """replay without launch overhead (low: an upper bound; CUDA graphs and fusion remove most of it, not all)"""
    return Scenario(without=("launch_latency",), label="without launch overhead (an upper bound)"), "low"


SCENARIOS = {
    "data_loading": _without("data_loading", "high"),
    "sync_stalls": _without("sync", "high"),
    "implicit_sync": _site,
    "explicit_sync": _site,
    "launch_bound": _launch_overhead,
    "no_tensor_cores": _tensor_cores,
    "pageable_copies": "pinned memory changes a copy's bandwidth and makes it asynchronous; the trace measures "
    "neither (see the sync findings for what its blocking costs)",
    "many_small_copies": "batching copies changes how many there are; the trace cannot say how long the batch takes",
    "device_to_host_in_step": "the value a device-to-host copy brings back is used; implicit_sync says what its "
    "sync costs",
    "copies_not_overlapped": "a copy stream changes stream order; the replay keeps each stream's order",
    "single_tensor_optimizer": "a fused or foreach optimizer runs different kernels; the trace does not time them",
    "low_gpu_utilization": "a symptom, not a fix: the other findings estimate what would raise it",
    "capture_caveats": "a note on how the trace was captured, not a cost",
    "memory_near_capacity": "memory, not time",
    "memory_growth": "memory, not time",
    "memory_dominant_op": "memory, not time",
    "straggler_rank": "needs every rank: the replay sees one trace",
    "exposed_communication": "needs every rank: the replay sees one trace",
}
