"""Timestamps are int64 nanoseconds exact to the digit written in the file: checked against
`decimal.Decimal` arithmetic on the number's text, never against float64."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import polars as pl
import pytest

from traceanalyzer.load.normalize import text_to_ns

NS_TRACE = "v100_ns_timestamps.pt.trace.json.gz"
TABLE_CATS = {
    "ops": {"cpu_op", "Operator", "user_annotation"},
    "runtime": {"cuda_runtime", "Runtime", "cuda_driver"},
    "gpu": {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"},
}


def exact_ns(us: Decimal | int) -> int:
    """Microseconds as written -> nanoseconds, rounded half up (away from zero)."""
    return int((Decimal(us) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def float64_ns(us: Decimal | int) -> int:
    """What a reader that parses the number as a float64 (json.load's default) gets."""
    return round(float(str(us)) * 1000)


@pytest.fixture(scope="module")
def ns_events(SHARED_TRACES, raw_json):
    return raw_json(SHARED_TRACES / NS_TRACE, parse_float=Decimal)["traceEvents"]


@pytest.fixture(scope="module")
def ns_trace(SHARED_TRACES, load_trace):
    return load_trace(SHARED_TRACES / NS_TRACE)


@pytest.mark.parametrize("table", sorted(TABLE_CATS))
def test_times_are_exact_nanoseconds(ns_events, ns_trace, table):
    raw = [e for e in ns_events if e.get("cat") in TABLE_CATS[table]]
    want = sorted(
        (e["name"], exact_ns(e["ts"]), exact_ns(e["dur"]), exact_ns(e["ts"]) + exact_ns(e["dur"])) for e in raw
    )
    df = getattr(ns_trace, table)
    got = sorted(df.select("name", "ts_ns", "dur_ns", "end_ns").iter_rows())
    assert len(got) == len(want) > 0
    assert got == want
    assert df.schema["ts_ns"] == pl.Int64


def test_float64_would_lose_the_nanosecond_digits(ns_events, ns_trace):
    timestamps = [e["ts"] for e in ns_events if "ts" in e]
    lost = sum(float64_ns(t) != exact_ns(t) for t in timestamps)
    assert lost > 60_000, f"only {lost:,} of {len(timestamps):,} ts values lose digits in float64"
    # ...and the loader kept every one of those digits in its tables
    got = pl.concat([getattr(ns_trace, t).select("ts_ns") for t in TABLE_CATS])["ts_ns"].sort().to_list()
    raw = [e["ts"] for e in ns_events if any(e.get("cat") in cats for cats in TABLE_CATS.values())]
    assert got == sorted(exact_ns(t) for t in raw)
    assert got != sorted(float64_ns(t) for t in raw)
    assert sum(float64_ns(t) != exact_ns(t) for t in raw) > 40_000


def _ns(texts: list[str | None], dtype=pl.Binary) -> list[int | None]:
    values = [t.encode() if (dtype == pl.Binary and t is not None) else t for t in texts]
    df = pl.DataFrame({"t": pl.Series(values, dtype=dtype)})
    return df.select(text_to_ns(pl.col("t")).alias("ns"))["ns"].to_list()


@pytest.mark.parametrize("dtype", [pl.Binary, pl.String])
@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("12", 12_000),
        ("12.5", 12_500),
        ("12.3456", 12_346),  # the 4th decimal rounds half up
        ("12.3455", 12_346),
        ("12.3454", 12_345),
        ("12.9996", 12_000 + 1_000),  # the carry reaches the whole part
        ("-3.25", -3_250),
        ("-12.3456", -12_346),  # half away from zero on the magnitude
        ('"42"', 42_000),  # a quoted number
        ("1e3", 1_000_000),
        ("12.", 12_000),
        ("0.0005", 1),
        ("1712166700123.456", 1_712_166_700_123_456),  # epoch us with ns digits: beyond float64
        ("N/A", None),
        ("", None),
        ("true", None),
        (None, None),
    ],
)
def test_text_to_ns_edge_strings(text, ns, dtype):
    assert _ns([text], dtype) == [ns]


def test_text_to_ns_matches_decimal_on_many_digits():
    texts = ["1712195495519689.047", "0.000499", "7.0015", "123456789.123456789", "-0.0015"]
    assert _ns(texts) == [exact_ns(Decimal(t)) for t in texts]


def test_text_to_ns_out_of_int64_range_is_null_not_wrapped():
    assert _ns(["99999999999999999", "9223372036854775807"]) == [None, None]
