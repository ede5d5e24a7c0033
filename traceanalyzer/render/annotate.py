"""`annotate`: the original trace plus a "traceanalyzer" process whose tracks mark what the
analyses found, so Perfetto and chrome://tracing show the findings in place.

Tracks (thread ids inside the added process):
- `GPU <d> idle gaps` (tid 1 + d): one X event per listed gap (>= --min-gap), named by cause;
- `sync stalls` (tid 1000): each blocking runtime call at least --min-gap long;
- `exposed copies` (tid 1001): each copy with time not hidden under compute.

Every original event is written back as its exact bytes (the events array is decoded into raw
slices, never re-encoded), so nothing in it changes, timestamps' nanosecond digits included.
Only the top-level metadata is re-encoded, through `redact` (environment, tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import polars as pl

from traceanalyzer.causes import HINTS
from traceanalyzer.errors import TraceReadError
from traceanalyzer.redact import redact
from traceanalyzer.trace import Trace
from traceanalyzer.units import us_expr

PROCESS_NAME = "traceanalyzer"
CATEGORY = "traceanalyzer"
SYNC_TID = 1000
COPY_TID = 1001
GZIP_MAGIC = b"\x1f\x8b"


class _GapOptions(Protocol):
    min_gap_us: float


class ListedGaps(Protocol):
    """What the annotations read of the gaps (`analyses.gaps.GapsResult` fits)."""

    options: _GapOptions
    has_gpu_work: bool
    gaps_ns: pl.DataFrame  # device, step, start_ns, duration_ns, cause, op, range, python_frame, ...


class SyncStalls(Protocol):
    """What the annotations read of the syncs (`analyses.syncs.SyncsResult` fits)."""

    note: str | None
    stalls_ns: pl.DataFrame  # api, start_ns, blocked_ns, tid, op, range, python_frame


@dataclass(frozen=True)
class Annotations:
    """The events `annotate` adds to a trace, and how many of each kind."""

    pid: int
    events: list[bytes]  # encoded JSON events, metadata (ph M) first
    counts: dict[str, int]  # track -> X events


def read_document(path: str) -> tuple[dict[str, msgspec.Raw], list[msgspec.Raw]]:
    """The top-level object as raw values, and the events as raw slices of the input."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TraceReadError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] == GZIP_MAGIC:
        try:
            from isal import igzip as gz
        except ImportError:  # pragma: no cover - isal is a dependency; plain gzip works too
            import gzip as gz
        try:
            data = gz.decompress(data)
        except (OSError, EOFError, ValueError) as exc:
            raise TraceReadError(path, f"annotate needs a complete gzip file ({exc})") from None
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
        events = msgspec.json.decode(top.get("traceEvents", b"[]"), type=list[msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise TraceReadError(path, f"annotate needs a complete, valid JSON trace object ({exc})") from None
    return top, events


def _ts(ns: int) -> str:
    """Microseconds with exactly three decimals: nanoseconds kept, no float rounding."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _event(name: str, pid: int, tid: int, start_ns: int, dur_ns: int, args: dict[str, Any]) -> bytes:
    clean = {k: v for k, v in args.items() if v is not None}
    return (
        b'{"ph":"X","cat":"'
        + CATEGORY.encode()
        + b'","name":'
        + msgspec.json.encode(name)
        + b',"pid":'
        + str(pid).encode()
        + b',"tid":'
        + str(tid).encode()
        + b',"ts":'
        + _ts(start_ns).encode()
        + b',"dur":'
        + _ts(max(dur_ns, 0)).encode()
        + b',"args":'
        + msgspec.json.encode(clean)
        + b"}"
    )


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> bytes:
    return msgspec.json.encode({"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args})


def free_pid(trace: Trace) -> int:
    """A process id no table of the trace uses."""
    used = [
        t["pid"].max()
        for t in (trace.ops, trace.runtime, trace.gpu, trace.python, trace.thread_names)
        if t.height and "pid" in t.columns
    ]
    used = [u for u in used if u is not None]
    return max(used + [0]) + 1


def build_annotations(
    trace: Trace,
    gaps: ListedGaps,
    copies: pl.DataFrame | None = None,
    min_us: float | None = None,
    syncs: SyncStalls | None = None,
) -> Annotations:
    """Events marking the gaps (>= the gaps' min_gap_us), the sync stalls (the `syncs`
    analysis' synchronising calls blocking that long) and the exposed copies (`copies`: the
    copies analysis' ns table). Times are taken in ns from the results, as the trace has them."""
    pid = free_pid(trace)
    min_us = gaps.options.min_gap_us if min_us is None else min_us
    origin = trace.meta.origin_ns
    out: list[bytes] = [
        _meta("process_name", pid, 0, {"name": PROCESS_NAME}),
        _meta("process_sort_index", pid, 0, {"sort_index": -1}),
    ]
    counts: dict[str, int] = {}
    listed = gaps.gaps_ns if gaps.has_gpu_work else pl.DataFrame()
    if listed.height:
        for dev in sorted(listed["device"].drop_nulls().unique().to_list()):
            out.append(_meta("thread_name", pid, 1 + dev, {"name": f"GPU {dev} idle gaps"}))
        for r in listed.sort("start_ns").with_columns(us_expr("duration_ns", origin)).iter_rows(named=True):
            out.append(
                _event(
                    f"idle: {r['cause']}",
                    pid,
                    1 + r["device"],
                    r["start_ns"],
                    r["duration_ns"],
                    {
                        "cause": r["cause"],
                        "duration_us": r["duration_us"],
                        "step": r["step"],
                        "op": r["op"],
                        "range": r["range"],
                        "python_frame": r["python_frame"],
                        "waited_on": r["waited_on"],
                        "next_activity": r["next_activity"],
                        "hint": HINTS.get(r["cause"]),
                    },
                )
            )
            key = f"GPU {r['device']} idle gaps"
            counts[key] = counts.get(key, 0) + 1
    stalls = (
        syncs.stalls_ns.filter(pl.col("blocked_ns") >= min_us * 1000).sort("start_ns")
        if syncs is not None and not syncs.note
        else pl.DataFrame()
    )
    if stalls.height:
        out.append(_meta("thread_name", pid, SYNC_TID, {"name": "sync stalls (CPU blocked until the GPU caught up)"}))
        for r in stalls.iter_rows(named=True):
            out.append(
                _event(
                    f"sync stall: {r['api']}",
                    pid,
                    SYNC_TID,
                    r["start_ns"],
                    r["blocked_ns"],
                    {
                        "api": r["api"],
                        "thread": r["tid"],
                        "op": r["op"],
                        "range": r["range"],
                        "python_frame": r["python_frame"],
                    },
                )
            )
        counts["sync stalls"] = stalls.height
    if copies is not None and copies.height and "exposed_ns" in copies.columns:
        exposed = copies.filter(pl.col("exposed_ns") > 0).sort("start_ns").with_columns(us_expr("exposed_ns", origin))
        if exposed.height:
            out.append(_meta("thread_name", pid, COPY_TID, {"name": "exposed copies (not hidden under compute)"}))
            for r in exposed.iter_rows(named=True):
                label = " ".join(str(x) for x in (r.get("kind"), r.get("direction")) if x)
                out.append(
                    _event(
                        f"exposed copy: {label}",
                        pid,
                        COPY_TID,
                        r["start_ns"],
                        r["duration_ns"],
                        {
                            "bytes": r.get("bytes"),
                            "exposed_us": r["exposed_us"],
                            "gbps": r.get("gbps"),
                            "host_memory": r.get("host_memory"),
                            "op": r.get("op"),
                            "range": r.get("range"),
                            "python_frame": r.get("python_frame"),
                        },
                    )
                )
            counts["exposed copies"] = exposed.height
    return Annotations(pid, out, counts)


def annotated_document(top: dict[str, msgspec.Raw], events: list[msgspec.Raw], added: list[bytes]) -> bytes:
    """The trace object again: metadata redacted, original events byte for byte, then ours."""
    parts = []
    for key, raw in top.items():
        k = msgspec.json.encode(key)
        if key == "traceEvents":
            body = b",\n".join([bytes(e) for e in events] + added)
            parts.append(k + b":[\n" + body + b"\n]")
        else:
            parts.append(k + b":" + msgspec.json.encode(redact(msgspec.json.decode(raw), key)))
    if "traceEvents" not in top:
        parts.append(b'"traceEvents":[\n' + b",\n".join(added) + b"\n]")
    return b"{\n" + b",\n".join(parts) + b"\n}\n"


def compress(data: bytes) -> bytes:
    """gzip bytes (isal when available)."""
    try:
        from isal import igzip as gz
    except ImportError:  # pragma: no cover
        import gzip as gz
    return gz.compress(data)
