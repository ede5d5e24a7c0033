"""A seeded fuzz over raw bytes: mutations (truncation, byte flips, insertions, deletions,
repeats) of small valid traces, read in-process with `load()` and analysed with
`analyse_gaps`. The only outcomes allowed are a result or the designed `TraceAnalyzerError`
(exit code 2); any other exception is a bug, reported with the input that caused it.

TRACEANALYZER_FUZZ_N sets the number of inputs (default 500 here; the issue's full run is
10,000), TRACEANALYZER_FUZZ_SEED the seed.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import sys
from pathlib import Path

import pytest

from traceanalyzer.analyses.gaps import analyse_gaps
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.load import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from make_malformed import base_events, kineto_text  # noqa: E402

N = int(os.environ.get("TRACEANALYZER_FUZZ_N", "500"))
SEED = int(os.environ.get("TRACEANALYZER_FUZZ_SEED", "20240611"))

TOKENS = [
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b'"',
    b"\\",
    b"N/A",
    b"NaN",
    b"-Infinity",
    b"null",
    b"\x00",
    b"\x01",
    b"\n",
    b"\xef\xbb\xbf",
    b"},{",
    b'"ts": ',
    b'"dur": -',
    b"99999999999999999999999",
    b"1e400",
    b"\xff\xfe",
]


def _seeds() -> list[bytes]:
    one_line = json.dumps({"traceEvents": base_events(steps=1)}).encode()
    return [
        kineto_text(base_events()).encode(),
        kineto_text(base_events(devices=(0, 1), steps=1)).encode(),
        one_line,
        json.dumps(base_events(steps=1)).encode(),  # a bare array
        gzip.compress(kineto_text(base_events(steps=1)).encode(), mtime=0),
    ]


def mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        if not buf:
            break
        op = rng.randrange(6)
        i = rng.randrange(len(buf))
        if op == 0:  # truncate
            del buf[i:]
        elif op == 1:  # flip bits of a byte
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 2:  # a random byte
            buf[i] = rng.randrange(256)
        elif op == 3:  # insert a JSON-ish token
            buf[i:i] = rng.choice(TOKENS)
        elif op == 4:  # delete a span
            del buf[i : i + rng.randrange(1, 40)]
        else:  # repeat a span
            j = min(len(buf), i + rng.randrange(1, 200))
            buf[j:j] = buf[i:j]
    return bytes(buf)


def run_one(data: bytes) -> str:
    """'ok' or 'error' (the designed exit 2); anything else raises."""
    fh = io.BytesIO(data)
    fh.name = "fuzz.json"
    try:
        trace = load(fh)
    except TraceAnalyzerError as exc:
        assert exc.exit_code == 2 and str(exc).strip() and "\n" not in str(exc)
        return "error"
    result = analyse_gaps(trace)
    if result.has_gpu_work:
        assert (result.all_gaps["duration_us"] >= 0).all()
    return "ok"


def test_fuzz_raw_bytes():
    rng = random.Random(SEED)
    seeds = _seeds()
    outcomes = {"ok": 0, "error": 0}
    for n in range(N):
        data = mutate(rng.choice(seeds), rng)
        try:
            outcomes[run_one(data)] += 1
        except Exception as exc:  # noqa: BLE001 - the point: report the input
            pytest.fail(f"input #{n} (seed {SEED}) raised {type(exc).__name__}: {exc}\n{data[:3000]!r}")
    # Both outcomes occur: the mutations are neither all harmless nor all fatal.
    assert outcomes["ok"] > N // 10 and outcomes["error"] > 0, outcomes
