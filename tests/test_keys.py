"""`keys.grouped`: the groups of `group_by` on several keys, String keys grouped by their codes."""

from __future__ import annotations

import polars as pl

from traceanalyzer.keys import grouped

X, Y = "void at::native::elementwise_kernel<128, 4>(" + "x" * 260, "sm90_xmma_gemm_" + "y" * 280


def _segments() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "kind": ["kernel", "kernel", "kernel", "cpu_op", "kernel", None],
            "name": [X, Y, X, X, None, Y],
            "device": [0, 0, 1, 0, 0, 0],
            "duration_ns": [1, 2, 3, 4, 5, 6],
        }
    )


def test_the_groups_of_two_string_keys_in_order_of_first_sight():
    out = grouped(_segments(), ["kind", "name"], pl.col("duration_ns").sum(), pl.len().alias("n"), maintain_order=True)
    assert out.columns == ["kind", "name", "duration_ns", "n"]
    # (kernel, X): rows 0 and 2, 1 + 3; a null name and a null kind are groups of their own
    assert out.rows() == [
        ("kernel", X, 4, 2),
        ("kernel", Y, 2, 1),
        ("cpu_op", X, 4, 1),
        ("kernel", None, 5, 1),
        (None, Y, 6, 1),
    ]


def test_a_number_key_between_strings_keeps_its_place_lazily():
    lf = _segments().lazy()
    out = grouped(lf, ["name", "device", "kind"], pl.col("duration_ns").max(), maintain_order=True).collect()
    assert out.columns == ["name", "device", "kind", "duration_ns"]
    assert out.row(0) == (X, 0, "kernel", 1) and out.row(2) == (X, 1, "kernel", 3) and out.height == 6


def test_one_key_or_no_string_key_is_a_plain_group_by():
    df = _segments()
    assert grouped(df, ["name"], pl.len(), maintain_order=True).rows() == [(X, 3), (Y, 2), (None, 1)]
    by_device = grouped(df, ["device", "duration_ns"], pl.len(), maintain_order=True)
    assert by_device.columns == ["device", "duration_ns", "len"] and by_device.height == 6
