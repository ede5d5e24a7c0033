"""The one data model: typed tables of a trace, its metadata, and the links between them
(built from the decoded tables by `load.build.build_trace`).

All times are int64 nanoseconds on the trace's own clock (`*_ns`); `meta.origin_ns` is the
trace start, and outputs show microseconds relative to it (`units`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer import chain
from traceanalyzer.units import point_ms

GPU_KINDS = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
}

# The closed sets of `ops.kind` and `runtime.api`, as enums: one byte a row where a string
# column takes 16 (a view): ops.kind 15 -> 1 MB at 1 GB. Every reader compares them with a plain
# string (`pl.col("kind") == "cpu_op"`), which an enum column answers alike, or reads strings;
# one that mixes in a value outside the set casts to String first.
OP_KINDS = pl.Enum(["cpu_op", "user_annotation"])
RUNTIME_APIS = pl.Enum(["runtime", "driver"])
GPU_ACTIVITY_KINDS = pl.Enum(["kernel", "memcpy", "memset"])  # gpu.kind: 16 -> 1 byte a row (4.5 MB at 1 GB)


# Decoded fields no module reads, dropped once what they say is kept elsewhere: `cat` (`kind` /
# `api`), the 2021 `Call stack` (-> `python_frame`, `TraceMeta.with_stack`), the ops' autograd
# `Sequence number` / `Fwd thread id` (`flows` link forward to backward), runtime `cbid`, the
# copies' written bandwidth (`analyses.copies` takes bytes / duration), the Python frames' own
# `Python id` / `Python parent id` (their nesting is `depth` / `parent_id`, from the times, as for
# ops: 16 bytes a frame, and with_stack traces hold several frames per op). ~16 MB of a 311 MB trace.
DROPPED = {
    "op": ("cat", "call_stack", "sequence_number", "fwd_thread_id"),
    "python": ("cat", "python_id", "python_parent_id"),
    "runtime": ("cat", "cbid"),
    "gpu": ("cat", "bandwidth_gbps"),
}


SMALL_TABLE_ROWS = 1 << 16  # up to this many rows `one_valued` reads every integer column's range at once


def one_valued(df: pl.DataFrame) -> pl.DataFrame:
    """The table with every integer column that holds one value in all its rows (no null) kept
    as that value once: a polars scalar column, 0 bytes a row in place of 8 (ops.pid,
    runtime.pid, gpu.pid and gpu.device of a one-process, one-GPU trace: 24 MB at 1 GB). The
    values read the same everywhere; filters, sorts and joins keep it a scalar, and a reader
    that takes the column as a Series (`df["pid"]`) gets a transient copy, never kept in the
    table. The Trace's tables are stored so (`build_trace`, and the cache when it reads one back)."""
    ints = [c for c, dtype in df.schema.items() if dtype.is_integer()]
    if not df.height or not ints:
        return df
    if df.height <= SMALL_TABLE_ROWS:
        # Every column's range read directly, by Series calls: a pass over a few small columns
        # costs less than a second query, and these calls less than one (~20 µs against ~90 for
        # six columns of 2,000 rows; 8 tables a 0.9 MB DLRM rank, 2026-12-01).
        cols = [df.get_column(c) for c in ints]
        same = [(s.name, s.min()) for s in cols if s.null_count() == 0 and s.min() == s.max()]
        return df.with_columns(pl.lit(v, dtype=df.schema[c]).alias(c) for c, v in same) if same else df
    # First the columns whose first and last rows agree, without nulls (no pass over the rows):
    # times and ids drop out here, and only the few left are scanned for their min and max.
    ends = df.select(
        *(pl.col(c).null_count().alias(f"n{i}") for i, c in enumerate(ints)),
        *(pl.col(c).first().alias(f"a{i}") for i, c in enumerate(ints)),
        *(pl.col(c).last().alias(f"z{i}") for i, c in enumerate(ints)),
    ).row(0)
    k = len(ints)
    maybe = [c for i, c in enumerate(ints) if ends[i] == 0 and ends[k + i] == ends[2 * k + i]]
    if not maybe:
        return df
    lo_hi = df.select(
        *(pl.col(c).min().alias(f"lo{c}") for c in maybe), *(pl.col(c).max().alias(f"hi{c}") for c in maybe)
    )
    stats = lo_hi.row(0)
    same = [(c, stats[i]) for i, c in enumerate(maybe) if stats[i] == stats[len(maybe) + i]]
    if not same:
        return df
    return df.with_columns(pl.lit(v, dtype=df.schema[c]).alias(c) for c, v in same)


@dataclass(frozen=True)
class Device:
    """One GPU as the trace's `deviceProperties` describe it."""

    id: int
    name: str
    total_memory_bytes: int | None
    sm_count: int | None
    compute_capability: str | None


@dataclass(frozen=True)
class TraceMeta:
    """What the trace says about itself: schema, rank, devices, span, capture settings."""

    path: str
    schema_version: Any
    rank: int | None
    world_size: int | None
    backend: str | None
    origin_ns: int  # trace start: the earliest timed event
    end_ns: int
    devices: tuple[Device, ...]
    with_stack: bool  # python_function events or 2021 `Call stack` args present
    profile_memory: bool
    raw: dict[str, Any] = field(repr=False, default_factory=dict)  # may hold secrets: never echo


@dataclass(frozen=True, eq=False, repr=False)
class Trace:
    """Tables (all polars; the decoded fields in `DROPPED` are not kept):

    - `ops`: CPU ops and record_function ranges (cat cpu_op / Operator / user_annotation):
      op_id, kind (`OP_KINDS`: cpu_op|user_annotation), name, pid, tid, ts_ns, dur_ns, end_ns,
      depth, parent_id, external_id, input_dims, input_type and concrete_inputs (compact JSON
      text; the scalar arguments record_shapes recorded, "" for tensors), python_frame (user
      code line).
    - `python`: Python frames (with_stack): frame_id, name, pid, tid, ts_ns, dur_ns, end_ns,
      depth, parent_id, is_user.
    - `runtime`: CUDA/HIP runtime and driver calls: runtime_id, api (`RUNTIME_APIS`:
      runtime|driver), name, pid, tid, ts_ns, dur_ns, end_ns, correlation, external_id, op_id
      (the innermost op around the call).
    - `gpu`: GPU activities: gpu_id, kind (`GPU_ACTIVITY_KINDS`: kernel|memcpy|memset), name,
      pid, tid, device, stream, ts_ns, dur_ns, end_ns, correlation, external_id, bytes, grid and
      block (lists of Int32; Int64 where a value does not fit), graph_id, and from the launching
      runtime call (the first of its correlation): runtime_id, op_id, launch_ts_ns,
      launch_end_ns, launch_api, launch_pid, launch_tid.
    - `sync_markers`: `cuda_sync` events (Stream/Event/Context Sync, Stream Wait Event): not work.
    - `gpu_annotations`, `memory` ([memory] allocator events), `flows` (forward -> backward
      arrows, cat fwdbwd; launch -> kernel arrows are only counted in `event_counts`: the
      `correlation` of runtime calls and kernels gives the same links), `thread_names`.
    - `steps`: step, name, pid, tid, cpu_start_ns, cpu_end_ns, start_ns, end_ns (GPU-extended).

    Row order: ops, python, runtime and gpu are in their id order (the id is the row number).
    Storage (same values, fewer bytes): the row ids (op_id, frame_id, runtime_id, gpu_id) and
    the links to them (parent_id, op_id, runtime_id of the other tables, steps.op_id) are Int32;
    `depth` is Int16 where it fits, an integer column with
    one value in every row is held once (`one_valued`), and gpu device / stream that equal pid /
    tid in every row share their buffer.
    """

    meta: TraceMeta
    ops: pl.DataFrame
    python: pl.DataFrame
    runtime: pl.DataFrame
    gpu: pl.DataFrame
    sync_markers: pl.DataFrame
    gpu_annotations: pl.DataFrame
    memory: pl.DataFrame
    flows: pl.DataFrame
    thread_names: pl.DataFrame
    steps: pl.DataFrame
    event_counts: dict[tuple[Any, Any], int]
    warnings: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        """The path the trace was read from."""
        return self.meta.path

    @property
    def has_gpu_work(self) -> bool:
        """Whether the trace holds any kernel, memcpy or memset."""
        return self.gpu.height > 0

    @property
    def cut_short(self) -> str | None:
        """The loader's warning when the file was truncated or damaged and read only up to where
        it breaks (so what is missing may be any kind of event), else None."""
        return next((w for w in self.warnings if "truncated" in w or "damaged" in w or "could not be read" in w), None)

    @property
    def gpu_cut_off(self) -> bool:
        """No GPU activity was read from a file cut short: not a CPU-only trace, an unknown one."""
        return not self.has_gpu_work and self.cut_short is not None

    def derived(self, key: str, build: Callable[[], Any]) -> Any:
        """A value computed from this trace's own tables, once per Trace (`build()` on the first
        ask): the tables never change, so it never goes stale, and `dataclasses.replace` makes a
        Trace without it. For what several analyses read in part (a small trace's op context),
        where the Session cannot hand it down without every analysis taking it as an argument."""
        memo = self.__dict__.setdefault("_derived", {})  # frozen forbids setattr, not the dict
        if key not in memo:
            memo[key] = build()
        return memo[key]

    def _summary(self) -> list[tuple[str, str]]:
        m = self.meta
        devices = ", ".join(sorted({d.name for d in m.devices})) or "none listed"
        return [
            ("path", self.path),
            ("span", f"{point_ms(m.end_ns, m.origin_ns):,.1f} ms"),
            ("steps", f"{self.steps.height:,}"),
            ("ops", f"{self.ops.height:,}"),
            ("gpu", f"{self.gpu.height:,}"),
            ("runtime", f"{self.runtime.height:,}"),
            ("memory", f"{self.memory.height:,}"),
            ("devices", devices),
            ("rank", "-" if m.rank is None else f"{m.rank} of {m.world_size}"),
            ("warnings", f"{len(self.warnings)}"),
        ]

    def __repr__(self) -> str:
        rows = self._summary()
        return f"Trace({rows[0][1]!r}, " + ", ".join(f"{k}={v}" for k, v in rows[1:]) + ")"

    def _repr_html_(self) -> str:
        from traceanalyzer.reprs import html_table

        return html_table("Trace", self._summary())


def extend_steps(ranges: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Step ranges (step, name, pid, tid, cpu_start_ns, cpu_end_ns, op_id) extended to the GPU
    side as the TensorBoard plugin defines them: a step runs from the later of its start and
    the previous step's end to the later of its end and the end of the last GPU activity whose
    runtime call started inside it. The one definition of a step, whatever found its ranges."""
    steps = ranges.sort("cpu_start_ns")
    if steps.is_empty():
        return steps.with_columns(
            start_ns=pl.col("cpu_start_ns"), end_ns=pl.col("cpu_end_ns"), gpu_end_ns=pl.col("cpu_end_ns")
        )
    # narrow first: filtering the whole GPU table copied every column; each chain of steps is one
    # polars query (`chain.collect`), run as the eager calls were
    launched = (
        gpu.lazy().select("launch_ts_ns", "end_ns").filter(pl.col("launch_ts_ns").is_not_null()).sort("launch_ts_ns")
    )
    # The step a launch belongs to: the latest step starting at or before it, if it is inside.
    last_end = (
        launched.join_asof(
            steps.lazy().select("step", "cpu_start_ns", "cpu_end_ns").sort("cpu_start_ns"),
            left_on="launch_ts_ns",
            right_on="cpu_start_ns",
            strategy="backward",
        )
        .filter(pl.col("launch_ts_ns") < pl.col("cpu_end_ns"))
        .group_by("step")
        .agg(gpu_end_ns=pl.col("end_ns").max())
    )
    steps = (
        steps.lazy()
        .join(last_end, on="step", how="left")
        .with_columns(end_ns=pl.max_horizontal("cpu_end_ns", "gpu_end_ns"))
    )
    prev_end = pl.col("end_ns").shift(1)
    return chain.collect(
        steps.with_columns(
            start_ns=pl.when(prev_end.is_not_null() & (prev_end > pl.col("cpu_start_ns")))
            .then(prev_end)
            .otherwise(pl.col("cpu_start_ns"))
        )
        .with_columns(end_ns=pl.max_horizontal("end_ns", "start_ns"))
        .select(  # overlapping steps: empty, not negative
            "step", "name", "pid", "tid", "op_id", "cpu_start_ns", "cpu_end_ns", "start_ns", "end_ns", "gpu_end_ns"
        )
    )
