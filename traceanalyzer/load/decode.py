"""Typed decoding of one chunk of events into per-kind column lists.

msgspec decodes straight into slotted structs (no dicts), reading only the fields below; every
other key is skipped in C. `ts` and `dur` stay raw text so that nanosecond digits survive
(a float64 of epoch microseconds, ~1.7e15, has a resolution of 0.25 us). Field types are loose
(`Any`) because real traces put strings where numbers belong; `normalize` casts them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from msgspec import Raw, field

_EMPTY = Raw(b"")


class Args(msgspec.Struct):
    correlation: Any = None
    external_id: Any = field(default=None, name="External id")
    external_id_2021: Any = field(default=None, name="external id")
    device: Any = None
    stream: Any = None
    bytes: Any = None
    bandwidth: Any = field(default=None, name="memory bandwidth (GB/s)")
    grid: Raw = _EMPTY
    block: Raw = _EMPTY
    graph_id: Any = field(default=None, name="graph id")
    cbid: Any = None
    sequence_number: Any = field(default=None, name="Sequence number")
    fwd_thread_id: Any = field(default=None, name="Fwd thread id")
    input_dims: Raw = field(default=_EMPTY, name="Input Dims")
    input_type: Raw = field(default=_EMPTY, name="Input type")
    call_stack: Any = field(default=None, name="Call stack")
    python_id: Any = field(default=None, name="Python id")
    python_parent_id: Any = field(default=None, name="Python parent id")
    device_type: Any = field(default=None, name="Device Type")
    device_id: Any = field(default=None, name="Device Id")
    addr: Any = field(default=None, name="Addr")
    alloc_bytes: Any = field(default=None, name="Bytes")
    total_allocated: Any = field(default=None, name="Total Allocated")
    total_reserved: Any = field(default=None, name="Total Reserved")
    wait_on_stream: Any = None
    wait_on_cuda_event_id: Any = None
    sync_kind: Any = field(default=None, name="cuda_sync_kind")
    # metadata events (ph M)
    name: Any = None
    labels: Any = None
    sort_index: Any = None


class Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Raw = _EMPTY
    dur: Raw = _EMPTY
    id: Any = None
    args: Args | None = None


# Category (today's and 2021's) -> the table the event goes to.
KIND_OF_CAT: dict[Any, str] = {
    "cpu_op": "op",
    "Operator": "op",
    "user_annotation": "op",
    "python_function": "python",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "runtime",
    "kernel": "gpu",
    "Kernel": "gpu",
    "gpu_memcpy": "gpu",
    "Memcpy": "gpu",
    "gpu_memset": "gpu",
    "Memset": "gpu",
    "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_annotation",
    "ac2g": "flow",
    "async": "flow",
    "fwdbwd": "flow",
}

_NO_ARGS = Args()


def _raw_text(r: Raw) -> bytes:
    return bytes(r)


def _args(events: list[Event]) -> list[Args]:
    return [e.args or _NO_ARGS for e in events]


def _common(events: list[Event]) -> dict[str, list]:
    return {
        "cat": [e.cat for e in events],
        "name": [e.name for e in events],
        "pid": [e.pid for e in events],
        "tid": [e.tid for e in events],
        "ts": [bytes(e.ts) for e in events],
        "dur": [bytes(e.dur) for e in events],
    }


def _op_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["external_id"] = [x.external_id if x.external_id is not None else x.external_id_2021 for x in a]
    cols["sequence_number"] = [x.sequence_number for x in a]
    cols["fwd_thread_id"] = [x.fwd_thread_id for x in a]
    cols["input_dims"] = [bytes(x.input_dims) for x in a]
    cols["input_type"] = [bytes(x.input_type) for x in a]
    cols["call_stack"] = [x.call_stack for x in a]
    return cols


def _python_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["python_id"] = [x.python_id for x in a]
    cols["python_parent_id"] = [x.python_parent_id for x in a]
    return cols


def _runtime_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["correlation"] = [x.correlation for x in a]
    cols["external_id"] = [x.external_id if x.external_id is not None else x.external_id_2021 for x in a]
    cols["cbid"] = [x.cbid for x in a]
    return cols


def _gpu_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = [x.device for x in a]
    cols["stream"] = [x.stream for x in a]
    cols["correlation"] = [x.correlation for x in a]
    cols["external_id"] = [x.external_id if x.external_id is not None else x.external_id_2021 for x in a]
    cols["bytes"] = [x.bytes for x in a]
    cols["bandwidth"] = [x.bandwidth for x in a]
    cols["grid"] = [bytes(x.grid) for x in a]
    cols["block"] = [bytes(x.block) for x in a]
    cols["graph_id"] = [x.graph_id for x in a]
    return cols


def _sync_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = [x.device for x in a]
    cols["stream"] = [x.stream for x in a]
    cols["correlation"] = [x.correlation for x in a]
    cols["wait_on_stream"] = [x.wait_on_stream for x in a]
    cols["wait_on_event"] = [x.wait_on_cuda_event_id for x in a]
    cols["sync_kind"] = [x.sync_kind for x in a]
    return cols


def _annotation_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = [x.device for x in a]
    cols["external_id"] = [x.external_id if x.external_id is not None else x.external_id_2021 for x in a]
    return cols


def _memory_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device_type"] = [x.device_type for x in a]
    cols["device_id"] = [x.device_id for x in a]
    cols["addr"] = [x.addr for x in a]
    cols["bytes"] = [x.alloc_bytes for x in a]
    cols["total_allocated"] = [x.total_allocated for x in a]
    cols["total_reserved"] = [x.total_reserved for x in a]
    return cols


def _flow_columns(events: list[Event]) -> dict[str, list]:
    cols = _common(events)
    cols["ph"] = [e.ph for e in events]
    cols["id"] = [e.id for e in events]
    return cols


def _meta_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    return {
        "name": [e.name for e in events],
        "pid": [e.pid for e in events],
        "tid": [e.tid for e in events],
        "value": [x.name if x.name is not None else x.labels for x in a],
        "sort_index": [x.sort_index for x in a],
    }


def _other_columns(events: list[Event]) -> dict[str, list]:
    cols = _common(events)
    cols["ph"] = [e.ph for e in events]
    return cols


COLUMN_BUILDERS = {
    "op": _op_columns,
    "python": _python_columns,
    "runtime": _runtime_columns,
    "gpu": _gpu_columns,
    "sync": _sync_columns,
    "gpu_annotation": _annotation_columns,
    "memory": _memory_columns,
    "flow": _flow_columns,
    "meta": _meta_columns,
    "other": _other_columns,
}

DECODER = msgspec.json.Decoder(list[Event])


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def kind_of(e: Event) -> str:
    kind = KIND_OF_CAT.get(e.cat)
    if kind is not None:
        return kind
    if e.ph == "M":
        return "meta"
    if e.name == "[memory]":
        return "memory"
    return "other"


def bucket(events: list[Event], counts: Counter) -> dict[str, list[Event]]:
    """Group a chunk's events by table, counting (cat, ph) as they pass."""
    buckets: dict[str, list[Event]] = {}
    for e in events:
        try:
            kind = KIND_OF_CAT.get(e.cat) or kind_of(e)
            hash(e.ph)
        except TypeError:  # an object or array where cat / ph belongs: treat it as absent
            e.cat = e.cat if _hashable(e.cat) else None
            e.ph = e.ph if _hashable(e.ph) else None
            kind = KIND_OF_CAT.get(e.cat) or kind_of(e)
        b = buckets.get(kind)
        if b is None:
            b = buckets[kind] = []
        b.append(e)
    counts.update((e.cat, e.ph) for e in events)
    return buckets
