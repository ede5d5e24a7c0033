"""The gap causes: one record per cause, the single home of everything said about one.

`analyses.gap_causes` decides which cause a gap gets (its `when` chain is the classifier); every
other place reads this registry: the CPU layers `cpu_activity` builds and the order they win in,
the causes that name a culprit (`gap_culprits`, the culprits table), the causes a verdict may lead
with and how its detail is told (`verdict`), the one-time causes of the start-up (`startup`), the
timeline colours, the per-cause columns of ranks and diffs, the `rules` table and the cause
tables of README.md and docs/causes.md (`scripts/refresh_docs.py --causes` writes them).

Adding a cause: one `Cause` here, plus its branch in the classifier (CONTRIBUTING.md).
"""

from __future__ import annotations

from dataclasses import dataclass

# What a CPU thread can be doing, in priority order: each moment of a CPU interval goes to the
# first of these interval sets that covers it (`cpu_activity.CpuActivity` builds one set per
# name). Data loading first: whatever a DataLoader range does inside (a sync, a runtime call) is
# data loading to the person who reads the verdict. `launch` holds the launch calls and the ops
# that launch GPU work (their dispatch overhead); `cpu_op` the ops that launch nothing.
LAYERS = ("data_loading", "sync", "runtime_call", "launch", "cpu_op", "python")
# The time of a CPU interval no layer covers (`t_none` in the classified gaps).
UNCOVERED = "none"

# How a cause's culprit op is found (`gap_culprits.name_culprits`).
CULPRITS = ("blocking_call", "data_range", "busiest_op", "runtime_call", "launching_op", "python_line")
# How the verdict tells what the leading cause came down to (`verdict._detail`).
DETAILS = ("waited_on", "call", "culprit")


@dataclass(frozen=True)
class Cause:
    """One gap cause.

    - `meaning`: one line, what the cause means (the `rules` table and the README's table);
    - `explanation`: the longer account of docs/causes.md (flags, what is named);
    - `hint`: the advice when the cause leads; `hint_with_stack` replaces it for a trace
      captured with Python stacks, where the generic advice would be wrong;
    - `colour`: its shade on the timeline and the charts;
    - `culprit`: how its culprit is found (one of CULPRITS), None when nothing on the CPU made
      the gap (then it has no row in the culprits table);
    - `leads`: whether a verdict may lead with it;
    - `one_time`: an initialisation cause: long gaps of it at the start make the start-up;
    - `layers`: the CPU layers (LAYERS, or UNCOVERED) whose time counts for it when the
      thread's time decides;
    - `detail`: how the verdict tells what it came down to (one of DETAILS).
    """

    id: str
    meaning: str
    explanation: str
    hint: str
    colour: str
    culprit: str | None
    leads: bool = True
    one_time: bool = False
    layers: tuple[str, ...] = ()
    detail: str = "culprit"
    hint_with_stack: str | None = None

    def __post_init__(self) -> None:
        assert self.culprit is None or self.culprit in CULPRITS, self
        assert self.detail in DETAILS, self
        assert all(layer in LAYERS or layer == UNCOVERED for layer in self.layers), self


# The order is the order of every per-cause list (rules, rank and diff columns, legends).
REGISTRY: tuple[Cause, ...] = (
    Cause(
        "sync",
        meaning="the thread was blocked in a synchronising call as the GPU ran dry: the gap is its bubble",
        explanation="the thread was blocked in a synchronising call (`cudaStreamSynchronize`, `.item()`, a "
        "pageable copy): the gap is its bubble",
        hint="the CPU waited for the GPU; remove the synchronising call or move it out of the loop",
        colour="#d62728",
        culprit="blocking_call",
        layers=("sync",),
        detail="call",
    ),
    Cause(
        "data_loading",
        meaning="the thread was inside a data-loading range",
        explanation="the thread was inside a DataLoader range (`--data-loading-pattern`)",
        hint="the CPU was loading data; raise DataLoader num_workers, pin_memory, prefetch_factor",
        colour="#ff7f0e",
        culprit="data_range",
        layers=("data_loading",),
    ),
    Cause(
        "cpu_bound",
        meaning="the thread ran ops that launch nothing, or Python code with no op under it, also inside a "
        "compiled-code wrapper (`Torch-Compiled Region`) and when a launch ends the gap (the frame is named)",
        explanation="the thread ran ops that launched nothing, or Python code with no op under it, or a wrapper "
        "that is no op a user called (`Torch-Compiled Region`, `TorchDynamo Cache Lookup`: the dynamo/AOT/Inductor "
        "Python between its launches), also when a launch ends the gap: the op with the most self time, or the "
        "user's Python frame (Inductor's generated modules count as the framework's), is named",
        hint="the CPU was busy in ops or Python code that launched no GPU work; move that work off the critical path",
        colour="#8c564b",
        culprit="busiest_op",
        layers=("cpu_op", "python"),
    ),
    Cause(
        "runtime_call",
        meaning="the thread sat in a runtime call that neither launches nor synchronises (allocation, "
        "stream/event creation, module loading)",
        explanation="the thread sat in a runtime call that neither launches nor synchronises (stream/event "
        "creation, cudaMalloc/cudaFree, host allocation, module loading): named with its duration",
        hint="the CPU sat in a CUDA/HIP runtime call (allocation, stream or event creation, module loading); "
        "one-time at start-up, else allocator churn: reuse buffers, set PYTORCH_CUDA_ALLOC_CONF",
        colour="#dbdb8d",
        culprit="runtime_call",
        one_time=True,
        layers=("runtime_call",),
        detail="call",
    ),
    Cause(
        "slow_launch",
        meaning="the launch call itself, or the op launching it, took the time (over --slow-launch): first "
        "launch, lazy init, autotuning, JIT",
        explanation="the launch call itself took the time (at least `--slow-launch`, 1 ms, covering most of the "
        "gap), or the op around that call did (at least 1 ms of the gap and most of it: cuBLASLt heuristics on a "
        "first `aten::addmm`): a module's first launch, lazy initialisation, autotuning, JIT; a slow call is named "
        "with its duration. Many launches by many ops in a long gap stay `launch_latency`",
        hint="a launch call itself took the time (first launch of a module, lazy initialisation, JIT); "
        "warm up before profiling",
        colour="#f7b6d2",
        culprit="launching_op",
        one_time=True,
        detail="call",
    ),
    Cause(
        "launch_latency",
        meaning="the work was launched late: its launch call returned after the gap began, right after it "
        "began or while the thread only issued launches (in launch calls or the ops that launch)",
        explanation="the work was launched late: its launch call returned after the gap began, within "
        "`--launch-latency` (30 µs) of its start or while the thread did nothing but issue launches (in launch "
        "calls, or in the ops that launch: their dispatch overhead)",
        hint="kernels too short for their launch overhead; fuse them (torch.compile) or use CUDA graphs",
        colour="#e377c2",
        culprit="launching_op",
        layers=("launch",),
    ),
    Cause(
        "gpu_wait",
        meaning="queued work waited on another stream, an event, a collective's peers or a graph dependency",
        explanation="the work was queued (or launched and still not started) and waited on another stream, an "
        "event, a collective's peers or a graph dependency: `waited_on` says which; the headline names another "
        "thread that sat in a blocking call meanwhile",
        hint="work was queued but waited on another stream, an event, a collective or a graph dependency",
        colour="#bcbd22",
        culprit="launching_op",
        detail="waited_on",
    ),
    Cause(
        "kernel_spacing",
        meaning="the work was already queued and the gap is under --kernel-spacing: the device's own spacing",
        explanation="the work was already queued and the gap is under `--kernel-spacing` (10 µs): the device's "
        "own spacing between kernels, shown in tables but never a headline, culprit or finding",
        hint="the device's own spacing between kernels already queued: nothing to fix on the CPU",
        colour="#9edae5",
        culprit=None,
        leads=False,
    ),
    Cause(
        "untraced",
        meaning="no event at all covers the thread",
        explanation="no event at all covers the thread (advice to turn on `with_stack`/`record_function` only "
        "when the trace lacks them)",
        hint="no CPU event explains the gap; profile with with_stack=True and record_function ranges",
        hint_with_stack="no op, range or Python frame covers the thread then: it was outside the profiled code "
        "(native code, another library, or the profiler itself)",
        # Not a grey: CPU ops are grey, and an untraced gap must not read as CPU work.
        colour="#17becf",
        culprit="python_line",
        layers=(UNCOVERED,),
    ),
)

BY_ID: dict[str, Cause] = {c.id: c for c in REGISTRY}
CAUSES: tuple[str, ...] = tuple(BY_ID)
MEANINGS: dict[str, str] = {c.id: c.meaning for c in REGISTRY}
HINTS: dict[str, str] = {c.id: c.hint for c in REGISTRY}
COLOURS: dict[str, str] = {c.id: c.colour for c in REGISTRY}
NOT_A_HEADLINE: tuple[str, ...] = tuple(c.id for c in REGISTRY if not c.leads)
ONE_TIME: tuple[str, ...] = tuple(c.id for c in REGISTRY if c.one_time)
WITH_CULPRIT: tuple[str, ...] = tuple(c.id for c in REGISTRY if c.culprit is not None)
WAITED_ON: tuple[str, ...] = tuple(c.id for c in REGISTRY if c.detail == "waited_on")


def culprit_causes(how: str) -> list[str]:
    """The causes whose culprit is found `how` (one of CULPRITS)."""
    assert how in CULPRITS, how
    return [c.id for c in REGISTRY if c.culprit == how]


def by_layer_share() -> list[tuple[str, tuple[str, ...]]]:
    """(cause, layers) for the causes decided by the thread's time, in the order their layers win
    (LAYERS, the uncovered time last): the first of equal shares wins."""
    rank = {name: i for i, name in enumerate((*LAYERS, UNCOVERED))}
    have = [c for c in REGISTRY if c.layers]
    return [(c.id, c.layers) for c in sorted(have, key=lambda c: rank[c.layers[0]])]


def hint(cause: str, with_stack: bool = False) -> str:
    """The advice for a cause (the variant for traces with Python stacks where it has one)."""
    c = BY_ID[cause]
    return c.hint_with_stack if with_stack and c.hint_with_stack else c.hint


def markdown_table(long: bool) -> str:
    """The cause table of docs/causes.md (`long`: the explanations) or README.md (the meanings)."""
    rows = ["| cause | the GPU ran dry because |", "|---|---|"]
    rows += [f"| `{c.id}` | {c.explanation if long else c.meaning} |" for c in REGISTRY]
    return "\n".join(rows)


def table_marker(long: bool) -> tuple[str, str]:
    """The lines around a generated cause table in README.md (short) and docs/causes.md (long)."""
    kind = "long" if long else "short"
    return (
        f"<!-- cause table ({kind}): generated from traceanalyzer/causes.py by scripts/refresh_docs.py --causes -->",
        "<!-- end of cause table -->",
    )
