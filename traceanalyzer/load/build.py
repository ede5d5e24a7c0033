"""`build_trace`: the `Trace` from the loader's raw tables: events without a usable time dropped,
ops nested on their threads, runtime calls and GPU work linked to the op around them, the launch
of each GPU activity, steps and the trace's metadata (the data model itself is `trace.py`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from traceanalyzer import chain, links_native
from traceanalyzer.links import GROUP, innermost_containing, nest
from traceanalyzer.patterns import LIBRARY_FRAME as LIBRARY_FRAME_PATTERN
from traceanalyzer.patterns import PROFILER_STEP as STEP_NAME
from traceanalyzer.trace import (
    DROPPED,
    GPU_ACTIVITY_KINDS,
    GPU_KINDS,
    OP_KINDS,
    RUNTIME_APIS,
    Device,
    Trace,
    TraceMeta,
    extend_steps,
    one_valued,
)


def _label(cond: pl.Expr, enum: pl.Enum) -> pl.Expr:
    """The enum's second value where `cond` holds, else its first (null counts as false)."""
    first, second = enum.categories.to_list()
    return pl.when(cond).then(pl.lit(second, dtype=enum)).otherwise(pl.lit(first, dtype=enum))


# The row ids (op_id, frame_id, runtime_id, gpu_id and the links to them: parent_id, op_id,
# runtime_id): Int32, 4 bytes a row less than Int64 (22 MB at 1 GB); a trace has far fewer
# than 2^31 events of a kind. Readers that mix them with Int64 ids cast (`op_tree.ancestors`).
ROW_ID = pl.Int32

# Below this many rows a table is checked by Series calls rather than a frame query (as
# `analyses.intervals.SMALL_ROWS`: a query costs ~30-60 µs to plan and run whatever its size).
SMALL_ROWS = 1 << 16

# The launch columns of a GPU activity <- the columns of its runtime call.
_LAUNCH = {"runtime_id": "runtime_id", "op_id": "op_id", "launch_ts_ns": "ts_ns", "launch_end_ns": "end_ns"}
_LAUNCH |= {"launch_api": "name", "launch_pid": "pid", "launch_tid": "tid"}


def _timed(df: pl.DataFrame, warnings: list[str], what: str) -> pl.DataFrame:
    """Drop events without a usable ts; clamp missing or negative dur to zero."""
    # Counted with a select: `df.filter(...).height` would copy every column of those rows. A
    # small table is counted by Series calls (no query: ~40 µs each, six tables a small rank).
    if df.height < SMALL_ROWS:
        ts, dur = df.get_column("ts_ns"), df.get_column("dur_ns")
        bad_ts, neg, no_dur = ts.null_count(), int((dur < 0).sum()), dur.null_count()
    else:
        bad_ts, neg, no_dur = df.select(
            bad_ts=pl.col("ts_ns").is_null().sum(),
            neg=(pl.col("dur_ns") < 0).fill_null(False).sum(),
            no_dur=pl.col("dur_ns").null_count(),
        ).row(0)
    if bad_ts:
        warnings.append(f"{bad_ts:,} {what} events without a readable ts were ignored")
    if neg:
        warnings.append(f"{neg:,} {what} events with a negative dur were given zero duration")
    if bad_ts:  # filtering copies every column: only where there is something to drop
        df = df.filter(pl.col("ts_ns").is_not_null())
    if neg or no_dur:  # a new column only where a value changes
        df = df.with_columns(dur_ns=pl.col("dur_ns").fill_null(0).clip(0))
    if df.height < SMALL_ROWS and "end_ns" not in df.columns:  # the sum of two Series, no query
        return df.hstack([(df.get_column("ts_ns") + df.get_column("dur_ns")).alias("end_ns")])
    return df.with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))


def _devices(metadata: dict[str, Any]) -> tuple[Device, ...]:
    props = metadata.get("deviceProperties") or metadata.get("computeProperties") or []
    out = []
    for i, p in enumerate(props if isinstance(props, list) else []):
        if not isinstance(p, dict):
            continue
        # computeProperties (old traces) says major/minor and multiProcessorCount.
        major, minor = p.get("computeMajor", p.get("major")), p.get("computeMinor", p.get("minor"))
        sm = p.get("numSms", p.get("multiProcessorCount"))
        mem = p.get("totalGlobalMem")
        out.append(
            Device(
                id=p["id"] if isinstance(p.get("id"), int) else i,
                name=str(p.get("name", "unknown")),
                total_memory_bytes=mem if isinstance(mem, int) else None,
                sm_count=sm if isinstance(sm, int) else None,
                compute_capability=f"{major}.{minor}" if major is not None else None,
            )
        )
    return tuple(out)


def _without(df: pl.DataFrame, names: tuple[str, ...]) -> pl.DataFrame:
    """`df` without the columns `names` (those it has), picked by name: `drop` is a polars query."""
    return df[[c for c in df.columns if c not in names]]


def _narrow_depth(df: pl.DataFrame) -> pl.DataFrame:
    """`depth` as Int16 where it fits (nesting deeper than 32,767 is not a real stack): 2 bytes a
    row less (2 MB for the ops of a 1 GB trace). It is read only to order intervals."""
    top = df["depth"].max() if df.height else 0
    if top is not None and top >= 1 << 15:
        return df
    out = df.clone()  # the column replaced in a copy of the frame: `with_columns` is a query
    out.replace_column(out.get_column_index("depth"), out.get_column("depth").cast(pl.Int16))
    return out


def _python_frames(py: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    py = (
        _timed(_without(py, DROPPED["python"]), warnings, "python_function")
        .with_row_index("frame_id")
        .with_columns(
            pl.col("frame_id").cast(ROW_ID),
            is_user=~pl.col("name").fill_null("<").str.contains(LIBRARY_FRAME_PATTERN),
        )
    )
    return _narrow_depth(nest(py, "frame_id"))


def _ops(ops: pl.DataFrame, python: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    ops = _timed(ops, warnings, "CPU op")
    # (the row index first, then one `with_columns`: the same columns in the same order, one query)
    ops = ops.with_row_index("op_id").with_columns(
        pl.col("op_id").cast(ROW_ID), kind=_label(pl.col("cat") == "user_annotation", OP_KINDS)
    )
    # op_id is the row number; `nest` sorts copies of the key columns only and puts depth and
    # parent_id alongside, in the table's own order.
    ops = _narrow_depth(nest(ops, "op_id"))
    if python.height:
        # frame_id is the row number of `python` (built so, and `nest` keeps the order): the
        # frame names are gathered by it, without a join.
        user = python.select(*GROUP, "ts_ns", "end_ns", "frame_id", "is_user").filter(pl.col("is_user"))
        user = nest(user.drop("is_user"), "frame_id")
        ops = innermost_containing(ops, user, "frame_id", "_frame", point_end="ts_ns")
        del user
        # the names taken by indexing (the same take as `gather`) and put in `_frame`'s place at
        # the end, picked and stacked: no query (`gather`, `with_columns` and `drop` were three)
        frame = python.get_column("name")[ops.get_column("_frame").cast(pl.UInt32)].alias("python_frame")
        if "python_frame" in ops.columns or ops.columns[-1] != "_frame":
            ops = ops.with_columns(frame).drop("_frame")
        else:
            ops = ops[ops.columns[:-1]].hstack([frame])
    else:
        # 2021 traces: the stack is an arg, innermost frame first.
        frame = pl.element().str.strip_chars()
        user_frames = frame.filter(~frame.str.contains(LIBRARY_FRAME_PATTERN) & (frame != ""))
        first_user = pl.col("call_stack").str.split(";").list.eval(user_frames).list.first()
        if ops["call_stack"].null_count() == ops.height:  # no stack at all: a column never written
            first_user = pl.repeat(None, ops.height, dtype=pl.String)
        ops = ops.with_columns(python_frame=first_user)
    return _without(ops, DROPPED["op"])  # in op_id order: `nest` and the as-of joins keep the rows' order


def _runtime(rt: pl.DataFrame, ops: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    rt = (
        _timed(rt, warnings, "runtime")
        .with_row_index("runtime_id")
        .with_columns(
            pl.col("runtime_id").cast(ROW_ID),
            api=_label(pl.col("cat") == "cuda_driver", RUNTIME_APIS),
        )
    )
    return innermost_containing(_without(rt, DROPPED["runtime"]), ops, "op_id", "op_id")  # in runtime_id order


def _or(df: pl.DataFrame, col: str, fallback: str) -> pl.Series:
    """`col`, else `fallback` where it is null. Kineto writes a GPU activity's device and
    stream both as args and as its pid and tid: where they agree in every row, the column is
    `fallback` itself (one buffer for both; 2.4 MB each at 1 GB)."""
    # eq_missing: a value beside a null fallback differs (`==` would give null, which `all` skips);
    # without a null fallback, Series compared (no query): `!=` is null where `col` is, and
    # `any` skips a null
    c, f = df.get_column(col), df.get_column(fallback)
    if not f.null_count():
        if not (c != f).any():
            return f.alias(col)
    elif df.select((pl.col(col).is_null() | pl.col(col).eq_missing(pl.col(fallback))).all()).item():
        return df[fallback].alias(col)
    return df.select(pl.coalesce(col, fallback)).to_series()


def _shapes(gpu: pl.DataFrame) -> list[pl.Series]:
    """grid and block as lists of Int32 where every value fits (CUDA's limits: 2^31 - 1 blocks,
    1,024 threads; 20 bytes a row in place of 32: 6 MB at 1 GB), else as read (Int64)."""
    lists = [c for c in ("grid", "block") if gpu.schema.get(c) == pl.List(pl.Int64)]
    if not gpu.height or not lists:
        return []
    stats = gpu.select(
        *(pl.col(c).list.min().min().alias(f"lo{c}") for c in lists),
        *(pl.col(c).list.max().max().alias(f"hi{c}") for c in lists),
    ).row(0, named=True)
    low, high = -(1 << 31), (1 << 31) - 1
    fits = [c for c in lists if stats[f"lo{c}"] is None or (stats[f"lo{c}"] >= low and stats[f"hi{c}"] <= high)]
    return [gpu[c].cast(pl.List(pl.Int32)) for c in fits]


def _gpu(gpu: pl.DataFrame, rt: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    gpu = _timed(gpu, warnings, "GPU")
    gpu = (
        gpu.with_row_index("gpu_id")
        .with_columns(
            pl.col("gpu_id").cast(ROW_ID),
            _or(gpu, "device", "pid"),
            _or(gpu, "stream", "tid"),
            *_shapes(gpu),
            kind=pl.col("cat").replace_strict(GPU_KINDS, default="kernel", return_dtype=GPU_ACTIVITY_KINDS),
        )
        .pipe(_without, DROPPED["gpu"])
    )
    # The launching call of each activity: the first runtime call of its correlation, found on
    # the narrow keys (the row of that call), and its columns gathered by row. Filtering or
    # joining the whole runtime table copied every one of its columns (+26 MB at 311 MB).
    # Only the calls whose correlation some activity has are kept before the `unique` (most
    # runtime calls launch nothing): at 1 GB 0.34 -> 0.08 CPU-s and +106 -> +28 MB at its peak.
    # (one query, run as the eager calls run: they were seven; a null among the correlations
    # matches no call, as when they were dropped first)
    launched = pl.lit(gpu.get_column("correlation")).implode()
    first = (
        rt.lazy()
        .select("correlation", _row=pl.int_range(pl.len(), dtype=pl.UInt32))
        .filter(pl.col("correlation").is_in(launched) & (pl.col("correlation") != 0))
        .unique("correlation", keep="first")
    )
    row = chain.collect(
        gpu.lazy().select("correlation").join(first, on="correlation", how="left", maintain_order="left")
    )["_row"]
    del first
    # taken by indexing (the same take as `gather`, a query each), put beside without a query
    launch = [rt.get_column(col)[row].alias(out) for out, col in _LAUNCH.items()]
    return gpu.hstack(launch) if not set(_LAUNCH) & set(gpu.columns) else gpu.with_columns(launch)


def _steps(ops: pl.DataFrame, rt: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """The ProfilerStep ranges, extended to the GPU side (see `extend_steps`)."""
    ranges = chain.collect(  # one query (a filter and a select were two)
        ops.lazy()
        .filter(pl.col("name").str.contains(STEP_NAME))
        .select(
            step=pl.col("name").str.extract(STEP_NAME, 1).cast(pl.Int64),
            name="name",
            pid="pid",
            tid="tid",
            cpu_start_ns="ts_ns",
            cpu_end_ns="end_ns",
            op_id="op_id",
        )
    )
    return extend_steps(ranges, gpu)


def build_trace(
    path: str,
    tables: dict[str, pl.DataFrame],
    metadata: dict[str, Any],
    counts: Counter,
    warnings: list[str],
) -> Trace:
    # Takes the tables over: each is dropped from `tables` as it is read, so that the input is
    # freed once its replacement is built (a 1 GB trace's tables are hundreds of MB).
    """The Trace from the loader's raw tables: links, steps and metadata."""
    warnings = list(warnings)
    if sum(tables[k].height for k in ("python", "op", "runtime")) >= links_native.NATIVE_ROWS:
        import numpy  # noqa: F401 - what hands the columns to the native nesting (`links_native`): worth it this big
    python = _python_frames(tables.pop("python"), warnings)
    raw_ops = tables.pop("op")
    stack_arg = bool(raw_ops["call_stack"].is_not_null().any())
    ops = _ops(raw_ops, python, warnings)
    del raw_ops
    runtime = _runtime(tables.pop("runtime"), ops, warnings)
    gpu = _gpu(tables.pop("gpu"), runtime, warnings)
    syncs = _timed(tables.pop("sync"), warnings, "cuda_sync")
    annotations = _timed(tables.pop("gpu_annotation"), warnings, "gpu_user_annotation")
    memory = tables.pop("memory")
    if memory.get_column("ts_ns").null_count():  # a filter copies every column: only where one goes
        memory = memory.filter(pl.col("ts_ns").is_not_null())
    flows = tables.pop("flow")
    meta_ev = tables.pop("meta")
    thread_names = chain.collect(  # one query (three eager steps were three)
        meta_ev.lazy()
        .filter(pl.col("name") == "thread_name")
        .select("pid", "tid", pl.col("value").alias("thread_name"))
        .unique(["pid", "tid"], keep="last", maintain_order=True)  # same order on every run
    )
    steps = _steps(ops, runtime, gpu)

    starts = [t["ts_ns"].min() for t in (ops, runtime, gpu, syncs, python) if t.height]
    ends = [t["end_ns"].max() for t in (ops, runtime, gpu, syncs, python) if t.height]
    origin = min(starts) if starts else 0
    end = max(ends) if ends else origin
    dist = metadata.get("distributedInfo") if isinstance(metadata.get("distributedInfo"), dict) else {}
    meta = TraceMeta(
        path=path,
        schema_version=metadata.get("schemaVersion"),
        rank=dist.get("rank") if isinstance(dist.get("rank"), int) else None,
        world_size=dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        backend=dist.get("backend") if isinstance(dist.get("backend"), str) else None,
        origin_ns=origin,
        end_ns=end,
        devices=_devices(metadata),
        with_stack=python.height > 0 or stack_arg,
        profile_memory=memory.height > 0,
        raw=metadata,
    )
    return Trace(
        meta=meta,
        ops=one_valued(ops),
        python=one_valued(python),
        runtime=one_valued(runtime),
        gpu=one_valued(gpu),
        sync_markers=one_valued(syncs),
        gpu_annotations=one_valued(annotations),
        memory=one_valued(memory),
        flows=one_valued(flows),
        thread_names=thread_names,
        steps=steps,
        event_counts=dict(counts),
        warnings=tuple(warnings),
    )
