"""A callable run on polars' own worker thread, so that the polars calls it makes run in place.

Polars runs every query on its thread pool. Asked from any other thread (the main thread), a
query is handed to a pool thread and the caller sleeps until it is done: two context switches
(rayon's `LockLatch`), which on these 2-vCPU machines cost more than a query over a few hundred
rows itself. Asked from a pool thread, the query runs on that thread at once. Measured 2026-12-04,
polars 2.1, `POLARS_MAX_THREADS=1`, a frame of 300 rows, main thread -> pool thread: a select of
two columns 106 -> 20 µs, a filter 159 -> 38, a join 284 -> 31, a group-by 140 -> 35 (0 context
switches instead of 2 and more); a DLRM rank's load and analyses 98-118 -> 74-87 ms of CPU.

`on_pool_thread(fn)` has polars call `fn` from a pool thread: as the function of a one-row
`map_batches` beside a second column (the columns of a select are evaluated on the pool; a
lone one is evaluated where it is asked). It is for small traces, where these fixed costs are
most of the work (`jobs.executors` decides):

- `fn` must not wait for another thread that runs polars queries: with one pool thread (the
  directory mode's workers) that thread's queries would wait for the pool thread `fn` holds
  (the cache's frame writers run after it, not inside);
- the interpreter runs `fn` on a thread of polars' (Python sees a dummy thread): Ctrl-C waits
  until `fn` returns, and its stack is the pool's (Python's recursion limit stays far below it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def on_pool_thread(fn: Callable[[], T]) -> T:
    """`fn()`, called from one of polars' pool threads; what it raises is raised here."""
    import polars as pl

    box: dict[str, Any] = {}

    def call(s: pl.Series, **_: Any) -> pl.Series:  # (polars passes `return_dtype` where it is taken)
        if not box:  # (called once: the frame has one row)
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
                box["error"] = exc
        return s

    one = pl.DataFrame({"call": [0], "beside": [0]})
    one.select(pl.col("call").map_batches(call, return_dtype=pl.Int64), pl.col("beside"))
    if "error" in box:
        raise box.pop("error")
    return box["value"] if box else fn()  # (not called: a polars that evaluates it here, in place)
