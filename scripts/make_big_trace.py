"""Build a realistic Kineto trace of any size by repeating a real trace's steps end to end.

    python scripts/make_big_trace.py ../shared/traces/a100_multistream_syncs.json.gz \
        /tmp/big_1g.json.gz --size-mb 1000

Every copy of the source's timed events is shifted by the source's span (rounded up to a whole
µs, so the copies follow one another without overlapping), and renumbered: correlation ids,
flow ids, `External id`, `Python id` / `Python parent id` and `ProfilerStep#N` get a per-copy
offset, so runtime->kernel and op->runtime links stay one-to-one across copies. The work is
done on the JSON text (one regex pass per copy), so the output keeps the source's exact layout
and bytes per event, and nanosecond digits of float timestamps survive (only the integer part
of `ts` is shifted). Metadata events (`ph: M`) are written once; the `Trace` span event once,
stretched over all copies. `.gz` in the output name writes gzip (isal, level 1).

Big outputs belong in /tmp: never commit them.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

import msgspec

# `"key": number` for the keys renumbered or shifted per copy. `"id"` must follow a quote so
# that `"Record function id"` and `"graph id"` are left alone.
_FIELD = re.compile(
    rb'"(ts|id|correlation|External id|external id|Python id|Python parent id)"(\s*:\s*)(-?\d+)(\.\d+)?'
)
_STEP = re.compile(rb"ProfilerStep#(\d+)")


class _Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as fh:
        return fh.read()


class Template:
    """The source split into what is written once and what is repeated."""

    def __init__(self, raw: bytes) -> None:
        doc = msgspec.json.Decoder(float_hook=Decimal).decode(raw)
        if not isinstance(doc, dict) or "traceEvents" not in doc:
            raise SystemExit("source is not a Kineto trace with a traceEvents object")
        keys = list(doc)
        at = keys.index("traceEvents")
        self.head = {k: doc[k] for k in keys[:at]}
        self.tail = {k: doc[k] for k in keys[at + 1 :]}
        events = doc["traceEvents"]
        raws = msgspec.json.decode(raw, type=_Doc).traceEvents
        self.meta: list[bytes] = []
        self.trace_span: dict | None = None
        body: list[bytes] = []
        spans: list[tuple[int, int]] = []  # (ts, end) of each body event, for `shorten`
        ts_min, end_max, id_max, steps = None, None, 0, set()
        for ev, text in zip(events, raws):
            if not isinstance(ev, dict):
                continue
            if ev.get("ph") == "M" or "ts" not in ev:
                self.meta.append(bytes(text))
                continue
            if ev.get("cat") == "Trace":
                self.trace_span = ev
                continue
            body.append(bytes(text))
            ts = int(ev["ts"])
            end = ts + int(Decimal(str(ev.get("dur", 0) or 0)).to_integral_value(rounding="ROUND_CEILING"))
            spans.append((ts, end))
            ts_min = ts if ts_min is None else min(ts_min, ts)
            end_max = end if end_max is None else max(end_max, end)
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            for v in (
                ev.get("id"),
                *(args.get(k) for k in ("correlation", "External id", "external id", "Python id", "Python parent id")),
            ):
                if isinstance(v, int):
                    id_max = max(id_max, v)
            m = _STEP.search(str(ev.get("name", "")).encode())
            if m:
                steps.add(int(m.group(1)))
        if ts_min is None:
            raise SystemExit("source has no timed events")
        self.events = body
        self.spans = spans
        self.body = b",\n  ".join(body)
        self.ts_min = ts_min
        self.period_us = end_max - ts_min + 1  # whole µs: copies never overlap
        self.id_stride = id_max + 1
        self.step_stride = (max(steps) - min(steps) + 1) if steps else 0

    def shorten(self, size_bytes: int) -> None:
        """Keep only the events of the source's first part of the timeline (those starting
        before a cut), about `size_bytes` of them: a shorter capture of the same run, for
        traces smaller than the source. CPU and GPU events of the kept window stay together."""
        order = sorted(range(len(self.events)), key=lambda i: self.spans[i][0])
        total, cut = 0, None
        for i in order:
            total += len(self.events[i]) + 4
            if total >= size_bytes:
                cut = self.spans[i][0]
                break
        if cut is None:
            return
        keep = [i for i in range(len(self.events)) if self.spans[i][0] <= cut]
        self.body = b",\n  ".join(self.events[i] for i in keep)
        self.period_us = max(self.spans[i][1] for i in keep) - self.ts_min + 1

    def copy(self, k: int) -> bytes:
        """The timed events of copy k (k = 0 is the source itself)."""
        if k == 0:
            return self.body
        shift, id_off, step_off = k * self.period_us, k * self.id_stride, k * self.step_stride

        def field(m: re.Match) -> bytes:
            key, sep, whole, frac = m.group(1), m.group(2), int(m.group(3)), m.group(4) or b""
            if key == b"ts":
                return b'"ts"' + sep + str(whole + shift).encode() + frac
            if frac or whole <= 0:  # not an id we made (0 and -1 mean "none")
                return m.group(0)
            return b'"' + key + b'"' + sep + str(whole + id_off).encode()

        text = _FIELD.sub(field, self.body)
        if step_off:
            text = _STEP.sub(lambda m: b"ProfilerStep#" + str(int(m.group(1)) + step_off).encode(), text)
        return text


def _encode_keys(keys: dict) -> bytes:
    enc = msgspec.json.Encoder(decimal_format="number")
    return b"".join(b"  " + enc.encode(k) + b": " + enc.encode(v) + b",\n" for k, v in keys.items())


def write_big_trace(source: Path, out: BinaryIO, size_bytes: int = 0, copies: int | None = None) -> dict:
    """Write a trace of at least `size_bytes` of JSON (whole copies; below the source's size, a
    first part of its timeline), or of `copies` copies, to `out`; returns stats."""
    t = Template(_read(source))
    if size_bytes and copies is None and size_bytes < len(t.body):
        t.shorten(size_bytes)
    per_copy = len(t.body) + 4
    copies = copies or max(1, -(-size_bytes // per_copy))
    enc = msgspec.json.Encoder(decimal_format="number")
    written = 0

    def put(b: bytes) -> None:
        nonlocal written
        out.write(b)
        written += len(b)

    put(b"{\n" + _encode_keys(t.head) + b'  "traceEvents": [\n  ')
    first = True
    if t.trace_span is not None:
        span = dict(t.trace_span)
        span["dur"] = copies * t.period_us
        span["ts"] = t.ts_min
        put(enc.encode(span))
        first = False
    for m in t.meta:
        put((b"" if first else b",\n  ") + m)
        first = False
    for k in range(copies):
        put((b"" if first else b",\n  ") + t.copy(k))
        first = False
    tail = _encode_keys(t.tail).rstrip(b",\n")
    put(b"\n  ]" + ((b",\n" + tail) if tail else b"") + b"\n}\n")
    return {"copies": copies, "json_bytes": written, "period_us": t.period_us, "steps_per_copy": t.step_stride}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="a real Kineto trace (.json or .json.gz)")
    ap.add_argument("out", type=Path, help="output path; .gz writes gzip")
    ap.add_argument("--size-mb", type=float, required=True, help="uncompressed JSON size to reach (MB, 1e6 bytes)")
    args = ap.parse_args(argv)
    size = int(args.size_mb * 1e6)
    if args.out.suffix == ".gz":
        try:
            from isal import igzip

            fh = igzip.open(args.out, "wb", compresslevel=1)
        except ImportError:  # pragma: no cover
            fh = gzip.open(args.out, "wb", compresslevel=1)
    else:
        fh = open(args.out, "wb")
    with fh:
        stats = write_big_trace(args.source, fh, size)
    print(
        f"wrote {args.out}: {stats['copies']} copies, {stats['json_bytes'] / 1e6:,.1f} MB of JSON, "
        f"{args.out.stat().st_size / 1e6:,.1f} MB on disk",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
