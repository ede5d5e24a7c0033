"""The JSON of a document whose tables are written a slice of rows at a time, each indented where
it stands (`render.json_format.ROWS_AT_ONCE`), is the text of the document encoded and indented
whole: same rows, order, nulls and non-finite floats, to the byte."""

from __future__ import annotations

import math

import msgspec
import polars as pl

from traceanalyzer.render import json_format
from traceanalyzer.report import Report


def _report(df: pl.DataFrame) -> Report:
    return Report("gaps", "t.json", {}, (), {"gaps": df, "n": df.height})


def _whole(report: Report) -> str:
    """The document as Python objects, encoded and indented in one go."""
    return msgspec.json.format(msgspec.json.encode(json_format.document(report)), indent=2).decode() + "\n"


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
    whole = _whole(_report(df))
    assert json_format.render(_report(df)) == whole  # one slice
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


def test_a_big_table_deep_in_the_document_is_indented_where_it_stands(monkeypatch):
    """`path`'s shape: tables inside the objects of a list, one of them small, and a list of
    tables; slice by slice, the text is the document indented whole."""
    rows = lambda n, k: pl.DataFrame({"kind": ["kernel"] * n, "at": [k * 100 + i for i in range(n)]})  # noqa: E731
    payload = {
        "steps": [{"step": 1, "segments": rows(30, 1)}, {"step": 2, "segments": rows(3, 2)}],
        "tables": [rows(12, 3), rows(25, 4)],
        # a trace's text like a placeholder stays text: its list of tables is another
        "names": pl.DataFrame({"name": ["\x00table0.1\x00", "x"]}),
    }
    report = Report("path", "t.json", {}, (), payload)
    whole = _whole(report)
    monkeypatch.setattr(json_format, "ROWS_AT_ONCE", 5)
    sliced = json_format.render(report)
    assert sliced == whole
    doc = msgspec.json.decode(sliced)
    assert [r["at"] for r in doc["steps"][0]["segments"]][-2:] == [128, 129]
    assert doc["tables"][1][24] == {"kind": "kernel", "at": 424} and doc["names"][0]["name"] == "\x00table0.1\x00"
