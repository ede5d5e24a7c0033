"""`intervals.overlap_join` (the sorted sweep that replaced join_where between event tables)
against the definition, pair by pair: every (left, right) with equal keys, left start < right
end and left end > right start, on random small frames with ties, zero-length intervals and
null keys."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from traceanalyzer.analyses.intervals import overlap_join


def _frames(seed: int):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(0, 30, 2)
    left = pl.DataFrame({"g": rng.integers(0, 3, n), "a": rng.integers(0, 20, n)}).with_columns(
        b=pl.col("a") + pl.Series(rng.integers(0, 6, n)), lid=pl.int_range(pl.len())
    )
    right = pl.DataFrame({"_g": rng.integers(0, 3, m), "s": rng.integers(0, 20, m)}).with_columns(
        e=pl.col("s") + pl.Series(rng.integers(0, 6, m)), rid=pl.int_range(pl.len())
    )
    if n and seed % 3 == 0:
        left = left.with_columns(g=pl.when(pl.col("lid") == 0).then(None).otherwise("g"))
    return left, right


def _definition(left: pl.DataFrame, right: pl.DataFrame, keyed: bool) -> list[tuple[int, int]]:
    out = []
    for l in left.iter_rows(named=True):  # noqa: E741
        for r in right.iter_rows(named=True):
            same = not keyed or (l["g"] is not None and l["g"] == r["_g"])
            if same and r["s"] < l["b"] and r["e"] > l["a"]:
                out.append((l["lid"], r["rid"]))
    return sorted(out)


@pytest.mark.parametrize("seed", range(60))
def test_overlap_join_is_the_definition(seed):
    left, right = _frames(seed)
    got = overlap_join(left, right, ["g"], ("a", "b"), ("s", "e"), right_by=["_g"])
    assert sorted(got.select("lid", "rid").rows()) == _definition(left, right, True)
    assert set(got.columns) == set(left.columns) | set(right.columns)
    every = overlap_join(left, right, [], ("a", "b"), ("s", "e"))
    assert sorted(every.select("lid", "rid").rows()) == _definition(left, right, False)
