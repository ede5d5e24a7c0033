"""Compact reprs for notebooks and the REPL: a Trace, a Session or an analysis result says what
it holds in one line (tables as `rows×columns`, long text cut), and `_repr_html_` shows the same
as a small table in Jupyter, instead of pages of polars output (`repr(ses.gaps)` was 11 KB).
A result class takes `Compact` as a base and `repr=False` in its `@dataclass`."""

from __future__ import annotations

import dataclasses
from typing import Any

TEXT = 60  # characters of a text field shown


def brief(value: Any) -> str:
    """One short phrase for a field's value."""
    import polars as pl

    if isinstance(value, pl.DataFrame):
        return f"DataFrame({value.height:,}×{value.width})"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.6g}"
    if isinstance(value, (list, tuple)) and len(value) > 4:
        return f"{type(value).__name__}[{len(value)}]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{type(value).__name__}(…)"
    text = repr(value)
    return text if len(text) <= TEXT else text[: TEXT - 1] + "…"


def fields(obj: Any) -> list[tuple[str, str]]:
    """(name, brief value) of each dataclass field of `obj`."""
    return [(f.name, brief(getattr(obj, f.name))) for f in dataclasses.fields(obj) if f.repr]


def html_table(title: str, rows: list[tuple[str, str]]) -> str:
    """A small HTML table: the title, then one row per field."""
    import html  # a notebook's display only: not on a command's start-up

    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows
    )
    return f"<div><strong>{html.escape(title)}</strong><table>{body}</table></div>"


class Compact:
    """`__repr__` and `_repr_html_` from the dataclass fields, each in a few characters."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v}" for k, v in fields(self)) + ")"

    def _repr_html_(self) -> str:
        return html_table(type(self).__name__, fields(self))


class UnreadError(AttributeError):
    """A table read that a lean Session (a rank's row: `Session(lean=True)`) did not compute."""


class Unread:
    """Stands, in a result computed for a lean Session (a rank's row in directory mode, which
    keeps only the rules' rule, severity and message and the health checks), for a table that
    nothing there reads: not computed, and reading it raises `UnreadError`, so that a rule that
    starts to read it fails its tests instead of reading an empty table."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def _unread(self, *_: Any) -> Any:
        raise UnreadError(
            f"{self.what} is not computed for a lean Session (a rank's row): compute the result "
            "on a Session(lean=False), or read it in the lean analysis too"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)  # the protocols copy and pickle probe for
        self._unread()

    __getitem__ = __len__ = __iter__ = __bool__ = __eq__ = _unread
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Unread({self.what!r})"
