"""The JSON of a long table, encoded a slice of rows at a time, is the text of the table
encoded whole (`render.json_format.ROWS_AT_ONCE`): same rows, order, nulls and non-finite floats."""

from __future__ import annotations

import math

import msgspec
import polars as pl

from traceanalyzer.render import json_format
from traceanalyzer.report import Report


def _report(df: pl.DataFrame) -> Report:
    return Report("gaps", "t.json", {}, (), {"gaps": df, "n": df.height})


def test_a_long_table_is_the_same_text_slice_by_slice(monkeypatch):
    n = 1_003
    df = pl.DataFrame(
        {
            "i": list(range(n)),
            "name": [None if i % 7 == 0 else f"op{i}" for i in range(n)],
            "x": [math.inf if i == 500 else i / 3 for i in range(n)],
            "dims": [[i, i + 1] for i in range(n)],
        }
    )
    whole = json_format.render(_report(df))
    monkeypatch.setattr(json_format, "ROWS_AT_ONCE", 100)  # 11 slices, the last one short
    sliced = json_format.render(_report(df))
    assert sliced == whole
    rows = msgspec.json.decode(sliced)["gaps"]
    assert len(rows) == n and rows[1002]["i"] == 1002 and rows[7]["name"] is None
    assert rows[500]["x"] is None and rows[3]["x"] == 1.0 and rows[4]["dims"] == [4, 5]


def test_the_file_is_the_text(tmp_path, monkeypatch):
    """`-o FILE.json` writes the bytes the document is made of: the text `render` returns, to the
    byte, a long table included."""
    monkeypatch.setattr(json_format, "ROWS_AT_ONCE", 7)
    df = pl.DataFrame({"i": list(range(50)), "name": ["µs" if i % 3 else None for i in range(50)]})
    report = _report(df)
    path = tmp_path / "out.json"
    assert json_format.RENDERER.write(report, str(path)) == [str(path)]
    text = json_format.render(report)
    assert path.read_bytes() == text.encode() and text.endswith("}\n")
    assert msgspec.json.decode(path.read_bytes())["gaps"][49] == {"i": 49, "name": "µs"}
