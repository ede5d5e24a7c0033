"""Typed decoding of one chunk of events into per-kind column lists.

msgspec decodes straight into slotted structs (no dicts), reading only the fields below; every
other key is skipped in C. `ts` and `dur` stay raw text so that nanosecond digits survive
(a float64 of epoch microseconds, ~1.7e15, has a resolution of 0.25 us). Field types are loose
(`Any`) because real traces put strings where numbers belong; `normalize` casts them.
The structs are not tracked by the garbage collector (`gc=False`: decoded JSON holds no
cycles); millions of tracked objects would make each collection pass walk them all, which
doubled the decoding time.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec
from msgspec import Raw, field

_EMPTY = Raw(b"")
SEP = b"\x00"


class Args(msgspec.Struct, gc=False):
    """The args of an event the analyses read, each decoded loosely (a wrong type is absent, not an error)."""

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
    concrete_inputs: Raw = field(default=_EMPTY, name="Concrete Inputs")
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


class Event(msgspec.Struct, gc=False):
    """One entry of traceEvents, as msgspec decodes it (untracked by the garbage collector)."""

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
# Launch -> kernel flow arrows: a third of a trace's events, and the `correlation` arg of the
# runtime call and the kernel gives the same link. They are counted in `event_counts` but get
# no rows: `flows` holds the forward -> backward arrows (`fwdbwd`) only.
SKIPPED_FLOW_CATS = frozenset({"ac2g", "async"})


def _get(events: list, attr: str) -> list:
    return list(map(attrgetter(attr), events))


def _args(events: list[Event]) -> list[Args]:
    return [e.args or _NO_ARGS for e in events]


def _ext(a: list[Args]) -> list:
    ext = _get(a, "external_id")
    if None in ext:
        old = _get(a, "external_id_2021")
        ext = [x if x is not None else y for x, y in zip(ext, old)]
    return ext


class RawTexts(NamedTuple):
    """The raw JSON texts of one field of n events, joined by NUL (b"" where absent).

    Joining the `Raw` values (they are buffers) costs ~10 ns an event; making a bytes object
    of each cost ~100 ns, and polars then had to read them one by one. NUL cannot occur in a
    JSON text that msgspec accepted (control characters must be escaped inside strings), so
    `normalize` splits the texts again in one vectorised step."""

    data: bytes
    n: int


def _raw(values: list, attr: str) -> RawTexts:
    return RawTexts(SEP.join(map(attrgetter(attr), values)), len(values))


def _common(events: list[Event]) -> dict[str, list]:
    return {
        "cat": _get(events, "cat"),
        "name": _get(events, "name"),
        "pid": _get(events, "pid"),
        "tid": _get(events, "tid"),
        "ts": _raw(events, "ts"),
        "dur": _raw(events, "dur"),
    }


def _op_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["external_id"] = _ext(a)
    cols["sequence_number"] = _get(a, "sequence_number")
    cols["fwd_thread_id"] = _get(a, "fwd_thread_id")
    cols["input_dims"] = _raw(a, "input_dims")
    cols["input_type"] = _raw(a, "input_type")
    cols["concrete_inputs"] = _raw(a, "concrete_inputs")
    cols["call_stack"] = _get(a, "call_stack")
    return cols


def _python_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["python_id"] = _get(a, "python_id")
    cols["python_parent_id"] = _get(a, "python_parent_id")
    return cols


def _runtime_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["correlation"] = _get(a, "correlation")
    cols["external_id"] = _ext(a)
    cols["cbid"] = _get(a, "cbid")
    return cols


def _gpu_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = _get(a, "device")
    cols["stream"] = _get(a, "stream")
    cols["correlation"] = _get(a, "correlation")
    cols["external_id"] = _ext(a)
    cols["bytes"] = _get(a, "bytes")
    cols["bandwidth"] = _get(a, "bandwidth")
    cols["grid"] = _raw(a, "grid")
    cols["block"] = _raw(a, "block")
    cols["graph_id"] = _get(a, "graph_id")
    return cols


def _sync_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = _get(a, "device")
    cols["stream"] = _get(a, "stream")
    cols["correlation"] = _get(a, "correlation")
    cols["wait_on_stream"] = _get(a, "wait_on_stream")
    cols["wait_on_event"] = _get(a, "wait_on_cuda_event_id")
    cols["sync_kind"] = _get(a, "sync_kind")
    return cols


def _annotation_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device"] = _get(a, "device")
    cols["external_id"] = _ext(a)
    return cols


def _memory_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    cols = _common(events)
    cols["device_type"] = _get(a, "device_type")
    cols["device_id"] = _get(a, "device_id")
    cols["addr"] = _get(a, "addr")
    cols["bytes"] = _get(a, "alloc_bytes")
    cols["total_allocated"] = _get(a, "total_allocated")
    cols["total_reserved"] = _get(a, "total_reserved")
    return cols


def _flow_columns(events: list[Event]) -> dict[str, list]:
    cols = _common(events)
    cols["ph"] = _get(events, "ph")
    cols["id"] = _get(events, "id")
    return cols


def _meta_columns(events: list[Event]) -> dict[str, list]:
    a = _args(events)
    return {
        "name": _get(events, "name"),
        "pid": _get(events, "pid"),
        "tid": _get(events, "tid"),
        "value": [x.name if x.name is not None else x.labels for x in a],
        "sort_index": _get(a, "sort_index"),
    }


def _other_columns(events: list[Event]) -> dict[str, list]:
    cols = _common(events)
    cols["ph"] = _get(events, "ph")
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
    """The table an event goes to (op, runtime, gpu, python, ...), from its category and phase."""
    kind = KIND_OF_CAT.get(e.cat)
    if kind is not None:
        return kind
    if e.ph == "M":
        return "meta"
    if e.name == "[memory]":
        return "memory"
    return "other"


def bucket(events: list[Event], counts: Counter) -> dict[str, list[Event]]:
    """Group a chunk's events by table, counting (cat, ph) as they pass. Launch flows
    (`SKIPPED_FLOW_CATS`) are counted only."""
    try:
        seen = Counter(map(_CAT_PH, events))
    except TypeError:  # an object or array where cat / ph belongs: treat it as absent
        for e in events:
            e.cat = e.cat if _hashable(e.cat) else None
            e.ph = e.ph if _hashable(e.ph) else None
        seen = Counter(map(_CAT_PH, events))
    counts.update(seen)
    lists: dict[str, list[Event]] = {}
    skipped: list[Event] = []
    by_cat: dict[Any, Any] = {}  # cat -> append of its kind's list (None: decided per event)
    for cat, _ph in seen:
        kind = KIND_OF_CAT.get(cat)
        if kind is None:
            by_cat[cat] = None
        elif cat in SKIPPED_FLOW_CATS:
            by_cat[cat] = skipped.append
        else:
            by_cat[cat] = lists.setdefault(kind, []).append
    for e in events:
        add = by_cat[e.cat]
        if add is None:
            kind = kind_of(e)
            add = lists.setdefault(kind, []).append
        add(e)
    return {k: v for k, v in lists.items() if v}


_CAT_PH = attrgetter("cat", "ph")
