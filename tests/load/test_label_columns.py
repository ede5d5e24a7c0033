"""`ops.kind` and `runtime.api` are enums of their closed sets (one byte a row), with the counts
the raw JSON gives: b200_eager_rank0 has 4,809 `cpu_op` and 3 `user_annotation` complete events,
1,151 `cuda_runtime` and 221 `cuda_driver` ones (counted with `zcat | python -c`, `ph == "X"`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.load import load
from traceanalyzer.trace import OP_KINDS, RUNTIME_APIS


@pytest.fixture(scope="module")
def b200(SHARED_TRACES: Path):
    return load(SHARED_TRACES / "b200_eager_rank0.json.gz")


def test_op_kind_is_an_enum_with_the_raw_counts(b200):
    assert b200.ops.schema["kind"] == OP_KINDS
    counts = dict(b200.ops.group_by("kind").len().select(pl.col("kind").cast(pl.String), "len").iter_rows())
    assert counts == {"cpu_op": 4809, "user_annotation": 3}
    # readers compare with a plain string, as they did when the column was a string
    assert b200.ops.filter(pl.col("kind") == "user_annotation").height == 3
    assert b200.ops.filter(pl.col("kind") != "cpu_op").height == 3


def test_runtime_api_is_an_enum_with_the_raw_counts(b200):
    assert b200.runtime.schema["api"] == RUNTIME_APIS
    assert b200.runtime.filter(pl.col("api") == "driver").height == 221
    assert b200.runtime.filter(pl.col("api") == "runtime").height == 1151
    assert set(b200.runtime["api"].to_list()) == {"runtime", "driver"}  # read back as strings
