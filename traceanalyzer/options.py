"""Analysis options: one frozen dataclass per analysis, composed into one `Options` bundle.

Every field has a documented default and a name that is unique across the bundle, so that the
CLI flags and the JSON `thresholds` (both generated from these fields, see
`traceanalyzer.cli.options`) are flat, cannot collide, and cannot drift apart. A value that
several analyses read (the DataLoader pattern, say) lives in one group only (`PatternOptions`).
No click import here: the library's import path stays free of the CLI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from traceanalyzer import patterns
from traceanalyzer.job_options import EXECUTION_FIELDS, DiffOptions, RankOptions  # noqa: F401 - the groups of the bundle
from traceanalyzer.option_field import opt


@dataclass(frozen=True)
class PatternOptions:
    """Name patterns more than one analysis reads (regular expressions, polars syntax)."""

    data_loading_pattern: str = opt(
        patterns.DATA_LOADING, "regular expression naming data-loading ranges (DataLoader __next__ ...)"
    )
    backward_pattern: str = opt(
        patterns.BACKWARD, "regular expression naming backward (autograd) ops, searched in the op chain"
    )
    optimizer_pattern: str = opt(
        patterns.OPTIMIZER, "regular expression naming optimizer ranges, searched in the op chain"
    )
    collective_pattern: str = opt(
        patterns.COLLECTIVE, "regular expression naming collective communication kernels (NCCL/RCCL)"
    )


@dataclass(frozen=True)
class GapOptions:
    """Options of the gaps analysis (and of the gap classification syncs and the rules read)."""

    min_gap_us: float = opt(100.0, "list GPU idle gaps of at least this many µs", flag="--min-gap")
    launch_latency_us: float = opt(
        30.0,
        "a gap counts as launch latency when its work was launched within this many µs of the gap's start "
        "(or the thread spent the gap issuing launches), and started no later than this after the launch returned",
        flag="--launch-latency",
    )
    kernel_spacing_us: float = opt(
        10.0,
        "a gap shorter than this before work already queued is the device's own spacing between kernels "
        "(kernel_spacing: shown, never a headline or finding)",
        flag="--kernel-spacing",
    )
    slow_launch_us: float = opt(
        1000.0,
        "a launch call lasting at least this long that covers most of a gap is a slow_launch",
        flag="--slow-launch",
    )
    startup_gap_us: float = opt(
        1000.0,
        "runtime_call and slow_launch gaps at least this long at the start of the trace are start-up, set aside "
        "from the steady-state verdict",
        flag="--startup-gap",
    )


@dataclass(frozen=True)
class SyncOptions:
    """Options of the syncs analysis and its rules."""

    min_blocked_us: float = opt(0.0, "list only syncs that held the CPU at least this many µs", flag="--min-blocked")
    sync_min_finding_us: float = opt(
        100.0,
        "report a sync site as a finding only when the GPU idle it caused (bubbles + idle while blocked) reaches this many µs per step",
        flag="--sync-min-finding",
        aliases=("--min-finding",),
    )
    sync_stall_share: float = opt(
        0.05, "sync_stalls fires when GPU idle caused by syncs (sync_idle_us) reaches this share of the window"
    )


@dataclass(frozen=True)
class CopyOptions:
    """Options of the copies analysis and its rules."""

    small_copy_bytes: int = opt(
        65536, "a host-device copy of fewer bytes than this counts as small (for the 'many small copies' finding)"
    )
    many_small_per_step: int = opt(
        20, "report 'many small copies' when a step issues at least this many small copies", flag="--many-small"
    )
    copy_min_finding_us: float = opt(
        100.0,
        "report a copy finding only when the time it costs (blocked, exposed or copy time) reaches this many µs",
        flag="--copy-min-finding",
        aliases=("--min-finding",),
    )
    pageable_copy_bytes: int = opt(
        1 << 20,
        "pageable_copies also fires when copies to/from pageable host memory move at least this many bytes",
    )
    dtod_copy_share: float = opt(
        0.05, "dtod_copies fires when device-to-device copies take this share of GPU busy time"
    )


@dataclass(frozen=True)
class StepOptions:
    """Options of the steps: where they come from, warm-up, outliers, too few steps."""

    steps: str = opt(
        "auto",
        "where steps come from: auto, profiler, range:REGEX, python:REGEX or none (see analyses.step_detection)",
        flag="--steps",
    )
    warmup_steps: str = opt(
        "exclude",
        "warm-up steps (slow steps at the start) in step averages: exclude or include",
        choices=("exclude", "include"),
    )
    outlier_factor: float = opt(1.5, "a step is an outlier when it lasts longer than this many times the median step")
    min_steps: int = opt(3, "fewer profiled steps than this are too few to trust")


@dataclass(frozen=True)
class StageOptions:
    """Options of the stage breakdown: the view and a stage mapping."""

    stage_view: str = opt(
        "pipeline",
        "stage breakdown: pipeline stages, or tensorboard (the TensorBoard plugin's categories)",
        flag="--view",
        choices=("pipeline", "tensorboard"),
    )
    # Set from `--stages FILE` (see `analyses.stages.read_mapping`): (stage, regex) in priority order.
    stage_mapping: tuple[tuple[str, str], ...] = opt(
        (), "stage = regular expression rules, in priority order", cli=False
    )


@dataclass(frozen=True)
class OpsOptions:
    """Options of the ops table."""

    group_by: str = opt(
        "name",
        "group ops by: name, shapes (name + input shapes) or module (innermost nn.Module range)",
        choices=("name", "shapes", "module"),
    )


@dataclass(frozen=True)
class KernelOptions:
    """Options of the kernels table and its short-kernel census."""

    short_kernel_us: float = opt(
        10.0, "kernels shorter than this count as short (the launch-bound census)", flag="--short-kernel"
    )


@dataclass(frozen=True)
class MemoryOptions:
    """Options of the memory analysis and its rules."""

    near_capacity_share: float = opt(
        0.9,
        "flag a device whose reserved (else allocated) memory reached this share of its totalGlobalMem",
        flag="--near-capacity",
    )
    growth_mb_per_step: float = opt(
        1.0,
        "flag steady growth when allocated memory rose in every step by this many MiB on average",
        flag="--growth-mb",
    )
    min_growth_steps: int = opt(3, "steps needed before steady growth is judged", flag="--min-growth-steps")
    dominant_op_share: float = opt(
        0.5,
        "flag one op holding at least this share of the memory allocated in the trace and alive at the peak",
        flag="--dominant-op-share",
    )
    min_finding_mb: float = opt(
        16.0, "ignore growth and dominant ops smaller than this many MiB in findings", flag="--min-finding-mb"
    )
    timeline_points: int = opt(
        1000,
        "buckets of the allocated/reserved timeline (JSON and picture): each keeps its first, last, lowest and highest event",
        flag="--timeline-points",
    )
    allocator_churn_share: float = opt(
        0.10, "allocator_churn fires when steady-state device malloc/free leave the GPU idle this share of its idle"
    )


@dataclass(frozen=True)
class RooflineOptions:
    """Options of the roofline analysis and of its finding."""

    # 0: the peaks table's figure for the device's name (analyses.peaks)
    peak_tflops: float = opt(0.0, "compute roof (TFLOP/s) for every precision, in place of the peaks table")
    peak_gbps: float = opt(0.0, "memory roof (GB/s), in place of the peaks table")
    far_from_roofline_share: float = opt(
        0.3, "far_from_roofline: an op/shape under this share of its roof", flag="--roofline-share"
    )
    roofline_min_gpu_share: float = opt(
        0.05, "far_from_roofline: only op/shapes with this share of GPU time", flag="--roofline-min-gpu"
    )


@dataclass(frozen=True)
class FindingOptions:
    """Thresholds of the rules that read more than one analysis (see `analyses.findings`)."""

    data_loading_share: float = opt(0.10, "data_loading fires when data loading takes at least this share of step time")
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
    low_gpu_utilization: float = opt(
        0.6, "low_gpu_utilization fires when GPU busy share over the steps (start-up set aside) is below this"
    )


@dataclass(frozen=True)
class MaterialityOptions:
    """Which findings are shown and how severe, from the GPU time at stake (see `findings.engine`)."""

    min_finding_share: float = opt(
        0.01,
        "findings whose GPU time at stake is below this share of the analysed window are not shown (0: show all)",
        flag="--min-finding-share",
    )
    high_finding_share: float = opt(0.05, "a finding is high only when its GPU time at stake reaches this share")


@dataclass(frozen=True)
class HealthOptions:
    """Thresholds of the trace-health checks (see `analyses.health`)."""

    missing_gpu_share: float = opt(
        0.05, "missing_gpu_events fires when this share of launch calls has no GPU activity in the trace"
    )
    clock_skew_us: float = opt(1000.0, "clock_skew fires on GPU activity starting this long before its own launch call")
    stream_overlap_share: float = opt(0.01, "stream_overlap fires when this share of kernels overlap on one stream")
    unlinked_gpu_share: float = opt(0.10, "unlinked_gpu_work fires when this share of GPU work links to no launch call")
    sampled_density: float = opt(
        0.1, "sampled fires when CPU op external ids are sparser than this (a complete capture is near 1)"
    )
    sampled_min_events: int = opt(1000, "the sampled check needs at least this many CPU ops")


@dataclass(frozen=True)
class PathOptions:
    """Options of the dependency graph behind the critical path and the what-if replay."""

    thread_wait_us: float = opt(
        50.0,
        "a gap of the main thread (no op, no runtime call) at least this long while another launching thread "
        "works is a wait on that thread (the autograd engine's backward): the replay joins the two threads there",
        flag="--thread-wait",
    )


@dataclass(frozen=True)
class Options:
    """Every option of every analysis, one group per analysis. `Session` hands the one bundle to
    every analysis, so one trace is read with one set of thresholds everywhere."""

    patterns: PatternOptions = field(default_factory=PatternOptions)
    gaps: GapOptions = field(default_factory=GapOptions)
    syncs: SyncOptions = field(default_factory=SyncOptions)
    copies: CopyOptions = field(default_factory=CopyOptions)
    steps: StepOptions = field(default_factory=StepOptions)
    stages: StageOptions = field(default_factory=StageOptions)
    ops: OpsOptions = field(default_factory=OpsOptions)
    kernels: KernelOptions = field(default_factory=KernelOptions)
    memory: MemoryOptions = field(default_factory=MemoryOptions)
    roofline: RooflineOptions = field(default_factory=RooflineOptions)
    findings: FindingOptions = field(default_factory=FindingOptions)
    materiality: MaterialityOptions = field(default_factory=MaterialityOptions)
    health: HealthOptions = field(default_factory=HealthOptions)
    path: PathOptions = field(default_factory=PathOptions)
    diff: DiffOptions = field(default_factory=DiffOptions)
    ranks: RankOptions = field(default_factory=RankOptions)

    @classmethod
    def of(cls, options: Any = None) -> Options:
        """The bundle for `options`: itself, the defaults for None, or the defaults with one
        group replaced when given that group's dataclass (`GapOptions(min_gap_us=5)`)."""
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        for name, group in GROUPS.items():
            if isinstance(options, group):
                return dataclasses.replace(cls(), **{name: options})
        raise TypeError(f"not an options object: {options!r}")

    def value(self, name: str) -> Any:
        """A field by its (unique) name, whatever its group."""
        return getattr(getattr(self, GROUP_OF[name]), name)

    def with_values(self, values: dict[str, Any]) -> Options:
        """A copy with fields replaced by name (`{"min_gap_us": 5, "stage_view": "tensorboard"}`)."""
        by_group: dict[str, dict[str, Any]] = {}
        for name, v in values.items():
            if name not in GROUP_OF:
                raise KeyError(f"no option named {name!r}")
            by_group.setdefault(GROUP_OF[name], {})[name] = v
        return dataclasses.replace(
            self, **{g: dataclasses.replace(getattr(self, g), **vals) for g, vals in by_group.items()}
        )

    def thresholds(self, groups: tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
        """The JSON `thresholds` object: field name -> value, for `groups` (default: all)."""
        out: dict[str, Any] = {}
        for g in groups or GROUPS:
            out.update(thresholds(getattr(self, g)))
        return out


def thresholds(options: Any) -> dict[str, Any]:
    """One group's options as a JSON object: field name -> value (mappings as tables)."""
    out = {}
    for f in dataclasses.fields(options):
        v = getattr(options, f.name)
        out[f.name] = {k: p for k, p in v} if f.name == "stage_mapping" else v
    return out


# The groups by name, in the bundle's order: the one list of them is the Options fields.
GROUPS: dict[str, type] = {f.name: f.default_factory for f in dataclasses.fields(Options)}
GROUP_OF: dict[str, str] = {f.name: g for g, cls in GROUPS.items() for f in dataclasses.fields(cls)}
