"""A job's directory of per-rank trace files, analysed one file at a time.

`analyse_rank_file(path, options, cache)` is a pure function of one file (the unit an engine
maps): it loads the file, reduces it to its small `RankResult` and lets the trace go; a file that
is not a trace comes back as a `SkippedFile`. `run_ranks` maps it over the files on an executor:

- `local` (default): one process per CPU, at most one per file: this one and worker processes,
  each holding one trace at a time and taking the next file when it is free (`--jobs 1`:
  this process alone);
- `dask`: Dask distributed (the `dask` extra): a scheduler address, a local cluster, or
  `inprocess` (threads in this process, for tests and notebooks).

With a cache folder each result is written as Parquet under a key of the file's bytes, the tool
version and the options, so a re-run maps only the ranks not done yet. `multirank.cross_rank`
then compares the results. Paths may be fsspec URLs (`memory://`, `file://`, `s3://`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import polars as pl

from traceanalyzer.errors import NotATraceError, TraceReadError, UsageError
from traceanalyzer.jobs import plan, rank_io
from traceanalyzer.jobs.cache import options_key
from traceanalyzer.jobs.multirank import MultiRankResult, RankResult, SkippedFile, cross_rank, rank_from_name
from traceanalyzer.options import Options
from traceanalyzer.pool_thread import on_pool_thread

TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def is_rank_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a directory (of per-rank files) rather than one trace."""
    return rank_io.is_dir(str(path))


def rank_files(path: str | os.PathLike[str]) -> list[str]:
    """The files of a directory in rank order where the name holds one (`worker3`, `rank_3`),
    else by name. Every plain file is a candidate: a non-trace is skipped when read."""
    files = [p for p in rank_io.list_dir(str(path)) if not os.path.basename(p).startswith(".")]
    if not files:
        raise TraceReadError(str(path), "directory holds no files")

    def key(p: str) -> tuple:
        n = rank_from_name(os.path.basename(p))
        return (n is None, n or 0, os.path.basename(p))

    return sorted(files, key=key)


def _inflate(data: bytes, name: str) -> bytes:
    """The JSON of a rank file's bytes (inflated when gzip)."""
    return _inflated(data, name)[0]


def _inflated(data: bytes, name: str) -> tuple[bytes, bool]:
    """(the JSON of a rank file's bytes, whether it read whole: plain, or gzip to its end)."""
    from traceanalyzer.load.source import ByteSource

    buf = io.BytesIO(data)
    buf.name = name
    out = []
    with ByteSource(buf) as src:
        if not src.compressed:
            return data, True
        # blocks of the size the trailer states (a read zeroes a block: 4 MB by default, ~1 ms a
        # small rank), within bounds should the trailer lie
        block = min(max(src.gzip_trailer_size() or 0, 1 << 16), 64 << 20) + 1
        while chunk := src.read(block):
            out.append(chunk)
        return b"".join(out), src.truncated is None


def analyse_rank_file(path: str, options: Options | None = None, cache: str = "") -> RankResult | SkippedFile:
    """The per-file unit of work: load one rank's trace and reduce it to its RankResult (from
    the cache when it holds this file's result), or say why the file is not a trace."""
    opts = Options.of(options)
    try:
        data = rank_io.read_bytes(path)
    except OSError as exc:
        return SkippedFile(path, f"unreadable ({exc.strerror or exc})")
    folder = os.path.join(cache, rank_io.cache_key(data, options_key(opts))) if cache else ""
    if folder and (hit := rank_io.load_cached(RankResult, folder, path)) is not None:
        return hit
    # Inflated once: the loader reads the JSON (a damaged gzip stream it reads itself, and says
    # what it lost), the collectives' metadata is read from it.
    try:
        raw, whole = _inflated(data, path)
    except (NotATraceError, TraceReadError) as exc:
        return SkippedFile(path, exc.problem)

    def analysed() -> RankResult | SkippedFile:
        return _analysed(path, raw if whole else data, raw, opts)

    # a small rank's hundreds of small queries run on polars' own thread (`pool_thread`); the
    # cache's writers, which run queries on threads of their own, after it
    result = on_pool_thread(analysed) if len(raw) < IN_MEMORY_ENGINE_BYTES else analysed()
    if folder and not isinstance(result, SkippedFile):
        rank_io.save(result, folder)
    return result


def _analysed(path: str, data: bytes, raw: bytes, opts: Options) -> RankResult | SkippedFile:
    """One rank's RankResult from its bytes (`data`, the JSON `raw`): loaded, then reduced."""
    from traceanalyzer.load import load

    try:
        buf = io.BytesIO(data)
        buf.name = path
        trace = load(buf)
        comm, note = rank_io.comm_args(raw)
    except (NotATraceError, TraceReadError) as exc:
        return SkippedFile(path, exc.problem)
    from traceanalyzer.jobs.multirank import rank_result

    with _engine_for(len(raw)):
        result = rank_result(trace, opts, comm)
    if note and not result.warnings:  # a damaged file already says so; a clean one says what is missing
        result = _with_warning(result, note)
    return result


# Below this much JSON a rank's lazy polars queries run on the in-memory engine. Polars' default
# ("auto") picks its streaming engine for a lazy `collect()`, which costs ~200-700 µs more a query
# to start (2026-12-01, polars 2.1: a 4-step sweep over 2,000 rows 1.0 ms against 0.33 ms); on a
# 0.9 MB DLRM rank that is ~10 % of its CPU. Above it the streaming engine keeps what it does for
# memory (the analyses write sweeps as one lazy query so that helper columns go inside it).
IN_MEMORY_ENGINE_BYTES = 128 << 20


def _engine_for(json_bytes: int) -> AbstractContextManager:
    """Polars' in-memory engine for the analyses of a rank of `json_bytes`, else as configured."""
    return pl.Config(engine_affinity="in-memory") if json_bytes < IN_MEMORY_ENGINE_BYTES else nullcontext()


def _with_warning(r: RankResult, w: str) -> RankResult:
    import dataclasses

    return dataclasses.replace(r, warnings=(*r.warnings, w))


# The ranks already use every CPU, one rank per worker: each worker decodes its file on one thread,
# and runs polars on one. Polars sizes its thread pool when it is imported, so this must be in the
# worker's environment when it starts (the initializer runs after the worker has imported polars).
# On small ranks a polars query costs ~60-80 µs of fixed overhead, and with a pool of two threads
# per worker the idle one spins between queries (2026-12-01, 8 DLRM ranks: see docs/performance.md).
WORKER_ENV = {"TRACEANALYZER_WORKERS": "1", "POLARS_MAX_THREADS": "1"}


@contextmanager
def worker_env() -> Iterator[None]:
    """`WORKER_ENV` in this process's environment while worker processes start (they inherit it),
    each variable the user has set left as it is; restored afterwards."""
    added = [k for k in WORKER_ENV if k not in os.environ]
    os.environ.update({k: WORKER_ENV[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _init_worker(with_numpy: bool = False) -> None:
    # A worker started elsewhere (a Dask cluster by address): at least decode on one thread.
    os.environ["TRACEANALYZER_WORKERS"] = "1"
    if with_numpy:
        _import_numpy()


# From this many ranks a process, it imports numpy: the small frames' nesting, links, sweeps and
# joins run on numpy arrays where it is imported (`analyses.arrays`, `links`, `op_tree`, the gap
# edges, health's crossing events). Its import with numpy.ma (polars reads it when it takes an array) costs
# ~0.13-0.15 CPU-s (~300 M instructions) a process; a DLRM rank with it runs ~21-22 M
# instructions of ~340-350 M fewer (-6 %; cachegrind, 2026-12-02): a gain from ~14-20 ranks a
# process. 64 ranks on 2 CPUs (32 a process) now import it; 8 ranks in one process do not.
NUMPY_RANKS = 20


def _import_numpy() -> None:
    import numpy  # noqa: F401  (imported for the analyses: they read `sys.modules`)


def _local_jobs(paths: list[str], jobs: int | None, min_bytes: int = 0) -> int:
    if any(str(p).startswith("memory://") for p in paths):
        return 1  # fsspec's memory filesystem lives in this process: a worker would find it empty
    # One process per CPU and per file (`--jobs`: that many), and with `min_bytes` (--worker-min-mb)
    # one per that much JSON: a worker's start-up costs more than the few small ranks it would take
    # (`jobs.plan`; 8 DLRM ranks 1.7 CPU-s with a worker, 1.4 without).
    return plan.processes(paths, jobs or 0, min_bytes)


def _dask_client(address: str):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise UsageError(None, "--executor dask needs the dask extra: pip install 'torch-traceanalyzer[dask]'") from exc
    if address == "inprocess":
        return Client(LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None))
    if address:
        return Client(address)
    from traceanalyzer.load.cpus import cpu_count

    with worker_env():
        return Client(LocalCluster(n_workers=cpu_count(), threads_per_worker=1, dashboard_address=None))


def run_ranks(
    paths: Sequence[str | os.PathLike[str]],
    fn: Callable[..., Any],
    *args: Any,
    jobs: int | None = None,
    executor: str = "local",
    address: str = "",
    min_bytes: int = 0,
) -> list[Any]:
    """`[fn(path, *args) for path in paths]` on the executor, results in input order. `fn` must
    be a module-level function (it is pickled by name). `min_bytes`: on the local executor
    without `jobs`, one process per that much JSON at most (`jobs.plan.processes`)."""
    paths = [str(p) for p in paths]
    if executor == "dask":
        client = _dask_client(address)
        try:
            if address != "inprocess":
                client.run(_init_worker)
            futures = client.map(fn, paths, *[[a] * len(paths) for a in args], pure=False)
            return client.gather(futures)
        finally:
            cluster = client.cluster
            client.close()
            if cluster is not None and not address.startswith(("tcp://", "tls://")):
                cluster.close()
    jobs = _local_jobs(paths, jobs, min_bytes)
    with_numpy = len(paths) >= NUMPY_RANKS * jobs
    if jobs == 1:
        if with_numpy:
            _import_numpy()
        return [fn(p, *args) for p in paths]
    return _local_map(fn, paths, args, jobs, with_numpy)


def _local_map(fn: Callable[..., Any], paths: list[str], args: tuple, jobs: int, with_numpy: bool = False) -> list[Any]:
    """`fn` over `paths` on `jobs` processes: `jobs - 1` spawned workers and this one. A worker
    costs its start-up (~0.35 CPU-s: Python, polars and the analyses imported, their first calls;
    2026-12-01, 8 DLRM ranks of ~0.2 CPU-s each), which this process has already paid."""
    out: list[Any] = [None] * len(paths)
    order = iter(range(len(paths)))
    import multiprocessing as mp  # here: ranks run in this process alone need neither (~12 ms of imports)
    from concurrent.futures import ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")
    start = {"mp_context": ctx, "initializer": _init_worker, "initargs": (with_numpy,)}
    with worker_env(), ProcessPoolExecutor(max_workers=jobs - 1, **start) as pool:
        running: dict[Any, int] = {}

        def feed() -> None:
            # two files queued per worker: it never waits for this process to finish a file
            while len(running) < 2 * (jobs - 1) and (i := next(order, None)) is not None:
                running[pool.submit(fn, paths[i], *args)] = i

        def collect(done) -> None:
            for f in done:
                out[running.pop(f)] = f.result()

        feed()
        if with_numpy:  # once the workers start (they import their own meanwhile)
            _import_numpy()
        while (i := next(order, None)) is not None:
            out[i] = fn(paths[i], *args)  # environment as the workers': WORKER_ENV is set here
            collect([f for f in running if f.done()])
            feed()
        collect(wait(list(running)).done)
    return out


def analyse_dir(
    path: str | os.PathLike[str], options: Options | None = None, jobs: int | None = None
) -> tuple[list[RankResult], MultiRankResult, list[SkippedFile]]:
    """Every rank file of a directory analysed alone, then compared across ranks; and the
    files skipped as not traces."""
    opts = Options.of(options)
    r = opts.ranks
    out = run_ranks(
        rank_files(path),
        analyse_rank_file,
        opts,
        r.rank_cache,
        jobs=jobs or r.rank_jobs,
        executor=r.rank_executor,
        address=r.dask_address,
        min_bytes=plan.min_bytes(r.worker_min_mb),
    )
    results = [x for x in out if isinstance(x, RankResult)]
    skipped = [x for x in out if isinstance(x, SkippedFile)]
    if not results:
        why = "; ".join(f"{os.path.basename(s.path)}: {s.reason}" for s in skipped[:3])
        raise NotATraceError(str(path), f"directory holds no trace files ({why})")
    return results, cross_rank(results, opts), skipped
