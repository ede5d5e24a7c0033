"""Analysis options: one frozen dataclass per analysis, a documented default per field.

The CLI flags and the JSON `thresholds` are both generated from these fields (see
`traceanalyzer.cli_options`), so the two cannot drift apart. No click import here: the
library's import path stays free of the CLI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DATA_LOADING_PATTERN = r"(?i)enumerate\(DataLoader\)|DataLoaderIter|DataLoader.*__next__|data[_ ]?load"
SYNC_API_PATTERN = (
    r"^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize$|^(cuda|hip)Memcpy(2D|3D)?$|^hipMemcpyWithStream$"
    r"|^cuCtxSynchronize$|^cuStreamSynchronize$|^cuEventSynchronize$|^cuMemcpy(DtoH|HtoD)?(_v2)?$"
)


def opt(default: Any, help: str, *, flag: str | None = None) -> Any:
    """A dataclass field carrying its CLI help text (and optionally its flag name)."""
    return field(default=default, metadata={"help": help, "flag": flag})


@dataclass(frozen=True)
class GapOptions:
    min_gap_us: float = opt(100.0, "list GPU idle gaps of at least this many µs", flag="--min-gap")
    launch_latency_us: float = opt(
        30.0,
        "a gap counts as launch latency when the next kernel started within this many µs of its "
        "launch call returning (queued before the gap) or was launched this soon after the gap began",
        flag="--launch-latency",
    )
    data_loading_pattern: str = opt(
        DATA_LOADING_PATTERN, "regular expression naming data-loading ranges (DataLoader __next__ ...)"
    )


def thresholds(options: Any) -> dict[str, Any]:
    """The options as the JSON `thresholds` object: field name -> value."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def option_fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


# --- steps, stages, ops, kernels, findings (the overview) ---

BACKWARD_PATTERN = r"autograd::engine::evaluate_function|Backward"
OPTIMIZER_PATTERN = r"Optimizer\.(step|zero_grad)|optimizer_step"
TB_DATALOADER_PATTERN = r"^enumerate\(DataLoader\)#.*__next__"
SHORT_KERNEL_US = 10.0


@dataclass(frozen=True)
class StepOptions:
    outlier_factor: float = opt(1.5, "a step is an outlier when it lasts longer than this many times the median step")
    min_steps: int = opt(3, "fewer profiled steps than this are too few to trust")


@dataclass(frozen=True)
class StageOptions:
    data_loading_pattern: str = opt(
        DATA_LOADING_PATTERN, "regular expression naming data-loading ranges (searched in the op chain)"
    )
    backward_pattern: str = opt(
        BACKWARD_PATTERN, "regular expression naming backward (autograd) ops, searched in the op chain"
    )
    optimizer_pattern: str = opt(
        OPTIMIZER_PATTERN, "regular expression naming optimizer ranges, searched in the op chain"
    )


@dataclass(frozen=True)
class OpsOptions:
    group_by: str = opt(
        "name", "group ops by: name, shapes (name + input shapes) or module (innermost nn.Module range)"
    )


@dataclass(frozen=True)
class KernelOptions:
    short_kernel_us: float = opt(
        SHORT_KERNEL_US, "kernels shorter than this count as short (the launch-bound census)", flag="--short-kernel"
    )


@dataclass(frozen=True)
class FindingOptions:
    data_loading_share: float = opt(0.10, "data_loading fires when data loading takes at least this share of step time")
    sync_stall_share: float = opt(
        0.05,
        "sync_stalls fires when the GPU sits idle while a CPU thread waits in a synchronising call for at least this share of the window",
    )
    pageable_copy_bytes: int = opt(
        1 << 20, "pageable_copies fires when copies to/from pageable host memory move at least this many bytes"
    )
    launch_bound_short_share: float = opt(
        0.5,
        "launch_bound fires when at least this share of (non-graph) kernels are short and GPU busy is below low_gpu_utilization",
    )
    launch_bound_min_kernels: int = opt(
        100, "launch_bound needs at least this many kernels outside CUDA graphs (a smaller census says nothing)"
    )
    launch_latency_share: float = opt(
        0.05, "launch_bound also needs GPU idle from launch latency (see gaps) of at least this share of the window"
    )
    no_tensor_cores_share: float = opt(
        0.2,
        "no_tensor_cores fires when matmul/conv kernels without Tensor Cores take at least this share of kernel time",
    )
    single_tensor_min: int = opt(
        1, "single_tensor_optimizer fires at this many `_single_tensor_` events (ops, frames, kernels)"
    )
    low_gpu_utilization: float = opt(0.6, "low_gpu_utilization fires when GPU busy share over the steps is below this")


@dataclass(frozen=True)
class MemoryOptions:
    near_capacity_share: float = opt(
        0.9,
        "flag a device whose reserved (else allocated) memory reached this share of its totalGlobalMem",
        flag="--near-capacity",
    )
    growth_mb_per_step: float = opt(
        1.0,
        "flag steady growth when allocated memory rose in every step by this many MB on average",
        flag="--growth-mb",
    )
    min_growth_steps: int = opt(3, "steps needed before steady growth is judged", flag="--min-growth-steps")
    dominant_op_share: float = opt(
        0.5,
        "flag one op holding at least this share of the memory allocated in the trace and alive at the peak",
        flag="--dominant-op-share",
    )
    min_finding_mb: float = opt(
        16.0, "ignore growth and dominant ops smaller than this many MB in findings", flag="--min-finding-mb"
    )
    timeline_points: int = opt(200, "points in the allocated/reserved timeline (JSON output)", flag="--timeline-points")


@dataclass(frozen=True)
class DiffOptions:
    min_change_pct: float = opt(
        2.0,
        "a step-time change below this many percent is within noise even when steps do not vary",
        flag="--min-change",
    )
    data_loading_pattern: str = opt(
        DATA_LOADING_PATTERN, "regular expression naming data-loading ranges (DataLoader __next__ ...)"
    )


@dataclass(frozen=True)
class CopyOptions:
    small_copy_bytes: int = opt(
        65536, "a host-device copy of fewer bytes than this counts as small (for the 'many small copies' finding)"
    )
    many_small_per_step: int = opt(
        20, "report 'many small copies' when a step issues at least this many small copies", flag="--many-small"
    )
    min_finding_us: float = opt(
        100.0,
        "report a finding only when the time it costs (blocked, exposed or copy time) reaches this many µs",
        flag="--min-finding",
    )


@dataclass(frozen=True)
class SyncOptions:
    min_blocked_us: float = opt(0.0, "list only syncs that held the CPU at least this many µs", flag="--min-blocked")
    min_finding_us: float = opt(
        100.0,
        "report a site as a finding only when its blocked plus bubble time per step reaches this many µs",
        flag="--min-finding",
    )
