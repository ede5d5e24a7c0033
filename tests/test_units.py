"""The one display helper (ns on the trace clock -> µs from the trace start) and the one plural."""

from __future__ import annotations

import polars as pl

from traceanalyzer.units import Shown, display_us, duration_us, is_point, mean_us, point_ms, point_us, us_name
from traceanalyzer.wording import noun, plural, span


def test_points_count_from_the_trace_start_and_durations_do_not():
    df = pl.DataFrame(
        {
            "start_ns": [1_000_500],
            "duration_ns": [2_500],
            "blocked_ns_per_step": [1_250.0],
            "peak_at_ns": [1_001_000],
            "bytes": [7],
        }
    )
    out = display_us(df, origin_ns=1_000_000)
    # worked by hand: (1_000_500 - 1_000_000) / 1000 = 0.5 µs; 2_500 ns = 2.5 µs
    assert out.columns == ["start_us", "duration_us", "blocked_us_per_step", "peak_at_us", "bytes"]
    assert out.row(0) == (0.5, 2.5, 1.25, 1.0, 7)
    assert display_us(df, 1_000_000, keep=["duration_ns"]).columns[1] == "duration_ns"


def test_names_and_scalars():
    assert is_point("startup_end_ns") and is_point("t_ns") and not is_point("window_ns")
    assert us_name("idle_while_blocked_ns") == "idle_while_blocked_us"
    assert point_us(None, 5) is None and point_us(2_005, 5) == 2.0
    assert duration_us(None) == 0.0 and duration_us(1_500) == 1.5
    assert point_ms(3_000_005, 5) == 3.0


def test_a_display_view_is_computed_once():
    class R:
        origin_ns = 100
        calls = 0

        @property
        def t_ns(self):
            R.calls += 1
            return pl.DataFrame({"ts_ns": [1_100]})

        t = Shown("t_ns")

    r = R()
    assert r.t["ts_us"].to_list() == [1.0] and r.t.height == 1 and R.calls == 1


def test_one_plural():
    assert plural(1, "copy") == "1 copy" and plural(3, "copy") == "3 copies"
    assert plural(2, "GPU activity") == "2 GPU activities" and noun(2, "day") == "days"
    assert plural(1_024, "kernel") == "1,024 kernels"


def test_the_ns_fields_of_a_struct_are_shown_in_place():
    # A gap's blocked_thread: another thread's call, 1_500 ns of it during the gap, 4_000 ns in all.
    df = pl.DataFrame(
        {
            "gap_id": [1, 2],
            "blocked_thread": [{"tid": 7, "blocked_ns": 1_500, "call_id": 3, "call_ns": 4_000}, None],
        }
    )
    out = display_us(df, origin_ns=1_000_000)  # durations: the origin does not move them
    assert [f.name for f in out.schema["blocked_thread"].fields] == ["tid", "blocked_us", "call_id", "call_us"]
    assert out["blocked_thread"].to_list() == [{"tid": 7, "blocked_us": 1.5, "call_id": 3, "call_us": 4.0}, None]


def test_a_mean_of_integer_ns_is_one_division():
    # 10 steps summing to 5_587_232 ns: 558.7232 µs each, the nearest double to it (a mean in ns
    # first, 558_723.2, then / 1000, gives 558.7231999999999).
    assert mean_us(5_587_232, 10) == 558.7232 and 558_723.2 / 1000 != 558.7232
    assert mean_us(0, 0) == 0.0 and mean_us(1_000, 4) == 0.25


def test_display_divides_exactly_in_long_tables():
    # 84,616,006 ns is 84,616.006 µs; polars' column / 1000.0 (a product with 0.001) gave
    # 84616.00600000001 in a table of more than one row. Every value must be the nearest double.
    ns = [84_616_006, 3_925, 1, None, 512_187]
    shown = display_us(pl.DataFrame({"dur_ns": ns, "start_ns": ns}), origin_ns=0)
    assert shown["dur_us"].to_list() == [84616.006, 3.925, 0.001, None, 512.187]
    assert shown["start_us"].to_list() == [84616.006, 3.925, 0.001, None, 512.187]


def test_display_divides_exactly_in_one_row_and_empty_tables():
    # A one-row column is the case polars could take for a scalar (a product with 0.001 gives
    # 84616.00600000001); an empty one stays empty and typed.
    assert display_us(pl.DataFrame({"dur_ns": [84_616_006]}), origin_ns=0)["dur_us"].to_list() == [84616.006]
    empty = display_us(pl.DataFrame({"dur_ns": []}, schema={"dur_ns": pl.Int64}), origin_ns=0)
    assert empty.schema == pl.Schema({"dur_us": pl.Float64}) and empty.height == 0


def test_display_keeps_a_column_named_like_its_divisor():
    # display_us divides by a helper column of 1000.0 placed beside the frame's own: a frame that
    # already holds a column of that name keeps it, and the helper is never in the result.
    df = pl.DataFrame({"__thousand": ["mine"], "start_ns": [1_500], "x": [7]})
    shown = display_us(df, origin_ns=500)
    assert shown.columns == ["__thousand", "start_us", "x"]
    assert shown.row(0) == ("mine", 1.0, 7)


def test_a_span_keeps_its_digits():
    # mi250_rocm_minitoy's steady state is its second step, 49.073 µs: "0.0 ms" said nothing.
    assert span(49.073) == "49 µs" and span(9288.291) == "9.3 ms" and span(12_400_000.0) == "12.4 s"
