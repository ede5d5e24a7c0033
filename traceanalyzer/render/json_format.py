"""JSON: `tool_version`, `command`, `input`, `thresholds`, `warnings`, then the command's body."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import polars as pl

from traceanalyzer.render.base import Format
from traceanalyzer.render.output import write_atomic
from traceanalyzer.report import Report
from traceanalyzer.version import __version__


def _clean(value: Any, tables: list[pl.DataFrame] | None = None) -> Any:
    """`value` as what msgspec encodes. With `tables`, a table with rows goes there and leaves a
    placeholder, `_hole`, in its place (`_pieces`)."""
    if callable(value) and not isinstance(value, type):
        # a part of the body only JSON prints, computed when the JSON is written (`Report.payload`)
        return _clean(value(), tables)
    if isinstance(value, pl.DataFrame):
        if tables is not None and value.height:
            tables.append(value)
            return _hole(tables)
        return [_clean(r) for r in value.iter_rows(named=True)]
    if isinstance(value, dict):
        return {str(k): _clean(v, tables) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, tables) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# Rows made Python objects and JSON text at once: a table is written a slice at a time, each
# slice indented where the table stands, so that neither the tables as dicts nor the document's
# text is ever whole (a 1 GB trace's `path`: 566k segments in 195 steps' tables, 268 MB of JSON,
# had the dicts, the compact and the indented text in memory at once, +494 MB).
ROWS_AT_ONCE = 4_000
# A table's placeholder, as msgspec writes it: its number and the number of the document's
# list of tables (no string of a trace is taken for one), between NULs.
_HOLE = re.compile(rb'"\\u0000table(\d+)\.(\d+)\\u0000"')


def _hole(tables: list[pl.DataFrame]) -> str:
    return f"\x00table{len(tables) - 1}.{id(tables)}\x00"


def document(report: Report, tables: list[pl.DataFrame] | None = None) -> dict[str, Any]:
    """The JSON document of a Report (tool_version, input, thresholds, payload) as what msgspec
    encodes; with `tables`, its big tables there and placeholders in their place (`_pieces`)."""
    return {
        "tool_version": __version__,
        "command": report.command,
        "input": report.input,
        "thresholds": report.thresholds,
        "warnings": list(report.warnings),
        **_clean(report.payload, tables),
    }


def _pieces(report: Report) -> Iterator[bytes]:
    """The document indented by two (as `msgspec.json.format` indents it whole), in pieces:
    the document without its tables, formatted, and each table in its placeholder's place, a
    slice of rows at a time, indented to the depth it stands at."""
    tables: list[pl.DataFrame] = []
    text = msgspec.json.format(msgspec.json.encode(document(report, tables)), indent=2)
    at = 0
    for hole in _HOLE.finditer(text):
        if int(hole.group(2)) != id(tables):
            continue
        yield text[at : hole.start()]
        line = text[text.rfind(b"\n", 0, hole.start()) + 1 : hole.start()]
        pad = b"\n" + b" " * (len(line) - len(line.lstrip(b" ")))  # a newline and the line's indent
        yield from _table(tables[int(hole.group(1))], pad)
        tables[int(hole.group(1))] = None  # type: ignore[call-overload]  # let it go once written
        at = hole.end()
    yield text[at:]


def _table(df: pl.DataFrame, pad: bytes) -> Iterator[bytes]:
    """A table's rows (at least one) as an indented JSON list, its elements one step deeper than
    `pad` (a newline and the line's indent)."""
    yield b"["
    for off in range(0, df.height, ROWS_AT_ONCE):
        rows = msgspec.json.encode([_clean(r) for r in df.slice(off, ROWS_AT_ONCE).iter_rows(named=True)])
        body = msgspec.json.format(rows, indent=2)[1:-2]  # "[" ... "\n]": the elements, each line from "\n"
        yield (b"," if off else b"") + body.replace(b"\n", pad)
    yield pad + b"]"


def render(report: Report) -> str:
    """A Report as JSON text."""
    return b"".join(_pieces(report)).decode() + "\n"


def write(report: Report, path: str) -> list[str]:
    """The JSON written to `path` piece by piece (`_pieces`): the big tables a slice at a time,
    no whole text of the document."""
    write_atomic(path, itertools.chain(_pieces(report), (b"\n",)))
    return [path]


RENDERER = Format("json", ".json", False, "JSON, every field", render, write)
