"""The walk up `parent_id`: numpy (small traces) and polars (large) give the same rows."""

import numpy  # noqa: F401 - the numpy walk runs where numpy is already loaded
import polars as pl
import pytest

from traceanalyzer.analyses import op_tree


def _ops(parents):
    return pl.DataFrame(
        {"op_id": list(range(len(parents))), "parent_id": parents}, schema_overrides={"parent_id": pl.Int64}
    )


# 0 <- 1 <- 2 <- 3, 0 <- 4, 5 alone: op 3 is 3 deep, worked out by hand
PARENTS = [None, 0, 1, 2, 0, None]
WANT = {
    (3, 3, 0), (3, 2, 1), (3, 1, 2), (3, 0, 3),
    (4, 4, 0), (4, 0, 1),
    (5, 5, 0),
}  # fmt: skip


@pytest.mark.parametrize("numpy_below", [0, 1 << 20])
def test_ancestors_by_hand(monkeypatch, numpy_below):
    monkeypatch.setattr(op_tree, "NUMPY_WALK_OPS", numpy_below)
    got = op_tree.ancestors(_ops(PARENTS), pl.Series([3, 4, 5, 4, None]))
    assert got.schema == pl.Schema(op_tree.ANCESTOR_SCHEMA)
    assert set(got.iter_rows()) == WANT
    assert got["level"].to_list() == sorted(got["level"].to_list())  # level by level


def test_numpy_walk_same_rows_in_same_order(monkeypatch):
    import random

    rnd = random.Random(7)
    parents = [None] + [rnd.randrange(i) if rnd.random() < 0.9 else None for i in range(1, 3000)]
    ids = pl.Series(rnd.sample(range(3000), 800) + [4000, -1])  # out of range ids have no row
    monkeypatch.setattr(op_tree, "NUMPY_WALK_OPS", 1 << 20)
    small = op_tree.ancestors(_ops(parents), ids)
    monkeypatch.setattr(op_tree, "NUMPY_WALK_OPS", 0)
    large = op_tree.ancestors(_ops(parents), ids)
    assert small.equals(large)
    assert small.height > 800


@pytest.mark.parametrize("with_numpy", [True, False])
def test_sum_by_row_by_hand(monkeypatch, with_numpy):
    """Rows 0..3: row 1 gets 5 + 7, row 3 gets 2; row 9 (outside) and the null value are left out."""
    import sys

    if not with_numpy:
        monkeypatch.delitem(sys.modules, "numpy")
    at = pl.Series([1, 3, 1, 9, 0], dtype=pl.Int32)
    values = pl.Series([5, 2, 7, 100, None], dtype=pl.Int64)
    got = op_tree.sum_by_row(4, at, values)
    assert got.dtype == pl.Int64 and got.to_list() == [0, 12, 0, 2]


def test_chain_sums_by_hand():
    """On PARENTS: op 3 (10 ns, 1 kernel) and op 4 (5 ns, 2 kernels) launch. Op 0 encloses both:
    15 ns, 3 kernels; ops 1 and 2 enclose op 3 only; op 5 neither."""
    ns, n = op_tree.chain_sums(
        pl.Series(PARENTS, dtype=pl.Int32),
        pl.Series([3, 4], dtype=pl.Int32),
        [pl.Series([10, 5], dtype=pl.Int64), pl.Series([1, 2], dtype=pl.Int64)],
    )
    assert ns.to_list() == [15, 10, 10, 10, 5, 0] and n.to_list() == [3, 1, 1, 1, 2, 0]


def test_chain_sums_are_the_sums_over_the_ancestor_pairs():
    import random

    rnd = random.Random(11)
    parents = [None] + [rnd.randrange(i) if rnd.random() < 0.9 else None for i in range(1, 3000)]
    ids = pl.Series(rnd.sample(range(3000), 800), dtype=pl.Int64)
    values = pl.Series([rnd.randrange(1, 10**6) for _ in range(800)], dtype=pl.Int64)
    anc = op_tree.ancestors(_ops(parents), ids)
    by_id = dict(zip(ids.to_list(), values.to_list(), strict=True))
    want = op_tree.sum_by_row(3000, anc["ancestor_id"], anc["op_id"].replace_strict(by_id, return_dtype=pl.Int64))
    (got,) = op_tree.chain_sums(pl.Series(parents, dtype=pl.Int64), ids, [values])
    assert got.to_list() == want.to_list() and got.sum() > values.sum()
