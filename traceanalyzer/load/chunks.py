"""Cut the `traceEvents` array into chunks of whole events without parsing it in Python.

A chunk is cut at the last `}` `,` `{` (white space allowed) in the buffer. Such a cut can
fall inside an event only where an event holds a list of objects or a string holding those
characters; a prefix of valid JSON then fails to decode only as *incomplete* (the error sits at
the closing bracket we added), and the next earlier cut is tried, so a chunk that decodes is
always made of whole events.

A chunk that fails *before* its end is damaged there. Then (1) the whole chunk is tried again
after `repair.repair_fast`; if it still fails, (2) the events before the damaged one are decoded
as one chunk, the damaged event (up to the next cut) is repaired with `repair.repair_exact` or,
failing that, skipped and counted, and reading goes on after it with a small window that grows
back as chunks decode. So one bad event costs that event only, never the rest of the file.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator

from traceanalyzer.errors import NotATraceError, TraceReadError
from traceanalyzer.load.repair import repair_exact, repair_fast
from traceanalyzer.load.source import Block, ByteSource
from traceanalyzer.load.split import Split, loads_object, tail_keys, tail_ok

CHUNK_BYTES = 4 << 20  # larger chunks are no faster and hold more Python objects at once
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_ANY_END = re.compile(rb"\]")
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_HEADER_READ = 64 << 10  # the first read, for the metadata before the events
_HEADER_LIMIT = 256 << 20  # metadata before traceEvents is never this large in a real trace
_MAX_RETRIES = 64
_RFIND_TRIES = 64
_MAX_EXTEND = 16  # cuts a damaged-then-repaired event may span (lists of objects inside it)
_SMALL_WINDOW = 64 << 10  # bytes per chunk right after damage; doubles on each clean chunk
_WS = b"\xef\xbb\xbf \t\r\n"
_SLACK = 64 << 10  # room in the buffer past two chunks

# try_decode(b"[...]") -> accepted?; error() -> byte position of the last failure in what
# try_decode was given, or None when the text was only incomplete (truncated at its end).
TryDecode = Callable[[bytes], bool]
ErrorPos = Callable[[], "int | None"]


class EventSplitter:
    """Iterate over byte chunks, each `[ev, ev, ...]` handed to `try_decode`.

    The splitter uses the consumer's decoder to validate cuts, so each chunk is decoded exactly
    once on the happy path.
    """

    def __init__(self, source: ByteSource, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.split = Split()
        self._window = chunk_bytes
        self._base = 0  # decompressed offset of the current buffer's first byte
        self._buffer: Block | None = None  # the reused buffer of events (see `chunks`)
        self._pinned = False  # a decoded value still holds a view of it
        self._decode: TryDecode = lambda b: False
        self._error: ErrorPos = lambda: None

    # -- header -----------------------------------------------------------------------------
    def _read_header(self) -> bytes:
        # Small reads first, doubling: the metadata before traceEvents is a few KB, and the
        # events after it are read into the chunk buffer once (`chunks`), not copied from a
        # whole chunk of header bytes (at 4 MiB, ~9 ms of a 10 MB trace's load).
        buf = b""
        want = min(_HEADER_READ, self.chunk_bytes)
        while True:
            data = self.source.read(want)
            buf += data
            want = min(want * 2, max(self.chunk_bytes, _HEADER_READ))
            stripped = buf.lstrip(_WS)
            if stripped[:1] == b"[":  # a bare Chrome-trace array
                self._base = len(buf) - len(stripped) + 1
                return stripped[1:]
            m = _KEY.search(buf)
            if m:
                head = buf[: m.start()].lstrip(_WS).rstrip()
                if head.endswith(b","):
                    head = head[:-1]
                meta = loads_object(head + b"}") if head.startswith(b"{") else None
                if meta is None:
                    raise NotATraceError(self.source.name, "the JSON before traceEvents is malformed")
                self.split.metadata.update(meta)
                self._base = m.end()
                return buf[m.end() :]
            if not data or len(buf) > _HEADER_LIMIT:
                self._no_events(buf)
                return b""

    def _no_events(self, buf: bytes) -> None:
        body = buf.lstrip(_WS)
        if not body:
            raise TraceReadError(self.source.name, "file is empty" if not buf else "file holds only white space")
        if body[:1] not in (b"{", b"["):
            raise TraceReadError(self.source.name, "not JSON (does not start with '{' or '[')")
        meta = loads_object(body)
        if meta is None:
            raise TraceReadError(self.source.name, "not valid JSON and has no traceEvents array")
        raise NotATraceError(self.source.name, "JSON without a traceEvents array: not a Chrome/Kineto trace")

    # -- decoding helpers -------------------------------------------------------------------
    def _try(self, body: bytes) -> tuple[bool, int | None]:
        """(accepted, damage position in body); position None means incomplete at the end."""
        if self._decode(b"[" + body + b"]"):
            return True, None
        p = self._error()
        if p is None or p - 1 >= len(body):
            return False, None
        return False, max(p - 1, 0)

    def _grow(self) -> None:
        self._window = min(self.chunk_bytes, self._window * 2)

    # -- events -----------------------------------------------------------------------------
    def chunks(self, try_decode: TryDecode, error: ErrorPos | None = None) -> Iterator[None]:
        """Drive the decoding: for every accepted chunk `try_decode` has already consumed it.

        The happy path allocates nothing per chunk: the events are read into one reused buffer
        (an anonymous mapping, `source.Block`, of about two chunks; the source's `readinto`
        fills it, or a copy of what `read` returns), and a chunk is handed to `try_decode` as a
        memoryview of it, framed in place (the separator byte before the first event becomes
        `[`, the one after the last event `]`, restored afterwards). A chunk the decoder
        rejects is handed, as bytes, to the validating path (`_cut`)."""
        self._decode = try_decode
        self._error = error or (lambda: None)
        head = self._read_header()
        n = len(head)
        head = head.lstrip()
        self._base += n - len(head)
        if head.startswith(b"]"):
            self._tail(head[1:])
            return
        # [start, end) are the unread events; the byte before start is a spare one (the
        # separator before them) that framing may overwrite.
        self._buffer = Block(max(2 * self.chunk_bytes, len(head)) + _SLACK)
        self._buffer.view[0] = 0x20
        self._buffer.view[1 : 1 + len(head)] = head
        start, end = 1, 1 + len(head)
        del head
        eof = False
        try:
            while True:
                if not eof and end - start < self.chunk_bytes:
                    start, end, got = self._refill(start, end)
                    if got:
                        continue
                    eof = True
                if eof:
                    yield from self._finish_view(start, end)
                    return
                cut = self._cut_view(start, end)
                if cut is None:
                    cut = self._cut(bytes(self._buffer.view[start:end]), eof=False)
                if not cut:  # one event larger than the window: read more
                    start, end, got = self._refill(start, end)
                    if not got:
                        eof = True
                    continue
                start += cut
                self._base += cut
                yield None
        finally:
            if not self._pinned:
                self._buffer.close()
            self._buffer = None

    def _refill(self, start: int, end: int) -> tuple[int, int, int]:
        """Move the unread bytes (and the spare byte before them) to the front, make room for
        a chunk and read into it: (start, end, bytes read). The buffer is replaced, not
        overwritten, while a decoded value still holds a view of it (`_pinned`), and grows
        only for an event larger than the window."""
        buf = self._buffer
        keep = end - (start - 1)
        if self._pinned or keep + self.chunk_bytes > buf.size:
            size = max(buf.size, 2 * (keep + self.chunk_bytes) if keep + self.chunk_bytes > buf.size else 0)
            new = Block(size)
            new.view[:keep] = buf.view[start - 1 : end]
            if not self._pinned:
                buf.close()
            self._buffer, self._pinned = new, False
        elif start > 1:
            buf.view[:keep] = buf.view[start - 1 : end]  # memmove: no copy of the bytes
        start, end = 1, keep
        got = self._read_into(self._buffer.view[end : end + self.chunk_bytes])
        return start, end + got, got

    def _read_into(self, out: memoryview) -> int:
        readinto = getattr(self.source, "readinto", None)
        if readinto is not None:
            return readinto(out)
        data = self.source.read(len(out))  # a source with `read` only
        out[: len(data)] = data
        return len(data)

    def _decode_framed(self, lo: int, hi: int) -> bool:
        """Decode the buffer's bytes [lo, hi], `[` at lo and `]` at hi for the call (the spare byte
        before the events, the separator after the last), then restored."""
        buf = self._buffer.map
        before, after = buf[lo], buf[hi]
        buf[lo], buf[hi] = 0x5B, 0x5D  # "[" and "]"
        chunk = self._buffer.view[lo : hi + 1]
        try:
            return self._decode(chunk)
        finally:
            buf[lo], buf[hi] = before, after
            # A decoded value still alive (msgspec's Raw keeps its input exported; say, in a
            # traceback) keeps the view: then the buffer is left to it and reading goes on in
            # a new one (`_refill`).
            try:
                chunk.release()
            except BufferError:
                self._pinned = True

    def _cut_view(self, start: int, end: int) -> int | None:
        """The happy path of `_cut` without copies: decode the events up to the last boundary
        in the window, framed in place; the cut (relative to start) or None when rejected."""
        buf = self._buffer.map
        end = min(end, start + self._window)
        last = self._last_boundary(buf, start, end)
        if last is None:
            return None
        if not self._decode_framed(start - 1, last.start() + 1):  # up to the separator after the last event
            return None
        self._grow()
        return last.end() - 1 - start

    def _last_boundary(self, buf: bytes, lo: int, hi: int) -> re.Match | None:
        """The last `},{` starting in [lo, hi) (and ending by hi).

        Found from the back: the last `}` is nearly always an event's end (a Kineto event ends
        `}` `}`), so a few `rfind`s do it; iterating over every boundary of a 1 MiB window
        took ~6 % of the load. Past `_RFIND_TRIES` misses (a huge event full of objects),
        the boundaries are searched in 1 MiB windows instead."""
        pos = hi
        for _ in range(_RFIND_TRIES):
            pos = buf.rfind(b"}", lo, pos)
            if pos < 0:
                return None
            m = _BOUNDARY.match(buf, pos, hi)
            if m is not None:
                return m
        hi = min(hi, pos + 16)
        while hi > lo:
            start = max(lo, hi - (1 << 20))
            last = None
            for last in _BOUNDARY.finditer(buf, start, hi):  # noqa: B007 - the last match is wanted
                pass
            if last is not None:
                return last
            if start == lo:
                return None
            hi = start + 16
        return None

    def _cut(self, buf: bytes, eof: bool) -> int | None:
        """Decode the longest prefix of whole events (within the window); return where the rest
        starts, or None/0 when no whole event can be taken yet."""
        end = min(len(buf), self._window)
        for _ in range(_MAX_RETRIES):
            last = self._last_boundary(buf, 0, end)
            if last is None:
                if end < len(buf) and self._window < len(buf):  # window too small: widen
                    self._window = len(buf)
                    end = len(buf)
                    continue
                return None
            body = buf[: last.start() + 1]
            ok, p = self._try(body)
            if ok:
                self._grow()
                return last.end() - 1
            if p is None:
                end = last.start()
                continue
            repairs: Counter = Counter()
            fixed = repair_fast(body, repairs)
            if fixed != body and self._try(fixed)[0]:
                self.split.repairs.update(repairs)
                return last.end() - 1
            return self._damaged(buf, p, eof)
        return None

    def _damaged(self, buf: bytes, p: int, eof: bool) -> int | None:
        """Take the events before the damage at p, then the damaged event (repaired or skipped)."""
        self._window = _SMALL_WINDOW
        head = 0
        hi = p
        for _ in range(_MAX_RETRIES):
            m = self._last_boundary(buf, 0, hi)
            if m is None:
                break
            ok, _q = self._try(buf[: m.start() + 1])
            if ok:
                head = m.end() - 1
                break
            hi = m.start()
        e = _BOUNDARY.search(buf, p)
        if e is None:
            # The damaged event is the last one in the buffer: read on, or let _finish judge it.
            return head or None
        for _ in range(_MAX_EXTEND):
            repairs: Counter = Counter()
            ok, q = self._try(repair_exact(buf[head : e.start() + 1], repairs))
            if ok:
                self.split.repairs.update(repairs)
                return e.end() - 1
            nxt = _BOUNDARY.search(buf, e.end() - 1) if q is None else None
            if nxt is None:
                break
            e = nxt
        e = _BOUNDARY.search(buf, p)
        assert e is not None
        self.split.damaged.append((self._base + head, e.start() + 1 - head))
        return e.end() - 1

    def _finish_view(self, start: int, end: int) -> Iterator[None]:
        """The last events [start, end): everything up to the array's end in one chunk, framed in
        place (a whole small trace is read here: copied out three times, ~1 ms of a 0.9 MB rank's
        18 ms load, 2026-12-01); damage before the end goes to `_finish`."""
        buf = self._buffer.map
        for m in _ARRAY_END.finditer(buf, start, end):
            hi = m.start() + 1  # the byte after the last event's `}`
            if self._decode_framed(start - 1, hi):
                self._tail(buf[m.end() : end])
                yield None
                return
            p = self._error()  # as `_try` reads it: a position in the body, or None (incomplete)
            if p is not None and p - 1 < hi - start:
                break  # damage before the end: go event by event
        yield from self._finish(bytes(self._buffer.view[start:end]))

    def _finish(self, buf: bytes) -> Iterator[None]:
        """The last events after damage before the array's end (`_finish_view`): event by event."""
        while True:
            cut = self._cut(buf, eof=True)
            if not cut:
                break
            buf = buf[cut:]
            self._base += cut
            yield None
        yield from self._last_piece(buf)

    def _last_piece(self, buf: bytes) -> Iterator[None]:
        """What follows the last cut: the last event, the array's end and the tail, or damage."""
        stripped = buf.strip().rstrip(b",").rstrip()
        if not stripped:
            self._mark_truncated(b"", "the events array is not closed")
            return
        for m in _ANY_END.finditer(buf):
            body = buf[: m.start()].rstrip()
            if not body:
                self._tail(buf[m.end() :])
                return
            repairs: Counter = Counter()
            for text in (body, None):
                if text is None:
                    text = repair_exact(body, repairs)
                ok, p = self._try(text)
                if ok:
                    self.split.repairs.update(repairs)
                    self._tail(buf[m.end() :])
                    yield None
                    return
        if stripped.endswith(b"}"):
            repairs = Counter()
            for text in (stripped, repair_exact(stripped, repairs)):
                if self._try(text)[0]:
                    if text is not stripped:
                        self.split.repairs.update(repairs)
                    self._mark_truncated(b"", "the events array is not closed", at=self._base + len(buf))
                    yield None
                    return
        # A damaged last event before a proper end of the array and document?
        for m in reversed(list(_ARRAY_END.finditer(buf))):
            if tail_ok(buf[m.end() :]):
                self.split.damaged.append((self._base, m.start() + 1))
                self._tail(buf[m.end() :])
                return
        self._mark_truncated(buf, "the trace ends in the middle of an event", at=self._base)

    def _mark_truncated(self, rest: bytes, why: str, at: int | None = None) -> None:
        cause = self.source.truncated
        self.split.truncated = f"{why}{f' ({cause})' if cause else ''}"
        self.split.truncated_at = at
        self.split.skipped_bytes = len(rest.strip())

    def _tail(self, rest: bytes) -> None:
        """Top-level keys after the events array (traceName, baseTimeNanoseconds, ...)."""
        self.split.metadata.update(tail_keys(rest) or {})
