"""Input and output of the per-rank map: the collectives' own metadata read from the raw JSON,
paths that may be fsspec URLs, and the Parquet cache of per-rank results.

- `comm_args(data)`: the loader keeps no per-event `args` beyond the columns of the Trace, so the
  process-group fields PyTorch writes on `record_param_comms` and on the NCCL/RCCL kernels
  (`Collective name`, `Process Group Name`, `Process Group Ranks`, `Group size`,
  `In msg nelems`, `Out msg nelems`, `dtype`) are decoded here with a narrow msgspec schema that
  skips everything else.
- `read_bytes(path)` / `list_dir(path)`: local paths or fsspec URLs (`memory://`, `file://`,
  `s3://` when fsspec and its backend are installed).
- `cache_key` / `save` / `load_cached`: a rank's result as Parquet tables plus a JSON of scalars
  in `CACHE/<key>/`, the key hashing the file's bytes, the tool version and the options.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.analyses.collectives import COMM_ARGS_SCHEMA
from traceanalyzer.load.urls import is_url, url_to_fs


class _Args(msgspec.Struct, forbid_unknown_fields=False):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None


class _Event(msgspec.Struct, forbid_unknown_fields=False):
    name: Any = None
    cat: Any = None
    args: _Args | None = None


class _Doc(msgspec.Struct, forbid_unknown_fields=False):
    traceEvents: list[_Event] = []  # noqa: N815 (the format's key)


# Every row of `comm_args` carries this key (Kineto writes it as is, never with escaped letters).
COLL_KEY = b'"Collective name"'


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and v != "" else None
    except (TypeError, ValueError):
        return None


def comm_args(data: bytes) -> tuple[pl.DataFrame, str | None]:
    """Collective metadata of a trace's JSON bytes: one row per `record_param_comms` op or
    kernel carrying a `Collective name`; and why there are none when the JSON cannot be read
    (a damaged file: the loader salvages its events, the metadata is then taken as absent)."""
    if COLL_KEY not in data:  # no event names a collective: nothing to decode (~2.3 ms a DLRM rank)
        return pl.DataFrame(schema=COMM_ARGS_SCHEMA), None
    try:
        doc = msgspec.json.decode(data, type=_Doc)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return pl.DataFrame(schema=COMM_ARGS_SCHEMA), f"collective metadata unreadable ({str(exc)[:80]})"
    rows = [
        (
            _int(e.args.correlation),
            _int(e.args.external_id),
            e.cat == "kernel",
            str(e.args.coll_name),
            None if e.args.pg_name is None else str(e.args.pg_name),
            None if e.args.pg_ranks is None else str(e.args.pg_ranks),
            _int(e.args.group_size),
            _int(e.args.in_nelems),
            _int(e.args.out_nelems),
            None if e.args.dtype is None else str(e.args.dtype),
        )
        for e in doc.traceEvents
        if e.args is not None and e.args.coll_name is not None and (e.cat == "kernel" or e.name == "record_param_comms")
    ]
    return pl.DataFrame(rows, schema=COMM_ARGS_SCHEMA, orient="row"), None


def _fs(path: str):
    return url_to_fs(path)


def read_bytes(path: str) -> bytes:
    """The file's raw (possibly gzip) bytes, from a local path or an fsspec URL."""
    if is_url(path):
        fs, p = _fs(path)
        with fs.open(p, "rb") as fh:
            return fh.read()
    return Path(path).read_bytes()


def is_dir(path: str) -> bool:
    """Whether a local path or fsspec URL names a directory."""
    if is_url(path):
        fs, p = _fs(path)
        return fs.isdir(p)
    return Path(path).is_dir()


def list_dir(path: str) -> list[str]:
    """The plain files directly inside a directory (local path or fsspec URL)."""
    if is_url(path):
        fs, p = _fs(path)
        # fsspec's own inverse of url_to_fs: file:///data/x keeps its leading "/".
        return [fs.unstrip_protocol(i["name"]) for i in fs.ls(p, detail=True) if i.get("type") == "file"]
    return [str(p) for p in Path(path).iterdir() if p.is_file()]


# Bump when RankResult's fields change (2: its gaps tables in ns, `devices_ns` and the like).
_LAYOUT = 2


def cache_key(data: bytes, options_json: str) -> str:
    """Content of the file, tool version, layout of the result and options: a result is reused
    only when all four match."""
    from traceanalyzer.version import __version__

    h = hashlib.sha256(data)
    h.update(f"\0{__version__}\0{_LAYOUT}\0{options_json}".encode())
    return h.hexdigest()[:32]


def save(result: Any, folder: str) -> None:
    """Write a RankResult atomically: its tables as Parquet, its scalars as JSON, in a temporary
    folder renamed into place (`cache.atomic_folder`: a concurrent or interrupted run never
    leaves half a result)."""
    from traceanalyzer.jobs.cache import atomic_folder

    with atomic_folder(folder) as tmp:
        if tmp is None:
            return
        scalars = {}
        for f in dataclasses.fields(result):
            v = getattr(result, f.name)
            if isinstance(v, pl.DataFrame):
                v.write_parquet(tmp / f"{f.name}.parquet")
            else:
                scalars[f.name] = list(v) if isinstance(v, tuple) else v
        (tmp / "scalars.json").write_text(json.dumps(scalars))


def load_cached(cls: type, folder: str, path: str) -> Any | None:
    """The RankResult saved in `folder` (None when absent), its path set to `path`."""
    d = Path(folder)
    if not (d / "scalars.json").exists():
        return None
    values: dict[str, Any] = json.loads((d / "scalars.json").read_text())
    for f in dataclasses.fields(cls):
        if (d / f"{f.name}.parquet").exists():
            values[f.name] = pl.read_parquet(d / f"{f.name}.parquet")
        elif isinstance(values.get(f.name), list):
            values[f.name] = tuple(values[f.name])
    values["path"] = path
    try:
        return cls(**values)
    except TypeError:  # saved by another layout of the class: computed again
        return None
