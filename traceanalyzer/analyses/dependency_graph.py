"""The dependency graph of a trace: what had to finish before each piece of work could start.

Nodes (built vectorised, no loop over events):

- CPU slices: the timeline of every thread that launches GPU work, blocks on it or runs a step,
  cut at every op, runtime-call and step boundary, so that each slice lies inside one innermost
  op and at most one runtime call. Its `kind` is what the thread was doing, by the priority
  layers of `cpu_activity` (data_loading, sync, runtime_call, launch, cpu_op, python, untraced),
  each moment counted once; its time in each layer is in the graph's `layer_of` / `layer_times`.
- GPU nodes: every kernel, memcpy and memset. A collective's duration beyond the shortest
  instance of the same kernel and message (the launching op's input shapes) is `wait_ns`:
  waiting for its peers (on one trace the shortest instance is the transfer's own time).

Edges (`etype`), each from the end of its source unless `from_start`, to the start of its
destination unless `to_end`:

- `serial`: consecutive slices of one thread (each CPU thread is serial);
- `launch`: the launch call's start -> the GPU activity (correlation; one cudaGraphLaunch ->
  every kernel it replays);
- `stream`: consecutive activities of one stream (each stream runs in order);
- `event`: a cudaStreamWaitEvent / hipStreamWaitEvent whose `Stream Wait Event` marker names the
  two streams: the last work launched on `wait_on_stream` before the wait -> the first work
  launched on the waiting stream after it;
- `sync` (to_end): a blocking call (`cpu_activity.blocking_calls`) returns after the GPU work it
  waited for: the activity that ended last on its device while it was in progress (the syncs
  analysis's `waited_for`), its own copy, and the last work its thread launched before it;
- `fork` / `join`: a gap of the main thread (no op, no runtime call) of at least
  `thread_wait_us` while another launching thread works (the autograd engine's backward) is a
  wait on that thread: the other thread's first slice in the gap waits for the main thread's
  slice before it, and the main thread resumes after the other thread's last slice in it.

Lags make the graph reproduce the capture exactly: every edge has lag min(0, slack) (slack: the
destination's captured start, or a sync's end, less the source's reference time), and the edge
that binds (the latest ready) also carries the rest (launch latency, a return latency, a wait we
cannot see). A replay with nothing changed therefore gives the captured times, and a change moves
what depends on it through the same edges.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyzer.analyses.calibration import calibrate
from traceanalyzer.analyses.cpu_activity import THREAD, CpuActivity, main_thread
from traceanalyzer.analyses.graph_nodes import CPU_KINDS, KIND_LAYERS, cpu_nodes, gpu_nodes, graph_threads, slice_finder
from traceanalyzer.analyses.graph_table import DependencyGraph, as_enum, layer_table, narrow, one_chunk
from traceanalyzer.analyses.slice_kinds import thread_number
from traceanalyzer.analyses.thread_clock import ThreadClock
from traceanalyzer.patterns import GPU_WAIT_API
from traceanalyzer.trace import Trace

ETYPES = ("serial", "launch", "stream", "event", "sync", "fork", "join")
EDGE_SCHEMA = {  # node indexes as int32, the replay's index type
    "src": pl.Int32,
    "dst": pl.Int32,
    "etype": pl.Enum(ETYPES),  # a byte per edge, not a string
    "from_start": pl.Boolean,
    "to_end": pl.Boolean,
}
# Node columns kept as Int32 when every value fits: ids and durations (a
# slice is shorter than 2.1 s but for the odd one, and then its column stays Int64).
NARROW = ["runtime_id", "op_id", "gpu_id", "wait_ns"]
LANES = pl.Enum(["cpu", "gpu"])


def _pairs(df: pl.DataFrame, src: str, dst: str, etype: str) -> tuple[str, np.ndarray, np.ndarray]:
    """The edges (etype, sources, destinations) of the rows of `df` with both ends, less loops."""
    both = df.select(pl.col(src).cast(pl.Int32), pl.col(dst).cast(pl.Int32)).drop_nulls()
    return _part(etype, both[:, 0].to_numpy(), both[:, 1].to_numpy())


def _part(etype: str, src: np.ndarray, dst: np.ndarray) -> tuple[str, np.ndarray, np.ndarray]:
    loop = src == dst  # a blocking call's own copy can also be the work it waited for, and so on
    return (etype, src[~loop], dst[~loop]) if loop.any() else (etype, src, dst)


def _edge_table(parts: list[tuple[str, np.ndarray, np.ndarray]]) -> pl.DataFrame:
    """The edges of every part, in one chunk: each part's arrays once into the table's columns (a
    frame per part, their concatenation and its filter and unique were four copies of a million
    edges). `from_start` is the launches', `to_end` the syncs'; only sync edges repeat (a call's
    own copy, the work it waited for and its thread's last launch can be one activity): the first
    of each is kept, after every other edge. The parts leave `parts` (emptied) as they are read."""
    given, parts = parts, [p for p in parts if p[0] != "sync"] + [p for p in parts if p[0] == "sync"]
    given.clear()
    sync = [p for p in parts if p[0] == "sync"]
    if sync:
        pairs = pl.DataFrame({"s": np.concatenate([p[1] for p in sync]), "d": np.concatenate([p[2] for p in sync])})
        pairs = pairs.unique(maintain_order=True, keep="first")
        parts = [p for p in parts if p[0] != "sync"] + [("sync", pairs["s"].to_numpy(), pairs["d"].to_numpy())]
    parts = parts or [("serial", np.zeros(0, np.int32), np.zeros(0, np.int32))]
    code = np.concatenate([np.full(len(p[1]), ETYPES.index(p[0]), dtype=np.uint8) for p in parts])
    src, dst = (np.concatenate([p[k] for p in parts]).astype(np.int32, copy=False) for k in (1, 2))
    del parts, sync
    etype = pl.Series("etype", ETYPES, dtype=EDGE_SCHEMA["etype"]).gather(code)
    ends = {"from_start": code == ETYPES.index("launch"), "to_end": code == ETYPES.index("sync")}
    cols = [pl.Series("src", src, dtype=pl.Int32), pl.Series("dst", dst, dtype=pl.Int32), etype]
    return pl.DataFrame([*cols, *(pl.Series(k, v, dtype=pl.Boolean) for k, v in ends.items())])


def build_graph(
    trace: Trace, act: CpuActivity, collective_pattern: str, thread_wait_us: float = 50.0
) -> DependencyGraph:
    """The dependency graph of `trace` (see the module docstring); `act` is the Session's CpuActivity."""
    blocking = act.blocking
    threads = graph_threads(trace, blocking, act.launches)
    ends = [trace.ops.select("ts_ns", "end_ns"), trace.runtime.select("ts_ns", "end_ns")]
    ends += [
        trace.steps.select("cpu_start_ns", "cpu_end_ns"),
        *act.bounds(),
    ]
    clock = ThreadClock.of(threads, ends)
    cpu, forks, layers = cpu_nodes(trace, act, threads, int(thread_wait_us * 1000), clock)
    # the layer times as a long table of those above zero, at once: no later step copies them
    # (on the clock folded so already, `slice_kinds`)
    cpu, layer_of, layer_times = layer_table(cpu, KIND_LAYERS) if layers is None else (cpu, *layers)
    gpu = gpu_nodes(trace, collective_pattern)
    clocked = "_th" in cpu.columns  # then node v is row v, and the thread number stands for pid and tid
    if not clocked:
        cpu = cpu.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64))
    gpu = gpu.with_row_index("node").with_columns(pl.col("node").cast(pl.Int64) + cpu.height)
    starting, ending = slice_finder(cpu, clock, "ts_ns"), slice_finder(cpu, clock, "end_ns")
    edges = []
    # serial
    # (the slices are in (pid, tid, ts_ns) order: a thread's next slice is the next row of that thread)
    # (node v is row v: an edge from each row to the next where both are of one thread)
    if clocked:
        th = cpu["_th"].to_numpy()
        same = th[1:] == th[:-1]
    else:
        same = (
            cpu.select((pl.col("pid") == pl.col("pid").shift(-1)) & (pl.col("tid") == pl.col("tid").shift(-1)))
            .to_series()[:-1]
            .fill_null(False)
            .to_numpy()
        )
    src = np.flatnonzero(same).astype(np.int32)
    edges.append(("serial", src, src + 1))
    del same, src
    # launch: the slice that begins the launch call
    calls = trace.runtime.select("runtime_id", *THREAD, "ts_ns")
    if _by_row(trace.runtime["runtime_id"], gpu["runtime_id"]):  # a gather, not a join of 300k activities
        launch = calls.select(pl.col(*THREAD, "ts_ns").gather(gpu["runtime_id"])).with_columns(node=gpu["node"])
    else:
        launch = gpu.select("node", "runtime_id").join(calls, on="runtime_id", how="inner")
    edges.append(_pairs(launch.with_columns(_slice=starting(launch, "ts_ns")), "_slice", "node", "launch"))
    del launch, calls
    # stream order
    # (in (device, stream, ts_ns, gpu_id) order, a stream's next activity is the next row of that
    # stream: neighbours compared, no window over the groups, no sorted copy of the GPU nodes)
    order = _stream_order(gpu)
    lane = gpu.select(pl.col("device", "stream").gather(order))
    same = lane.select(
        pl.col("device").eq_missing(pl.col("device").shift(-1))
        & pl.col("stream").eq_missing(pl.col("stream").shift(-1))
    ).to_series()[:-1]
    at = (order.cast(pl.Int64).to_numpy() + cpu.height).astype(np.int32)
    same = same.to_numpy()
    edges.append(("stream", at[:-1][same], at[1:][same]))
    del order, lane, same, at
    # the launched activities in launch order, sorted once for the waits and the syncs (the
    # columns first: a sort or filter copies every column it carries)
    cols = ("node", "device", "stream", "launch_ts_ns", "launch_pid", "launch_tid", "gpu_id")
    launched = gpu.select(cols).filter(pl.col("launch_ts_ns").is_not_null()).sort("launch_ts_ns")
    # cross-stream waits
    # (the calls' names tested only where a marker names a stream waited on: 5 ms at 311 MB)
    marks, waits = trace.sync_markers, None
    if marks.height and "wait_on_stream" in marks.columns:
        waits = trace.runtime.filter(pl.col("name").str.contains(GPU_WAIT_API)).select("correlation", w_ts="ts_ns")
    if waits is not None and waits.height:
        m = marks.filter(pl.col("wait_on_stream").is_not_null()).select(
            "correlation", "device", "stream", "wait_on_stream"
        )
        w = waits.join(m, on="correlation", how="inner").sort("w_ts")
        before = w.join_asof(
            launched.select(_src="node", device="device", wait_on_stream="stream", _l="launch_ts_ns"),
            left_on="w_ts",
            right_on="_l",
            by=["device", "wait_on_stream"],
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        after = before.join_asof(
            launched.select(_dst="node", device="device", stream="stream", _l2="launch_ts_ns"),
            left_on="w_ts",
            right_on="_l2",
            by=["device", "stream"],
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        edges.append(_pairs(after, "_src", "_dst", "event"))
        del w, before, after
    # syncs: the slice that ends the blocking call returns after the GPU work it waited for
    bl = (
        blocking.filter(pl.col("end_ns") > pl.col("ts_ns"))
        .select("runtime_id", *THREAD, "ts_ns", "end_ns")
        .cast({"pid": pl.Int64, "tid": pl.Int64})
    )
    bl = bl.with_columns(_slice=ending(bl, "end_ns")).filter(pl.col("_slice").is_not_null())
    if bl.height and gpu.height:
        own = bl.join(gpu.select("runtime_id", _src="node"), on="runtime_id", how="inner")
        g_end, g_dev = gpu["end_ns"], gpu["device"]  # by GPU node: row node - cpu.height
        # the device of the call: its own copy's, else of the last work its thread launched
        prior = bl.sort("ts_ns").join_asof(
            launched.select(pid="launch_pid", tid="launch_tid", _l="launch_ts_ns", _src="node", _dev="device").cast(
                {"pid": pl.Int64, "tid": pl.Int64}
            ),
            left_on="ts_ns",
            right_on="_l",
            by=THREAD,
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        own_dev = own.select("runtime_id", _odev=g_dev.gather(own["_src"] - cpu.height))
        dev = prior.join(own_dev.unique("runtime_id"), on="runtime_id", how="left").with_columns(
            _dev=pl.coalesce("_odev", "_dev", pl.lit(gpu["device"].min()))
        )
        ended = gpu.select(_src="node", _dev="device", _gend="end_ns").sort("_gend")
        waited = (
            dev.sort("end_ns")
            .join_asof(
                ended,
                left_on="end_ns",
                right_on="_gend",
                by="_dev",
                strategy="backward",
                suffix="_w",
                check_sortedness=False,
            )
            .filter(pl.col("_gend") >= pl.col("ts_ns"))
        )
        # only work that was done when the call returned: a small pageable copy is staged and
        # runs after its call has returned, and the call did not wait for it
        for part, col in ((own, "_src"), (prior, "_src"), (waited, "_src_w")):
            done = g_end.gather(part[col] - cpu.height)
            waited_on = part.filter(done <= part["end_ns"])
            edges.append(_pairs(waited_on, col, "_slice", "sync"))
        del own, prior, own_dev, dev, ended, waited, done, part, waited_on, g_end, g_dev
    # fork / join with the other launching threads
    if forks.height:
        # the columns first, and one filter: an eager filter copies every column of the rows it keeps
        main = main_thread(trace)
        on_main = (pl.col("pid") == main[0]) & (pl.col("tid") == main[1])
        on_main = pl.col("_th") == thread_number(clock, main) if clocked else on_main
        keep = (pl.col("kind") != "thread_wait") & ~on_main
        f = _forks_on_clock(cpu, forks, keep, clock) if clocked else None
        if f is None:
            f = _forks_by_joins(cpu, forks, keep, clock if clocked else None)
        # the main thread's slices that end and begin each gap: a search in the slices' keys (a
        # join against all the main thread's slices cost 60 ms at 311 MB)
        on_main = f.with_columns(tid=pl.lit(main[1], pl.Int64))
        f = f.with_columns(_fsrc=ending(on_main, "gap_a"), _jdst=starting(on_main, "gap_b"))
        del on_main
        edges.append(_pairs(f.filter(pl.col("_ts") < pl.col("gap_b")), "_fsrc", "_dst", "fork"))
        edges.append(_pairs(f.filter(pl.col("_te") > pl.col("gap_a")), "_jsrc", "_jdst", "join"))
        del f
    steps = trace.steps.select("step", *THREAD, "cpu_start_ns", "cpu_end_ns").cast({"pid": pl.Int64, "tid": pl.Int64})
    steps = steps.with_columns(first_node=starting(steps, "cpu_start_ns"), last_node=ending(steps, "cpu_end_ns"))
    del starting, ending, launched  # (the finders hold the slices' times)
    # CPU nodes are numbered first, GPU nodes after, each in row order: the concatenation is in
    # node order already (no sort). Each part is narrowed before it (narrowing the two-chunk
    # table after it copied all of it: +140 MB at 311 MB), and it is made one chunk a column at a
    # time: the own times computed over it are one chunk, and a frame of columns chunked
    # differently is copied whole by its next drop or select (+100 MB at 311 MB).
    # kinds and lanes as a byte per node (an Enum), not a string
    gpu_kinds = gpu["kind"].drop_nulls().unique().sort().to_list()
    kinds = {"kind": pl.Enum(list(dict.fromkeys([*CPU_KINDS, "collective", *gpu_kinds]))), "lane": LANES}
    # a slice's thread as its number among the graph's threads (pid and tid: `DependencyGraph.lanes`)
    if clocked:  # the thread clock's number, which counts the same threads in the same order
        th = cpu.drop_in_place("_th")
    else:
        th = cpu.select(*THREAD).join(threads.with_row_index("_th"), on=THREAD, how="left", maintain_order="left")
        th = th["_th"]
    small = pl.Int16 if threads.height < 2**15 else pl.Int32
    cpu = cpu.drop("node", "pid", "tid", strict=False).with_columns(as_enum(cpu["kind"], kinds["kind"]))
    cpu = narrow(cpu.cast(kinds).with_columns(thread=th.cast(small)), NARROW)
    del th
    # read above only (device and stream are the trace's, by gpu_id: `DependencyGraph.lanes`); what
    # only GPU nodes have, a table of their own (a column of the node table had a value per slice)
    gpu = narrow(gpu.drop("node", "launch_ts_ns", "launch_pid", "launch_tid", "device", "stream").cast(kinds), NARROW)
    gpu_only, gpu = gpu.select("gpu_id", "wait_ns"), gpu.drop("gpu_id", "wait_ns")
    nodes = pl.concat([cpu, gpu], how="diagonal_relaxed", rechunk=False)
    del cpu, gpu
    nodes = one_chunk(nodes)
    # the edges in one table (one chunk: read as numpy arrays in place) only now, and handed to
    # the calibration alone, which lets each column go once it has it in order (the parts, a
    # copy of every edge, leave `edges` as they are read)
    # (the start edges first: the replay's adjacency then holds no index of them, 4 MB at 311 MB)
    nodes, e = calibrate(nodes, _edge_table(edges), start_first=True)
    nodes = narrow(nodes, ["dur_ns"])  # Int64 until calibrated: it reads an Int64 in place, copies an Int32
    e = narrow(e, ["lag_ns"])  # nearly every lag is 0 or small: held through every what-if (4 MB fewer at 311 MB)
    # a node's own time is its duration but at the syncs: only those are kept (`column`)
    own = nodes.select(_node_index(), "own_ns").filter(pl.col("own_ns").ne_missing(nodes["dur_ns"]))
    nodes = nodes.drop("own_ns")
    names = (trace.runtime["name"], trace.ops["name"], trace.gpu["name"])
    lanes = trace.gpu.select("device", "stream")
    parts = {"layer_times": layer_times, "layer_of": layer_of, "gpu_lanes": lanes, "gpu": gpu_only, "threads": threads}
    parts["own"] = narrow(own, ["node", "own_ns"])
    return DependencyGraph(nodes, e, steps, *names, **parts)


def _forks_by_joins(
    cpu: pl.DataFrame, forks: pl.DataFrame, keep: pl.Expr, clock: ThreadClock | None = None
) -> pl.DataFrame:
    """Per fork (pid, gap_a, gap_b), the first slice `keep` admits of its process to start at or
    after gap_a (_dst, _ts) and the last to end at or before gap_b (_jsrc, _te): as-of joins.
    With `clock`, the slices have their thread number and row for pid and node."""
    # the columns first, and one filter: an eager filter copies every column of the rows it keeps
    pid, node = pl.col("pid"), pl.col("node")
    if clock is not None:
        pid, node = pl.lit(clock.threads["pid"]).gather(pl.col("_th")), pl.int_range(pl.len(), dtype=pl.Int64)
    other = cpu.select(pid.alias("pid"), node.alias("node"), "ts_ns", "end_ns", _k=keep).filter("_k").drop("_k")
    f = forks.sort("gap_a")
    f = f.join_asof(
        other.select("pid", _dst="node", _ts="ts_ns").sort("_ts"),
        left_on="gap_a",
        right_on="_ts",
        by="pid",
        strategy="forward",
        check_sortedness=False,
    )
    f = f.sort("gap_b").join_asof(
        other.select("pid", _jsrc="node", _te="end_ns").sort("_te"),
        left_on="gap_b",
        right_on="_te",
        by="pid",
        strategy="backward",
        check_sortedness=False,
    )
    return f


def _forks_on_clock(cpu: pl.DataFrame, forks: pl.DataFrame, keep: pl.Expr, clock: ThreadClock) -> pl.DataFrame | None:
    """`_forks_by_joins` by searches in the kept slices' times, a thread of the fork's process at
    a time (a few threads; each thread's slices are a run of rows in time order: no key or copy
    per slice, no sort of the million slices by time, twice). None where two threads tie (the
    joins' choice between them is theirs): the joins then decide."""
    kept = cpu.select(keep.fill_null(False)).to_series().to_numpy()
    th, a, b = cpu["_th"].to_numpy(), cpu["ts_ns"].cast(pl.Int64).to_numpy(), cpu["end_ns"].cast(pl.Int64).to_numpy()
    runs = np.searchsorted(th, np.arange(clock.threads.height + 1, dtype=th.dtype))
    pid, ga, gb = (forks[c].cast(pl.Int64).to_numpy() for c in ("pid", "gap_a", "gap_b"))
    m = len(pid)
    first, last = np.full(m, -1, np.int64), np.full(m, -1, np.int64)  # nodes
    now_a, now_b = np.zeros(m, np.int64), np.zeros(m, np.int64)  # their start, their end
    owner = clock.threads["pid"].to_numpy()
    for t in np.flatnonzero(np.isin(owner, pid)).tolist():
        mine = pid == owner[t]
        rows = np.flatnonzero(kept[runs[t] : runs[t + 1]]) + runs[t]  # its kept slices
        at, bt, n = a[rows], b[rows], len(rows)
        i = np.searchsorted(at, ga, side="left")  # its first kept slice starting at or after gap_a
        j = np.searchsorted(bt, gb, side="right") - 1  # its last one ending at or before gap_b
        ok, okj = mine & (i < n), mine & (j >= 0)
        i, j = np.minimum(i, n - 1), np.maximum(j, 0)
        ai, bj = (at[i], bt[j]) if n else (now_a, now_b)
        if (ok & (first >= 0) & (ai == now_a)).any() or (okj & (last >= 0) & (bj == now_b)).any():
            return None
        new_a, new_b = ok & ((first < 0) | (ai < now_a)), okj & ((last < 0) | (bj > now_b))
        first, now_a = np.where(new_a, rows[i] if n else first, first), np.where(new_a, ai, now_a)
        last, now_b = np.where(new_b, rows[j] if n else last, last), np.where(new_b, bj, now_b)
    got = {"_dst": (first, first), "_ts": (first, now_a), "_jsrc": (last, last), "_te": (last, now_b)}
    return forks.with_columns(
        pl.when(pl.lit(pl.Series(w >= 0))).then(pl.lit(pl.Series(v, dtype=pl.Int64))).alias(c)
        for c, (w, v) in got.items()
    )


def _stream_order(gpu: pl.DataFrame) -> pl.Series:
    """The GPU nodes' rows in (device, stream, ts_ns, gpu_id) order: two stable numpy sorts (by
    time, on rows in gpu_id order, then by lane) where every key is known and a lane fits one
    int64, else polars' sort of the four (11 ms for 93k activities at 311 MB)."""
    keys = gpu.select("device", "stream", "ts_ns", "gpu_id")
    lanes = keys.select(pl.col("device", "stream").min().name.suffix("_lo"), pl.col("device", "stream").max())
    fits = keys.null_count().sum_horizontal().item() == 0 and keys["gpu_id"].is_sorted()
    if fits and keys.height:
        d_lo, s_lo, d_hi, s_hi = lanes.row(0)
        fits = d_lo >= 0 and s_lo >= 0 and d_hi < 1 << 31 and s_hi < 1 << 32
    if not fits:
        return keys.select(pl.arg_sort_by("device", "stream", "ts_ns", "gpu_id")).to_series()
    by_time = np.argsort(keys["ts_ns"].cast(pl.Int64).to_numpy(), kind="stable")
    lane = keys["device"].cast(pl.Int64).to_numpy() * (1 << 32) + keys["stream"].cast(pl.Int64).to_numpy()
    return pl.Series(by_time[np.argsort(lane[by_time], kind="stable")])


def _by_row(ids: pl.Series, wanted: pl.Series) -> bool:
    """Whether `ids` are their row numbers (as the loader numbers them) and every `wanted` is one."""
    n = ids.len()
    if not n or ids.null_count() or ids[0] != 0 or ids[-1] != n - 1 or (n > 1 and ids.diff().drop_nulls().min() < 1):
        return False
    known = wanted.drop_nulls()
    return not known.len() or (known.min() >= 0 and known.max() < n)


def _node_index() -> pl.Expr:
    return pl.int_range(pl.len(), dtype=pl.Int64).alias("node")
