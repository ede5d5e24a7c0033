"""Long strings as grouping keys, by the codes of their distinct values.

A group_by on several columns row-encodes its keys: every key of every row copied into one
buffer, strings included. A kernel name is ~300 bytes, so grouping the 566k critical-path
segments of a 1 GB trace by (kind, name) held 200 MB for a 157-row result, and the 302k kernels
by (name, launching op) 136 MB. Grouped by the codes of the strings instead (a Categorical's
physical UInt32: 4 bytes a row, the distinct strings once), the same groups take 1-30 MB
(measured 2026-12-04, polars 2.1). A group_by on one String column hashes the strings in place
and needs no codes."""

from __future__ import annotations

from typing import Any

import polars as pl


def code(col: str) -> pl.Expr:
    """The codes of `col`'s distinct strings (UInt32; null stays null): equal strings, equal codes.
    A key that groups as the strings do, never one to sort by (codes go by first sight)."""
    return pl.col(col).cast(pl.Categorical).to_physical().alias(f"_code_{col}")


def grouped(frame: Any, keys: list[str], *aggs: pl.Expr, maintain_order: bool = False) -> Any:
    """`frame.group_by(*keys, maintain_order=...).agg(*aggs)` (a DataFrame or a LazyFrame), each
    String key grouped by its `code` when there are several keys: the same groups in the same
    order, the keys as they were and in their place, then the aggregates."""
    schema = frame.collect_schema()
    strings = [k for k in keys if schema[k] == pl.String]
    if len(keys) < 2 or not strings:
        return frame.group_by(*keys, maintain_order=maintain_order).agg(*aggs)
    by = [code(k) if k in strings else pl.col(k) for k in keys]
    out = frame.group_by(*by, maintain_order=maintain_order).agg(*(pl.col(k).first() for k in strings), *aggs)
    names = out.collect_schema().names()
    return out.select(*keys, *(c for c in names[len(keys) + len(strings) :]))
