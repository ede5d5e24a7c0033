#!/usr/bin/env python3
"""Generate tests/data/malformed/: one small damaged or unusual trace per case of the
robustness issue, and manifest.json with what the tool must do with each.

Every case starts from one small synthetic Kineto trace (two ProfilerSteps, CPU ops, launches,
kernels, a sync) written the way Kineto writes it (one event over several lines). The expected
numbers are known by construction: `events` is how many complete entries of traceEvents the
loader must read (for the cut gzip it is counted here with the stdlib's incremental JSON
decoder on what zlib can inflate). Run from the repository root:

    python scripts/make_malformed.py
"""

from __future__ import annotations

import copy
import gzip
import json
import zlib
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "malformed"
ORIGIN = 1_700_000_000_000  # us


def base_events(devices=(0,), pid=100, steps=2) -> list[dict]:
    """Steps of 1000 us on pid/tid 1: per step an op with two kernel launches and a sync."""
    ev: list[dict] = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "main"}},
    ]
    corr = 1
    for s in range(steps):
        t0 = ORIGIN + s * 1000
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": pid,
                "tid": 1,
                "ts": t0,
                "dur": 900,
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": pid,
                "tid": 1,
                "ts": t0 + 10,
                "dur": 300,
                "args": {"External id": 10 * s + 1},
            }
        )
        for k, dev in enumerate(list(devices) * 2):
            ts = t0 + 20 + 100 * k
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": pid,
                    "tid": 1,
                    "ts": ts,
                    "dur": 10,
                    "args": {"correlation": corr, "External id": 10 * s + 1},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"gemm_{k}",
                    "pid": dev,
                    "tid": 7,
                    "ts": ts + 30,
                    "dur": 50,
                    "args": {"correlation": corr, "device": dev, "stream": 7, "External id": 10 * s + 1},
                }
            )
            corr += 1
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaDeviceSynchronize",
                "pid": pid,
                "tid": 1,
                "ts": t0 + 500,
                "dur": 200,
                "args": {"correlation": corr},
            }
        )
        corr += 1
    return ev


def kineto_text(events: list, meta: dict | None = None, tail: dict | None = None, nl: str = "\n") -> str:
    meta = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}]} if meta is None else meta
    head = json.dumps(meta)[:-1] + (", " if meta else "")
    body = ("," + nl + "  ").join(json.dumps(e, indent=1).replace("\n", nl) for e in events)
    end = "" if tail is None else ", " + json.dumps(tail)[1:-1]
    return f'{head}{nl}  "traceEvents": [{nl}  {body}{nl}]{end}{nl}}}{nl}'


def _pos_in_event(text: str, events: list, k: int, needle: str) -> int:
    """Position of `needle` inside the k-th event's text (each event's text is unique)."""
    start = text.index(json.dumps(events[k], indent=1))
    return text.index(needle, start)


def count_complete(text: str) -> int:
    """Complete entries of traceEvents at the start of `text`, with the stdlib decoder."""
    dec = json.JSONDecoder()
    i = text.index("[", text.index('"traceEvents"')) + 1
    n = 0
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        try:
            _, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return n
        n += 1


CASES: dict[str, dict] = {}


def case(
    name: str,
    data: bytes | None,
    exit_code: int,
    events: int | None,
    warning: str | None,
    what: str,
    suffix: str = ".json",
    **extra,
) -> None:
    entry = {"what": what, "exit_code": exit_code, "events": events, "warning": warning, **extra}
    if data is not None:
        entry["file"] = name + suffix
        (OUT / entry["file"]).write_bytes(data)
    CASES[name] = entry


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for p in OUT.iterdir():
        if p.is_file():
            p.unlink()
    ev = base_events()
    n = len(ev)
    text = kineto_text(ev)
    b = text.encode()

    # -- damage after some events: salvage, warn, exit 0 ---------------------------------------
    k = 7
    case(
        "truncated_mid_event",
        text[: _pos_in_event(text, ev, k, '"cat"')].encode(),
        0,
        k,
        "trace is truncated",
        "the file ends inside an event, between two keys",
    )
    case(
        "truncated_mid_string",
        text[: _pos_in_event(text, ev, k, '"cat"') + 9].encode(),
        0,
        k,
        "trace is truncated",
        "the file ends inside a string",
    )
    case(
        "truncated_mid_number",
        text[: _pos_in_event(text, ev, k, '"ts"') + 10].encode(),
        0,
        k,
        "trace is truncated",
        "the file ends inside a number",
    )
    case(
        "missing_closing_brackets",
        text[: text.rindex("}\n]") + 1].encode(),
        0,
        n,
        "not closed",
        "every event is complete but `]` and `}` are missing",
    )
    gz = gzip.compress(b, mtime=0)
    cut = gz[: len(gz) * 2 // 3]
    inflated = zlib.decompressobj(31).decompress(cut)
    for name in ("truncated_mid_event", "truncated_mid_string", "truncated_mid_number"):
        assert count_complete((OUT / f"{name}.json").read_text()) == k  # the stdlib agrees
    case(
        "gzip_cut_short",
        cut,
        0,
        count_complete(inflated.decode("utf-8", "replace")),
        "trace is truncated",
        "a gzip stream cut at two thirds of its bytes",
        suffix=".json.gz",
    )
    bad = text.replace('"name": "gemm_1"', '"name": @@@ "gemm_1"', 1)
    case(
        "mid_file_garbage",
        bad.encode(),
        0,
        n - 1,
        "damaged region",
        "one event in the middle is not JSON: it alone is skipped, the events after it are read",
    )
    bad = text.replace('"name": "gemm_1"', '"name": "gemm_1", "args": 5, "x": [}', 1)
    case(
        "mid_file_unbalanced",
        bad.encode(),
        0,
        n - 1,
        "damaged region",
        "one event in the middle has an unbalanced bracket",
    )

    # -- unreadable: one line, exit 2 ----------------------------------------------------------
    case("empty", b"", 2, None, "file is empty", "zero bytes")
    case("whitespace_only", b"  \n\t\n", 2, None, "white space", "only white space")
    case("not_json", b"this is a log file, not a trace\n", 2, None, "not JSON", "text")
    case(
        "not_a_trace",
        b'{"model": "resnet", "accuracy": [0.9, 0.91]}\n',
        2,
        None,
        "not a Chrome/Kineto trace",
        "JSON without traceEvents",
    )
    case("json_list_of_numbers", b"[1, 2, 3]\n", 2, None, "no complete event", "a JSON array that holds no events")
    case(
        "bad_gzip_header",
        b"\x1f\x8b" + b"\x00garbage-that-is-not-deflate" * 4,
        2,
        None,
        "not a valid gzip",
        "gzip magic number, then garbage",
        suffix=".json.gz",
    )
    case(
        "truncated_before_first_event",
        text[: _pos_in_event(text, ev, 0, '"name"')].encode(),
        2,
        None,
        "no complete event",
        "the file ends inside the first event",
    )
    case(
        "over_decompression_limit",
        gz,
        2,
        None,
        "decompresses to more than",
        "a gzip trace inflating past --max-decompressed 1K",
        suffix=".json.gz",
        args=["--max-decompressed", "1K"],
    )
    case(
        "directory_without_traces",
        None,
        2,
        None,
        "no trace files",
        "a directory holding no trace file (made by the test)",
        make="directory",
    )
    case(
        "permission_denied",
        None,
        2,
        None,
        "permission denied",
        "a trace the user may not read (made by the test)",
        make="unreadable",
    )

    # -- tolerated, with a warning and a count -------------------------------------------------
    bad = text.replace('"gemm_0"', '"gemm\x01_0\\u0000"', 1).replace('"gemm_1"', '"gemm\n_1\t"', 1)
    case("control_characters", bad.encode(), 0, n, "control characters", "raw control bytes inside names")
    bad = text.replace('"dur": 50', '"dur": N/A', 1)
    case("bare_na", bad.encode(), 0, n, "N/A", "a bare N/A where dur belongs")
    bad = text.replace('"dur": 50', '"dur": NaN', 1).replace('"dur": 300', '"dur": Infinity', 1)
    case("nan_infinity", bad.encode(), 0, n, "NaN", "NaN and Infinity as durations")
    e2 = copy.deepcopy(ev)
    e2[2].pop("dur")  # aten::mm of step 0
    e2[3].pop("ts")  # a launch
    e2[4].pop("ph")  # a kernel
    case("missing_ts_dur_ph", kineto_text(e2).encode(), 0, n, "without dur", "events without ts, dur, ph")
    e2 = copy.deepcopy(ev)
    e2[4]["dur"] = -50
    e2[6]["dur"] = 0
    case("negative_zero_dur", kineto_text(e2).encode(), 0, n, "negative dur", "a negative and a zero dur")
    e2 = copy.deepcopy(ev)
    e2[4]["dur"] = 4_000_000_000  # > 1 h on a 2 ms trace
    case(
        "dur_past_end",
        kineto_text(e2).encode(),
        0,
        n,
        "past the end",
        "a kernel dur far longer than the trace (clipped)",
    )
    e2 = copy.deepcopy(ev)
    e2.append(
        {"ph": "X", "cat": "cpu_op", "name": "aten::crossing", "pid": 100, "tid": 1, "ts": ORIGIN + 200, "dur": 400}
    )
    case(
        "overlap_without_nesting",
        kineto_text(e2).encode(),
        0,
        n + 1,
        None,  # no load warning: the health check crossing_cpu_events (info) says it, in JSON health[]
        "an op that starts inside aten::mm and ends after it",
    )
    e2 = copy.deepcopy(ev) + copy.deepcopy(ev[2:6])
    case(
        "duplicated_events",
        kineto_text(e2).encode(),
        0,
        n + 4,
        "duplicate",
        "four events written twice",
        tables={"gpu": 4, "ops": 4},
    )
    e2 = copy.deepcopy(ev)
    e2[3]["args"]["correlation"] = 2**70
    e2[4]["args"]["correlation"] = 2**70
    e2[2]["args"]["External id"] = 2**64 + 5
    case("ids_beyond_int64", kineto_text(e2).encode(), 0, n, "int64", "correlation and External id past int64")
    e2 = copy.deepcopy(ev)
    for e in e2:
        if "tid" in e:
            e["pid"], e["tid"] = str(e["pid"]), (f"stream {e['tid']}" if e.get("cat") == "kernel" else str(e["tid"]))
    case("string_pids_tids", kineto_text(e2).encode(), 0, n, "strings", "every pid and tid written as a string")
    e2 = copy.deepcopy(ev) + [
        {"ph": "X", "cat": "my_custom_cat", "name": "thing", "pid": 100, "tid": 1, "ts": ORIGIN + 5, "dur": 1},
        {"ph": "X", "cat": "my_custom_cat", "name": "thing", "pid": 100, "tid": 1, "ts": ORIGIN + 7, "dur": 1},
        {"ph": "X", "cat": "v8", "name": "gc", "pid": 100, "tid": 1, "ts": ORIGIN + 9, "dur": 1},
    ]
    case(
        "unknown_categories",
        kineto_text(e2).encode(),
        0,
        n + 3,
        "categories the tool does not know",
        "three events of unknown categories",
    )
    case("byte_order_mark", b"\xef\xbb\xbf" + b, 0, n, None, "a UTF-8 byte-order mark before the JSON")
    case("crlf_line_ends", kineto_text(ev, nl="\r\n").encode(), 0, n, None, "Windows line ends")

    # -- valid but unusual: a result or a one-line explanation, exit 0 ------------------------
    cpu = [e for e in ev if e.get("cat") != "kernel"]
    case(
        "no_gpu_events",
        kineto_text(cpu).encode(),
        0,
        len(cpu),
        None,
        "CPU ops and launches, no kernel",
        stdout="no GPU work",
    )
    nostep = [e for e in ev if not str(e.get("name", "")).startswith("ProfilerStep")]
    case(
        "no_profiler_step",
        kineto_text(nostep).encode(),
        0,
        len(nostep),
        None,
        "no ProfilerStep range",
        stdout="no ProfilerStep",
    )
    one = base_events(steps=1)
    case("one_step", kineto_text(one).encode(), 0, len(one), None, "a single ProfilerStep")
    two = base_events(devices=(0, 1))
    case("several_devices", kineto_text(two).encode(), 0, len(two), None, "kernels on devices 0 and 1")
    procs = base_events(pid=100) + base_events(pid=200, devices=(1,))
    case("several_processes", kineto_text(procs).encode(), 0, len(procs), None, "two processes, each with its device")
    chrome = [
        {
            "pid": 1,
            "tid": 1,
            "ph": "X",
            "cat": "devtools.timeline",
            "name": "RunTask",
            "ts": 100,
            "dur": 50,
            "args": {},
        },
        {"pid": 1, "tid": 1, "ph": "B", "cat": "v8", "name": "V8.Execute", "ts": 110},
        {"pid": 1, "tid": 1, "ph": "E", "cat": "v8", "name": "V8.Execute", "ts": 140},
        {"pid": 1, "tid": 2, "ph": "i", "cat": "blink", "name": "Paint", "ts": 145, "s": "t"},
    ]
    case(
        "other_program_chrome_trace",
        json.dumps(chrome).encode(),
        0,
        len(chrome),
        "categories the tool does not know",
        "a Chrome trace from a browser (a bare JSON array)",
        stdout="no GPU work",
    )
    case(
        "empty_events_array",
        b'{"schemaVersion": 1, "traceEvents": []}',
        0,
        0,
        None,
        "a trace with no events",
        stdout="no GPU work",
    )

    (OUT / "manifest.json").write_text(json.dumps(CASES, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
