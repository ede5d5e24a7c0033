"""Cut the `traceEvents` array into chunks of whole events without parsing it in Python.

A chunk is cut at the last `}` `,` `{` (white space allowed) in the buffer. Such a cut can
fall inside an event only where an event holds a list of objects or a string holding those
characters; the decoder then rejects the chunk (its braces or quotes do not balance) and the
next earlier cut is tried, so a chunk that decodes is always made of whole events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import msgspec

from traceanalyzer.errors import NotATraceError, TraceReadError
from traceanalyzer.load.source import ByteSource

CHUNK_BYTES = 16 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEADER_LIMIT = 256 << 20  # metadata before traceEvents is never this large in a real trace
_MAX_RETRIES = 64


@dataclass
class Split:
    """What the splitter learned besides the events themselves."""

    metadata: dict[str, Any] = field(default_factory=dict)
    truncated: str | None = None  # where and why the events stopped early
    skipped_bytes: int = 0  # bytes after the last complete event that could not be read


def _loads_object(text: bytes) -> dict[str, Any] | None:
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


class EventSplitter:
    """Iterate over byte chunks, each `[ev, ev, ...]` ready for the decoder.

    `try_decode(chunk) -> bool` is called by the consumer; the splitter uses the same decoder
    to validate cuts, so each chunk is decoded exactly once on the happy path.
    """

    def __init__(self, source: ByteSource, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.split = Split()

    # -- header -----------------------------------------------------------------------------
    def _read_header(self) -> bytes:
        buf = b""
        while True:
            data = self.source.read(self.chunk_bytes)
            buf += data
            stripped = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
            if stripped[:1] == b"[":  # a bare Chrome-trace array
                return stripped[1:]
            m = _KEY.search(buf)
            if m:
                head = buf[: m.start()].lstrip(b"\xef\xbb\xbf \t\r\n").rstrip()
                if head.endswith(b","):
                    head = head[:-1]
                meta = _loads_object(head + b"}") if head.startswith(b"{") else None
                if meta is None:
                    raise NotATraceError(self.source.name, "the JSON before traceEvents is malformed")
                self.split.metadata.update(meta)
                return buf[m.end():]
            if not data or len(buf) > _HEADER_LIMIT:
                self._no_events(buf)
                return b""

    def _no_events(self, buf: bytes) -> None:
        body = buf.lstrip(b"\xef\xbb\xbf \t\r\n")
        if not body:
            raise TraceReadError(self.source.name, "file is empty")
        if body[:1] not in (b"{", b"["):
            raise TraceReadError(self.source.name, "not JSON (does not start with '{' or '[')")
        meta = _loads_object(body)
        if meta is None:
            raise TraceReadError(self.source.name, "not valid JSON and has no traceEvents array")
        raise NotATraceError(self.source.name, "JSON without a traceEvents array: not a Chrome/Kineto trace")

    # -- events -----------------------------------------------------------------------------
    def chunks(self, try_decode: Callable[[bytes], bool]) -> Iterator[None]:
        """Drive the decoding: for every accepted chunk `try_decode` has already consumed it."""
        buf = self._read_header().lstrip()
        if buf.startswith(b"{") or not buf:
            pass
        elif buf.startswith(b"]"):
            self._tail(buf[1:])
            return
        eof = False
        while True:
            if not eof and len(buf) < self.chunk_bytes:
                data = self.source.read(self.chunk_bytes)
                if data:
                    buf += data
                    continue
                eof = True
            if eof:
                yield from self._finish(buf, try_decode)
                return
            cut = self._cut(buf, try_decode)
            if cut is None:  # one event larger than the buffer: read more
                data = self.source.read(self.chunk_bytes)
                if not data:
                    eof = True
                buf += data
                continue
            buf = buf[cut:]
            yield None

    def _cut(self, buf: bytes, try_decode: Callable[[bytes], bool]) -> int | None:
        """Decode the longest prefix of whole events; return where the rest starts."""
        end = len(buf)
        for _ in range(_MAX_RETRIES):
            window_start = max(0, end - (1 << 20))
            last = None
            for last in _BOUNDARY.finditer(buf, window_start, end):
                pass
            if last is None:
                if window_start == 0:
                    return None
                end = window_start + 16
                continue
            if try_decode(b"[" + buf[: last.start() + 1] + b"]"):
                return last.end() - 1
            end = last.start()
        return None

    def _finish(self, buf: bytes, try_decode: Callable[[bytes], bool]) -> Iterator[None]:
        for m in _ARRAY_END.finditer(buf):
            if try_decode(b"[" + buf[: m.start() + 1] + b"]"):
                self._tail(buf[m.end():])
                yield None
                return
        # No closing bracket after whole events: the trace was cut short. Keep every whole event.
        stripped = buf.rstrip()
        if stripped.endswith(b"}") and try_decode(b"[" + stripped + b"]"):
            self._mark_truncated(b"", "the events array is not closed")
            yield None
            return
        cut = self._cut(buf, try_decode)
        if cut is not None:
            yield None
            self._mark_truncated(buf[cut:], "the trace ends in the middle of an event")
        else:
            self._mark_truncated(buf, "the trace ends in the middle of an event")

    def _mark_truncated(self, rest: bytes, why: str) -> None:
        cause = self.source.truncated
        self.split.truncated = f"{why}{f' ({cause})' if cause else ''}"
        self.split.skipped_bytes = len(rest.strip())

    def _tail(self, rest: bytes) -> None:
        """Top-level keys after the events array (traceName, baseTimeNanoseconds, ...)."""
        rest = rest.strip()
        if rest.startswith(b","):
            meta = _loads_object(b"{" + rest[1:])
            if meta is not None:
                self.split.metadata.update(meta)
