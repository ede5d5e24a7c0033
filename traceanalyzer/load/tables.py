"""Serial decoding: `RawTables` accumulates the typed tables of a trace chunk by chunk, and
`read_serial` drives it over a whole source, salvaging damage and wording the warnings.

The parallel path (`parallel.py`) feeds worker results into the same `RawTables` and words its
warnings with the same `read_warnings`, so both paths give the same tables."""

from __future__ import annotations

import re
from collections import Counter
from contextlib import nullcontext

import msgspec
import polars as pl

from traceanalyzer.errors import TraceReadError
from traceanalyzer.load import native
from traceanalyzer.load.chunks import CHUNK_BYTES, EventSplitter
from traceanalyzer.load.decode import COLUMN_BUILDERS, DECODER, Event, bucket
from traceanalyzer.load.normalize import BIG_IDS, FRAME_BUILDERS, STATS, STRING_IDS, empty_frame
from traceanalyzer.load.repair import BARE, CONTROL
from traceanalyzer.load.repair import fix_utf8 as _fix_utf8
from traceanalyzer.load.source import ByteSource, Prefetch
from traceanalyzer.load.split import Split
from traceanalyzer.wording import plural

_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT = msgspec.json.Decoder(Event)
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_BYTE = re.compile(r"\(byte (\d+)\)")
NOT_UTF8 = "bytes that are not UTF-8"
NOT_OBJECTS = "entries of traceEvents that are not objects"
BAD_ARGS = "events whose args is not an object"


def _error_position(exc: msgspec.DecodeError) -> int | None:
    m = _BYTE.search(str(exc))
    return int(m.group(1)) if m else None  # no position: "Input data was truncated"


class RawTables:
    """Accumulates the typed tables of a trace chunk by chunk.

    Chunks the native decoder reads are appended to its columns in Rust (`columns`), handed
    over once by `tables`; chunks the Python decoder reads become frames in `parts`, each
    remembering how many native rows of its kind came before it, so that `tables` puts the
    rows back in file order however the two kinds of chunk are mixed."""

    def __init__(self, use_native: bool | None = None) -> None:
        self.parts: dict[str, list[pl.DataFrame]] = {k: [] for k in FRAME_BUILDERS}
        self._native_rows_before: dict[str, list[int]] = {k: [] for k in FRAME_BUILDERS}
        self.counts: Counter = Counter()
        self.fixes: Counter = Counter()  # loose values made uniform, entries dropped
        self.events = 0
        self.error_pos: int | None = None  # byte position of the last decode failure
        # The native decoder first (see native.py); a chunk it does not read is read below.
        self.native = native.enabled() if use_native is None else use_native and native.available()
        self.columns = native.columns() if self.native else None  # the natively read rows
        self.declined = 0  # chunks the native decoder left to the Python one

    def error(self) -> int | None:
        """Byte position of the last decode failure, for the splitter's salvage."""
        return self.error_pos

    def _loose(self, data: bytes) -> list[Event] | None:
        """A chunk that is valid JSON but not all events: decode one entry at a time, dropping
        what is not an object and args that are not an object."""
        try:
            raws = _RAW_LIST.decode(data)
        except msgspec.DecodeError as exc:
            self.error_pos = _error_position(exc)
            return None
        events = []
        for raw in raws:
            try:
                events.append(_EVENT.decode(raw))
                continue
            except msgspec.ValidationError:
                pass
            try:
                fields = _FIELDS.decode(raw)
            except msgspec.ValidationError:
                self.fixes[NOT_OBJECTS] += 1
                continue
            args = fields.pop("args", None)
            if args is not None and bytes(args).lstrip()[:1] != b"{":
                self.fixes[BAD_ARGS] += 1
            try:
                events.append(_EVENT.decode(msgspec.json.encode(fields)))
            except msgspec.ValidationError:  # pragma: no cover - every other field is loose
                self.fixes[NOT_OBJECTS] += 1
        return events

    def add_chunk(self, data: bytes | memoryview) -> bool:
        """Decode one chunk of events into the tables; False when it cannot be read whole."""
        if self.native:
            decoded = native.decode(data)
            if decoded is not None:
                self.error_pos = None
                self.events += native.add_pieces(decoded, self.columns, self.counts, self.fixes)
                return True
            self.declined += 1
        try:
            events = DECODER.decode(data)
        except UnicodeDecodeError:
            data = bytes(data)
            fixed = _fix_utf8(data)
            if fixed == data:  # pragma: no cover - msgspec and Python disagree on UTF-8
                self.error_pos = None
                return False
            ok = self.add_chunk(fixed)
            if ok:
                self.fixes[NOT_UTF8] += sum(a != b for a, b in zip(data, fixed))
            return ok
        except msgspec.ValidationError:
            events = self._loose(bytes(data))
            if events is None:
                return False
        except msgspec.DecodeError as exc:
            self.error_pos = _error_position(exc)
            return False
        self.error_pos = None
        self.events += len(events)
        token = STATS.set(self.fixes)
        native_rows = dict(zip(FRAME_BUILDERS, self.columns.rows())) if self.columns is not None else {}
        try:
            for kind, evs in bucket(events, self.counts).items():
                self.parts[kind].append(FRAME_BUILDERS[kind](COLUMN_BUILDERS[kind](evs)))
                self._native_rows_before[kind].append(native_rows.get(kind, 0))
        finally:
            STATS.reset(token)
        return True

    def tables(self) -> dict[str, pl.DataFrame]:
        """The accumulated tables, one per kind (parts released as they are joined; the native
        columns are taken once)."""
        natives = native.frames(self.columns) if self.columns is not None else {}
        self.columns = None
        out = {}
        for kind, parts in self.parts.items():
            nat = natives.pop(kind, None)
            if nat is not None and not parts:
                out[kind] = nat  # the usual case: one chunk per column, no concatenation
                continue
            if nat is not None:
                parts[:] = _in_file_order(nat, parts, self._native_rows_before[kind])
            # No rechunk: it would hold every table twice at the peak; polars works on chunks.
            out[kind] = pl.concat(parts, how="vertical_relaxed", rechunk=False) if parts else empty_frame(kind)
            parts.clear()
        return out


def _in_file_order(nat: pl.DataFrame, parts: list[pl.DataFrame], before: list[int]) -> list[pl.DataFrame]:
    """The native rows (sliced, no copy) and the Python decoder's frames, in file order:
    `before[i]` native rows came before `parts[i]`."""
    out, at = [], 0
    for part, n in zip(parts, before, strict=True):
        if n > at:
            out.append(nat.slice(at, n - at))
            at = n
        out.append(part)
    if at < nat.height:
        out.append(nat.slice(at))
    return out


def _regions(damaged: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent skipped spans merged into regions."""
    out: list[list[int]] = []
    for off, n in sorted(damaged):
        if out and off <= out[-1][0] + out[-1][1] + 2:
            out[-1][1] = max(out[-1][1], off + n - out[-1][0])
        else:
            out.append([off, n])
    return [(a, b) for a, b in out]


def read_warnings(split: Split, raw: RawTables, source: ByteSource) -> list[str]:
    """The warnings a read leaves: truncation, damaged regions skipped, values repaired."""
    warnings = []
    if split.truncated:
        where = f" at byte {split.truncated_at:,}" if split.truncated_at is not None else ""
        warnings.append(
            f"trace is truncated: {split.truncated}{where}; analysed the {raw.events:,} complete events "
            f"read from {source.decompressed_bytes:,} bytes ({split.skipped_bytes:,} bytes after "
            "the last complete event were skipped)"
        )
    regions = _regions(split.damaged)
    if regions:
        total = sum(n for _, n in regions)
        warnings.append(
            f"{plural(len(regions), 'damaged region')} ({total:,} bytes, the first at "
            f"byte {regions[0][0]:,}) could not be read and {'were' if len(regions) > 1 else 'was'} skipped; "
            f"reading went on after {'each' if len(regions) > 1 else 'it'}: {raw.events:,} events read"
        )
    if split.repairs[CONTROL]:
        warnings.append(f"escaped {split.repairs[CONTROL]:,} unescaped control characters inside strings")
    if split.repairs[BARE]:
        warnings.append(f"read {split.repairs[BARE]:,} bare N/A, NaN or Infinity values as absent")
    if raw.fixes[NOT_UTF8]:
        warnings.append(f"replaced {raw.fixes[NOT_UTF8]:,} bytes that are not UTF-8 by '?'")
    if raw.fixes[NOT_OBJECTS]:
        warnings.append(f"ignored {raw.fixes[NOT_OBJECTS]:,} entries of traceEvents that are not objects")
    if raw.fixes[BAD_ARGS]:
        warnings.append(f"ignored the args of {raw.fixes[BAD_ARGS]:,} events whose args is not an object")
    if raw.fixes[STRING_IDS]:
        warnings.append(
            f'{raw.fixes[STRING_IDS]:,} pid/tid values were written as strings (as 2021 traces do: "25738", "stream 7"); the number in each was used'
        )
    if raw.fixes[BIG_IDS]:
        warnings.append(f"{raw.fixes[BIG_IDS]:,} ids do not fit int64 and were left unknown (their links are lost)")
    return warnings


def read_serial(
    source: ByteSource, chunk_bytes: int | None = None, use_native: bool | None = None
) -> tuple[dict[str, pl.DataFrame], dict, Counter, list[str]]:
    """Decode every event of `source` in this process; returns (tables, metadata, counts,
    warnings). Damage is salvaged (see chunks.py) and reported in the warnings; a source from
    which not one event could be read because of damage raises TraceReadError. `use_native`
    None: the native decoder when enabled (native.py), in chunks of a few MB per thread."""
    raw = RawTables(use_native)
    if chunk_bytes is None:
        chunk_bytes = native.chunk_bytes() if raw.native else CHUNK_BYTES
    # The native decoder releases the GIL: inflate (or fetch) the next block on a thread
    # meanwhile. A plain local file is read straight into the splitter's buffer, the kernel
    # reading ahead (`ByteSource.regular`): no thread, no copy through a block (at 100 MB ~20 ms);
    # nor plain JSON in memory (a rank file the directory mode inflated once: a thread and its
    # blocks cost ~1 ms of a 0.9 MB DLRM rank).
    prefetch = raw.native and (source.compressed or not (source.regular or source.in_memory))
    with Prefetch(source, chunk_bytes) if prefetch else nullcontext(source) as reader:
        splitter = EventSplitter(reader, chunk_bytes)
        for _ in splitter.chunks(raw.add_chunk, raw.error):
            pass
    split = splitter.split
    if raw.events == 0 and (split.truncated or split.damaged or raw.fixes[NOT_OBJECTS]):
        why = split.truncated or ("damaged" if split.damaged else "no entry of traceEvents is an object")
        raise TraceReadError(source.name, f"no complete event could be read ({why})")
    return raw.tables(), split.metadata, raw.counts, read_warnings(split, raw, source)
