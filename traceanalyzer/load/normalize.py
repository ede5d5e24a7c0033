"""Per-kind column lists -> typed polars tables.

Every time is int64 nanoseconds, parsed from the number's text (`ts_ns`, `dur_ns`,
`end_ns`). Loose values are made uniform here: string pids/tids ("25738", "stream 7"), ids as
strings or beyond int64 (null, counted), numbers where text belongs.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from contextvars import ContextVar
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.load.decode import COLUMN_BUILDERS, SEP, RawTexts

I64 = pl.Int64
_DIGITS = re.compile(r"-?\d+")
# Where the loader collects counts of loose values it made uniform (see loader.RawTables);
# None outside a load, so the functions stay pure for other callers.
STATS: ContextVar[Counter | None] = ContextVar("traceanalyzer_normalize_stats", default=None)
STRING_IDS = "pid/tid given as strings"
BIG_IDS = "ids beyond int64"


def to_int(values: list[Any], what: str | None = None) -> pl.Series:
    """Int64 column; strings holding a number ("25738", "stream 7") give that number.

    `what` names the column for the load's counts: "pid/tid" counts strings, any name counts
    integers beyond int64 (left null)."""
    try:
        return pl.Series(values, dtype=I64)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    out = []
    strings = big = 0
    for v in values:
        if type(v) is int:
            if -(2**63) <= v < 2**63:
                out.append(v)
            else:
                out.append(None)
                big += 1
        elif isinstance(v, str):
            strings += 1
            m = _DIGITS.search(v)
            out.append(int(m.group()) if m and len(m.group()) < 19 else None)
        elif isinstance(v, float) and v == v and abs(v) < 2**63:
            out.append(int(v))
        else:
            out.append(None)
    stats = STATS.get()
    if stats is not None and what is not None:
        if big:
            stats[BIG_IDS] += big
        if strings and what == "pid/tid":
            stats[STRING_IDS] += strings
    return pl.Series(out, dtype=I64)


def to_float(values: list[Any]) -> pl.Series:
    """A loosely typed value as a float, or None."""
    return pl.Series(values, dtype=pl.Float64, strict=False)


def to_str(values: list[Any]) -> pl.Series:
    """A loosely typed value as a string, or None."""
    try:
        return pl.Series(values, dtype=pl.String)
    except (TypeError, pl.exceptions.PolarsError):
        return pl.Series([v if isinstance(v, str) or v is None else str(v) for v in values], dtype=pl.String)


def texts(raw: RawTexts) -> pl.Series:
    """The n texts of a `RawTexts` as a String column ("" where absent); a text that is not
    UTF-8 (msgspec does not check the inside of a Raw value) is null."""
    if raw.n == 0:
        return pl.Series([], dtype=pl.String)
    try:
        joined = raw.data.decode()
    except UnicodeDecodeError:
        parts = pl.Series(raw.data.split(SEP), dtype=pl.Binary)
        return parts.cast(pl.String, strict=False)
    return pl.Series([joined]).str.split(SEP.decode()).explode()


def interned(s: pl.Series) -> pl.Series:
    """`s` with equal strings stored once: every row is a view into one compact buffer of the
    distinct values. A kernel name is ~300 bytes and a 1 GB trace repeats ~90 of them 300,000
    times (89 MB as plain rows, ~5 MB so). Values and dtype are unchanged (String, so that
    `.str` works); only the memory differs. Mostly distinct columns are left as they are."""
    distinct = s.unique(maintain_order=True)
    if distinct.len() * 4 > s.len():
        return s
    # Built from Python strings: its own buffer (`unique` gives views into `s`'s, which would
    # keep them alive).
    compact = pl.Series(s.name, distinct.to_list(), dtype=pl.String)
    codes = (
        pl.DataFrame({"v": s})
        .join(
            pl.DataFrame({"v": compact, "i": pl.int_range(compact.len(), dtype=pl.UInt32, eager=True)}),
            on="v",
            how="left",
            nulls_equal=True,
            maintain_order="left",
        )
        .get_column("i")
    )
    return compact.gather(codes)


def raw_text(raw: RawTexts) -> pl.Series:
    """Raw JSON text of a value (absent: b"") -> String, null when absent."""
    return texts(raw).replace("", None)


def int_list(raw: RawTexts) -> pl.Series:
    """Raw JSON text of an array of integers (a kernel's grid or block) -> List(Int64), whatever
    the file's white space; null when absent or not such an array."""
    return int_list_of(raw_text(raw))


def int_list_of(text: pl.Series) -> pl.Series:
    """`int_list` of raw texts already in a String column (null where absent)."""
    # one query (the three steps were three: grid and block, six a small rank)
    bare = pl.lit(text).str.replace_all(r"\s+", "")
    arrays = pl.when(bare.str.contains(r"^\[(-?\d+(,-?\d+)*)?\]$")).then(bare)
    return pl.select(arrays.str.json_decode(pl.List(pl.Int64))).to_series().alias(text.name)


def json_text(raw: RawTexts) -> pl.Series:
    """Raw JSON text of a value -> the same value as compact JSON text, so that equal values are
    equal strings whatever the file's indentation; null when absent.

    Text rather than a list column: "Input Dims" nests one level deeper for a tensor-list
    argument than for a tensor (`[[[2, 3], [4]], [5]]` next to `[[5], []]`), and a polars
    column holds one type. Each distinct value is re-encoded once (shapes repeat a lot)."""
    s = raw_text(raw)
    distinct = s.drop_nulls().unique()
    return s.replace_strict(distinct, [compact(v) for v in distinct], default=None, return_dtype=pl.String)


def compact(text: str) -> str:
    """One raw JSON text as compact JSON text (itself when it does not decode)."""
    try:
        return msgspec.json.encode(msgspec.json.decode(text)).decode()
    except msgspec.DecodeError:
        return text


def text_to_ns(col: pl.Expr) -> pl.Expr:
    """JSON number text in microseconds -> int64 nanoseconds, exact to the nanosecond.

    Handles integers, decimals (any number of digits; digits past the nanosecond are rounded
    half up), a sign (- or +), quoted numbers, and exponents (through float64, the only lossy path).
    Anything else (null, "N/A", true) is null.
    """
    text = col.cast(pl.String, strict=False).str.strip_chars().str.strip_chars('"')
    ok = text.str.contains(r"^[-+]?\d+(\.\d*)?$")
    neg = text.str.starts_with("-")
    body = text.str.strip_prefix("-").str.strip_prefix("+")
    parts = body.str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(I64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.pad_end(4, "0")
    frac3 = frac.str.slice(0, 3).cast(I64, strict=False)
    round_up = (frac.str.slice(3, 1).cast(I64, strict=False) >= 5).cast(I64)
    magnitude = whole * 1000 + frac3 + round_up
    exact = pl.when(neg).then(-magnitude).otherwise(magnitude)
    via_float = (text.cast(pl.Float64, strict=False) * 1000).round(0)
    fallback = pl.when(via_float.is_finite() & (via_float.abs() < 9.2e18)).then(via_float).cast(I64, strict=False)
    fits = whole < 9_223_372_036_854_774  # whole * 1000 + 999 must not wrap int64
    return pl.when(ok & fits).then(exact).when(ok).then(None).otherwise(fallback)


def checked_ns(col: pl.Expr) -> pl.Expr:
    """`text_to_ns`, but null where the value does not fit int64 nanoseconds (the exact path
    would wrap around): judged on the float64 estimate, which is ample for a magnitude."""
    estimate = (
        col.cast(pl.String, strict=False).str.strip_chars().str.strip_chars('"').cast(pl.Float64, strict=False) * 1000
    )
    return pl.when(estimate.abs() < 9.2e18).then(text_to_ns(col))


_FAST_LIMIT = 9_100_000_000_000_000_000  # |ns| below it fits int64 ns by any estimate


def _fast_ns(text: pl.DataFrame) -> pl.DataFrame:
    """Per text column k of `text`: k (int64 ns, or null) and `_slow_k` (the non-empty texts
    only `checked_ns` reads right).

    The text is read as a Decimal of scale 4, whose integer representation is 10x the
    nanoseconds. Where its last digit is 0 the value lies within half a tenth of a ns of
    k/1000 us, and `checked_ns` (digits past the ns rounded half up) gives exactly k. One cast
    instead of taking the digits apart (~5 string passes). Slow: more digits, exponents (read
    through float64 by `checked_ns`), quoted numbers, junk. In three selects: an eager select
    computes a shared subexpression once per use, and the one-select form took 4x longer."""
    names = text.columns
    col = pl.col
    s1 = text.select(
        *[col(k).cast(pl.Decimal(38, 4), strict=False).to_physical().alias(k) for k in names],
        *[col(k).str.contains("[eE+]").alias("_e" + k) for k in names],
        *[(col(k).is_null() | (col(k) == "")).alias("_x" + k) for k in names],
    )
    s2 = s1.select(
        *[(col(k) // 10).cast(I64, strict=False).alias(k) for k in names],
        *[((col(k) % 10 == 0) & ~col("_e" + k)).fill_null(False).alias("_f" + k) for k in names],
        *[col("_x" + k) for k in names],
    )
    # Near the int64 limit `checked_ns` judges by a float64 estimate: leave those to it.
    fast = {k: col("_f" + k) & (col(k) > -_FAST_LIMIT) & (col(k) < _FAST_LIMIT) for k in names}
    return s2.select(
        *[pl.when(fast[k]).then(col(k)).alias(k) for k in names],
        *[~(fast[k].fill_null(False) | col("_x" + k)).alias("_slow_" + k) for k in names],
    )


def ns_frame(raw: dict[str, RawTexts]) -> pl.DataFrame:
    """`checked_ns` of raw number texts (b"" when absent), one int64 column per key, all in
    the same few polars calls; only the rare slow texts are read again by `checked_ns`."""
    text = pl.DataFrame({k: texts(v) for k, v in raw.items()})
    out = _fast_ns(text)
    cols = []
    for k in raw:
        ns, slow = out[k], out["_slow_" + k]
        if slow.any():
            idx = slow.arg_true()
            # Gathered first, then read: `checked_ns(col.gather(idx))` inside one select made
            # polars 2.1 panic (a length assertion) once two slow texts took different branches.
            fixed = text[k].gather(idx).to_frame().select(checked_ns(pl.col(k)).alias(k))[k]
            ns = ns.scatter(idx, fixed)
        cols.append(ns)
    return pl.DataFrame(cols)


def ns_series(raw: RawTexts) -> pl.Series:
    """`checked_ns` of raw number texts (b"" when absent)."""
    return ns_frame({"ns": raw})["ns"]


def timed_frame(cols: dict[str, list], extra: dict[str, pl.Series], ids_label: str | None = "pid/tid") -> pl.DataFrame:
    """The columns every timed table has, plus `extra`. `ids_label=None` leaves string pids/tids
    uncounted (Kineto's own instant markers use "Traces", "Spans")."""
    df = pl.DataFrame(
        {
            "name": interned(to_str(cols["name"])),
            "cat": to_str(cols["cat"]),
            "pid": to_int(cols["pid"], ids_label),
            "tid": to_int(cols["tid"], ids_label),
            **extra,
        }
    )
    return df.hstack(ns_frame({"ts_ns": cols["ts"], "dur_ns": cols["dur"]}))


def op_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of CPU ops and record_function ranges."""
    return timed_frame(
        c,
        {
            "external_id": to_int(c["external_id"], "id"),
            "sequence_number": to_int(c["sequence_number"], "id"),
            "fwd_thread_id": to_int(c["fwd_thread_id"]),
            "input_dims": json_text(c["input_dims"]),
            "input_type": json_text(c["input_type"]),
            "concrete_inputs": json_text(c["concrete_inputs"]),
            "call_stack": to_str(c["call_stack"]),
        },
    )


def python_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of python_function events."""
    return timed_frame(
        c, {"python_id": to_int(c["python_id"], "id"), "python_parent_id": to_int(c["python_parent_id"], "id")}
    )


def runtime_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of CUDA/HIP runtime and driver calls."""
    return timed_frame(
        c,
        {
            "correlation": to_int(c["correlation"], "id"),
            "external_id": to_int(c["external_id"], "id"),
            "cbid": to_int(c["cbid"]),
        },
    )


def gpu_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of kernels, memcpys and memsets."""
    return timed_frame(
        c,
        {
            "device": to_int(c["device"]),
            "stream": to_int(c["stream"]),
            "correlation": to_int(c["correlation"], "id"),
            "external_id": to_int(c["external_id"], "id"),
            "bytes": to_int(c["bytes"]),
            "bandwidth_gbps": to_float(c["bandwidth"]),
            "grid": int_list(c["grid"]),
            "block": int_list(c["block"]),
            "graph_id": to_int(c["graph_id"]),
        },
    )


def sync_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of `cuda_sync` markers."""
    return timed_frame(
        c,
        {
            "device": to_int(c["device"]),
            "stream": to_int(c["stream"]),
            "correlation": to_int(c["correlation"], "id"),
            "wait_on_stream": to_int(c["wait_on_stream"]),
            "wait_on_event": to_int(c["wait_on_event"]),
            "sync_kind": to_str(c["sync_kind"]),
        },
    )


def annotation_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of gpu_user_annotation events."""
    return timed_frame(c, {"device": to_int(c["device"]), "external_id": to_int(c["external_id"], "id")})


def memory_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of `[memory]` allocator events."""
    return timed_frame(
        c,
        {
            "device_type": to_int(c["device_type"]),
            "device_id": to_int(c["device_id"]),
            "addr": to_int(c["addr"], "id"),
            "bytes": to_int(c["bytes"]),
            "total_allocated": to_int(c["total_allocated"]),
            "total_reserved": to_int(c["total_reserved"]),
        },
    )


def flow_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of forward-to-backward flow arrows."""
    return timed_frame(c, {"ph": to_str(c["ph"]), "id": to_int(c["id"], "id")})


def meta_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of metadata events (thread and process names)."""
    return pl.DataFrame(
        {
            "name": to_str(c["name"]),
            "pid": to_int(c["pid"]),
            "tid": to_int(c["tid"]),
            "value": to_str(c["value"]),
            "sort_index": to_int(c["sort_index"]),
        }
    )


def other_frame(c: dict[str, list]) -> pl.DataFrame:
    """The typed frame of events no analysis reads (kept for the counts)."""
    return timed_frame(c, {"ph": to_str(c["ph"])}, ids_label=None)


FRAME_BUILDERS = {
    "op": op_frame,
    "python": python_frame,
    "runtime": runtime_frame,
    "gpu": gpu_frame,
    "sync": sync_frame,
    "gpu_annotation": annotation_frame,
    "memory": memory_frame,
    "flow": flow_frame,
    "meta": meta_frame,
    "other": other_frame,
}


@functools.cache
def empty_frame(kind: str) -> pl.DataFrame:
    """The typed empty table of a kind (cached: frames are immutable to their users)."""
    return FRAME_BUILDERS[kind](COLUMN_BUILDERS[kind]([]))
