"""A Trace in the cache (`jobs.cache`): each table in lz4 Arrow IPC files of a few of its columns
(`GROUP_BYTES`), a small table packed whole instead (`TABLE_INLINE_BYTES`), written while the
analyses run and read back lazily, a table when an analysis first asks for it (`CachedTrace`): a
command whose results are all cached reads none of them."""

from __future__ import annotations

import functools
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXT = ".arrow"  # Arrow IPC, lz4
MISSING = object()  # no such entry, or one that cannot be read: a miss, never an error
# A small table or result frame is packed into its entry's pickle (`pack`: polars' own pickle,
# deflated by isal, ~3 ms a MB) instead of written as an Arrow file of its own (~0.5 ms a file, most
# of it polars' fixed cost). Since a table is a file of many columns (`GROUP_BYTES`), packing pays up
# to ~0.4 MB (2026-12-04, 2 vCPUs, the op table of a 10 MB trace, 15 columns, written and read back:
# 0.25 MB 1.2 ms packed against 2.3 ms as a file, 0.5 MB 3.7 against 3.2, 1 MB 8 against 5). A
# result frame is one file, and its pickle can be twice its estimated size (string views): packed
# only when tiny. A 10 MB trace's tables were 115 files, 90 ms of writing, when a column was a file.
TABLE_INLINE_BYTES = 512 << 10
FRAME_INLINE_BYTES = 128 << 10
# A larger table is written as files of consecutive columns of at most this estimated size (a
# larger column alone): polars builds each file in memory first, so a file per table held +7-14 MB
# beside the analyses at 311 MB, and a file per column cost its fixed cost 50 times (2026-12-04,
# 104 MB: 0.066-0.084 CPU-s written, 0.061-0.075 read, against 0.043-0.045 and 0.041-0.048).
GROUP_BYTES = 16 << 20

__all__ = [
    "EXT",
    "FRAME_INLINE_BYTES",
    "GROUP_BYTES",
    "MISSING",
    "TABLE_INLINE_BYTES",
    "dump_trace",
    "lazy",
    "load_trace",
    "pack",
    "read_columns",
    "trace_fields",
    "unpack",
    "write_frame",
]


def pack(df: Any) -> bytes:
    """A small DataFrame as bytes to keep in a pickle (a Trace table, `TABLE_INLINE_BYTES`; a result
    frame, `FRAME_INLINE_BYTES`): polars' pickle, deflated (isal level 1: a 10 MB trace's 1.5 MB op
    table to 0.17 MB in 1.4 ms, back in 2 ms)."""
    from isal import isal_zlib

    return isal_zlib.compress(pickle.dumps(df, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(data: bytes) -> Any:
    """The DataFrame `pack` made."""
    from isal import isal_zlib

    return pickle.loads(isal_zlib.decompress(data))


def write_frame(df: Any, path: Path) -> None:
    """One DataFrame as an lz4 Arrow file of one record batch: read back, one chunk a column (a
    chunked column is copied by every numpy hand-off: the dependency model's peak, +28 MB at 311 MB)."""
    df.write_ipc(path, compression="lz4", record_batch_size=max(df.height, 1))


_TABLES = "tables.pickle"  # a trace entry: its non-table fields, the tables' row and file counts


def trace_fields(trace: Any) -> dict[str, Any]:
    """A Trace's fields by name, in order (what `dump_trace` writes)."""
    import dataclasses

    return {f.name: getattr(trace, f.name) for f in dataclasses.fields(trace)}


def dump_trace(trace: Any, folder: Path) -> None:
    """Write a Trace into `folder`: each table's columns, in order, to `<name>.<i>.arrow`, files of at
    most `GROUP_BYTES` (`column_groups`), a table of at most `TABLE_INLINE_BYTES` packed whole, the
    rest and the tables' row and file counts to `tables.pickle`: `load_trace` hands the tables back
    one at a time. `trace` may be its `trace_fields`, which this empties as it goes, letting each
    column go once written: a command that drops columns of its Trace while this runs beside its
    analyses (`gaps` its unread ones, ~70 MB at 1 GB) has them freed then, not at the end."""
    import polars as pl

    fields = trace if isinstance(trace, dict) else trace_fields(trace)
    rest, heights, widths, inline = {}, {}, {}, {}
    for name in list(fields):
        value = fields.pop(name)
        if isinstance(value, pl.DataFrame):
            heights[name] = value.height
            if value.estimated_size() <= TABLE_INLINE_BYTES:
                inline[name] = pack(value)  # unpacked when first used
                continue
            groups = column_groups(value, GROUP_BYTES)
            for i, columns in enumerate(groups):
                write_frame(value.select(columns), folder / f"{name}.{i}{EXT}")
                value = value.drop(columns)  # (the columns written: this holds them no longer)
            widths[name] = len(groups)
        else:
            rest[name] = value
        del value
    tables = (rest, heights, widths, inline)
    (folder / _TABLES).write_bytes(pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL))


def column_groups(df: Any, limit: int) -> list[list[str]]:
    """The columns of `df` in order, cut into runs of at most `limit` estimated bytes (a column
    larger than that alone): what each Arrow file of a cached table holds."""
    groups: list[list[str]] = []
    size = 0
    for column in df.columns:
        n = df[column].estimated_size()
        if not groups or size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(column)
        size += n
    return groups


def read_columns(files: list[Path]) -> Any:
    """One table from the Arrow files of its column groups (`dump_trace`), side by side: one query, so
    polars reads and inflates the files in parallel (a table of 311 MB's Trace in half the time of
    a `read_ipc` per file, one after another), each column one chunk as written (the in-memory
    engine: the streaming one hands some back in pieces, which the next numpy hand-off copies)."""
    import polars as pl

    if not files:
        return pl.DataFrame()
    # columns of unequal heights (a damaged entry) must fail, not be padded: polars 2 refuses
    # them side by side, 1.x pads them with nulls unless `strict`
    strict = {} if int(pl.__version__.split(".")[0]) >= 2 else {"strict": True}
    return pl.concat([pl.scan_ipc(f) for f in files], how="horizontal", **strict).collect(engine="in-memory")


@functools.lru_cache(maxsize=1)
def _cached_trace_class() -> type:
    """`CachedTrace`, made on first use (it subclasses `Trace`, which needs polars)."""
    from traceanalyzer.trace import Trace, one_valued

    class CachedTrace(Trace):
        """A Trace from the cache whose tables are read from their Arrow files when first
        used, then kept. A Trace in every other way (`dataclasses.replace` reads them all and
        gives a plain one)."""

        def __getattr__(self, name: str) -> Any:
            # Called only when `name` is not in the instance: a table not read yet.
            d = self.__dict__
            if name not in d.get("_heights", ()):
                raise AttributeError(name)
            try:
                # stored as `build_trace` stores it: a file or a pickle holds a one-valued column in full
                if name in d["_inline"]:
                    d[name] = one_valued(unpack(d["_inline"].pop(name)))
                else:
                    files = [d["_folder"] / f"{name}.{i}{EXT}" for i in range(d["_widths"][name])]
                    d[name] = one_valued(read_columns(files))
            except Exception:  # noqa: BLE001 - a damaged or vanished entry: decode the file after all
                if d.get("_fallback") is None:
                    raise
                decoded = d.pop("_fallback")()
                shutil.rmtree(d["_folder"], ignore_errors=True)  # written again by the next run
                for table in d["_heights"]:
                    d.setdefault(table, getattr(decoded, table))
            return d[name]

        @property
        def has_gpu_work(self) -> bool:
            """Whether the trace holds GPU work, from the row count (without reading `gpu`)."""
            d = self.__dict__
            if "gpu" in d or "_heights" not in d:  # read already, or a plain copy (`replace`)
                return self.gpu.height > 0
            return d["_heights"].get("gpu", 0) > 0

    return CachedTrace


def lazy(trace: Any) -> bool:
    """Whether `trace` is a `CachedTrace` reading its tables on first use (a copy reads them all)."""
    return "_heights" in getattr(trace, "__dict__", {})


def load_trace(folder: Path, fallback: Callable[[], Any] | None = None) -> Any:
    """The Trace `dump_trace` wrote into `folder`, its tables read on first access; MISSING when there is
    none or it cannot be read. `fallback()` decodes the file: a table that cannot be read comes from there."""
    try:
        rest, heights, widths, inline = pickle.loads((folder / _TABLES).read_bytes())
        if not all((folder / f"{n}.{i}{EXT}").is_file() for n, w in widths.items() for i in range(w)):
            return MISSING
        trace = object.__new__(_cached_trace_class())
        state = {"_folder": folder, "_heights": heights, "_widths": widths, "_inline": inline, "_fallback": fallback}
        trace.__dict__.update(rest, **state)
        return trace
    except Exception:  # noqa: BLE001 - none, or a stale or damaged entry: a miss, never an error
        return MISSING
