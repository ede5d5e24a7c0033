"""Plain-text tables for a terminal, drawn with rich and fitted to the width: detected on a
terminal, `COLUMNS` when set, 100 otherwise; `--wide` shows every column in full.

Columns that do not fit are hidden (named under the table), long names and paths are cut in
the middle so the function stays visible, prose (advice) wraps. `report.table_rows` rows per
table, with a line saying how many there are in all."""

from __future__ import annotations

import dataclasses
import io
import textwrap

import polars as pl
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from traceanalyzer.render.base import Format
from traceanalyzer.render.fit import GUTTER, WRAP_COLUMNS, fit_columns, fold_name, middle_ellipsis, terminal_width
from traceanalyzer.render.values import cause_style, cell, display_frame
from traceanalyzer.report import Findings, Image, Report, plain
from traceanalyzer.report import Table as TableBlock
from traceanalyzer.report import Text as TextBlock

UNLIMITED = 100_000  # the "width" of --wide
WIDE_TEXT = 80  # with --wide, names and prose fold at this width

__all__ = ["RENDERER", "render", "table_lines", "terminal_width"]


# rich's SIMPLE_HEAD with an ASCII rule: "─" is three bytes in UTF-8, so a full-width rule was
# three times the width to anything that counts bytes (a pager in the C locale, a log viewer).
HEAD_RULE = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


SEVERITY_STYLES = {"high": "bold red", "error": "bold red", "medium": "yellow", "warning": "yellow", "low": "cyan"}


def _style(column: str, value: str, color: bool) -> str:
    """The rich style of a cell on a colour terminal: severities and causes, else none."""
    if not color:
        return ""
    if column in ("severity",) and value in SEVERITY_STYLES:
        return SEVERITY_STYLES[value]
    if column == "cause" and value not in ("-", ""):
        return cause_style(value)
    return ""


def table_lines(
    df: pl.DataFrame, width: int, wide: bool = False, protect: tuple[str, ...] = (), color: bool = False
) -> list[str]:
    """The table's lines, none longer than `width` (unless `wide`): kernel names demangled and
    shortened, names folded rather than cut, columns in `protect` never hidden."""
    df = display_frame(df)
    headers = df.columns
    cells = [[cell(v, c) for c, v in zip(headers, r)] for r in df.iter_rows()]
    numeric = [df.schema[c].is_numeric() for c in headers]
    fit = fit_columns(headers, cells, numeric, UNLIMITED if wide else width, protect)
    if wide:  # every column, but a long name or text folds at WIDE_TEXT instead of making lines of thousands
        fit = dataclasses.replace(fit, widths=[min(w, WIDE_TEXT) if f else w for w, f in zip(fit.widths, fit.wrap)])
    table = Table(box=HEAD_RULE, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, w, wrap in zip(fit.keep, fit.widths, fit.wrap):
        table.add_column(
            Text(middle_ellipsis(headers[i], w)),
            justify="right" if numeric[i] else "left",
            width=w,
            no_wrap=not wrap,
            overflow="fold" if wrap else "ellipsis",
        )
    # a name folds where a reader would break it (`fold_name`), prose is left to rich, which wraps
    # it at its words, the rest is cut in the middle
    shape = [
        _as_written if wrap and headers[i] in WRAP_COLUMNS else fold_name if wrap else middle_ellipsis
        for i, wrap in zip(fit.keep, fit.wrap)
    ]
    for r in cells:
        table.add_row(
            *(Text(f(r[i], w), style=_style(headers[i], r[i], color)) for i, w, f in zip(fit.keep, fit.widths, shape))
        )
    total = sum(fit.widths) + GUTTER * max(len(fit.widths) - 1, 0)
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=max(total, 1),
        color_system="standard" if color else None,
        force_terminal=color,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    console.print(table)
    lines = [line.rstrip() for line in buf.getvalue().splitlines()]
    lines = [line for line in lines if line.strip()]
    if fit.hidden:
        said = [f"{h} ({fit.constant[h]} in every row)" if h in fit.constant else h for h in fit.hidden]
        note = f"(not shown at this width: {', '.join(said)}; --wide shows every column)"
        lines += _wrap(note, width, wide)
    return lines


def _as_written(text: str, width: int) -> str:
    """A prose cell as it is: rich wraps it at its words to the column's width."""
    return text


def _wrap(text: str, width: int, wide: bool) -> list[str]:
    """A paragraph wrapped to the width, keeping its own line breaks and indentation."""
    if wide:
        return text.splitlines()
    out = []
    for line in text.splitlines() or [""]:
        indent = line[: len(line) - len(line.lstrip())]
        first = line.lstrip()
        more = indent + ("   " if first.startswith("->") else "    " if first.startswith(("[", "- ")) else "")
        out += textwrap.wrap(line, width, subsequent_indent=more, break_on_hyphens=False) or [""]
    return out


def _table(df: pl.DataFrame, whole: bool, report: Report, width: int, protect: tuple[str, ...] = ()) -> list[str]:
    if not df.height:
        return ["(none)"]
    rows = report.table_rows
    shown = df if rows is None or rows <= 0 or whole else df.head(rows)
    lines = table_lines(shown, width, report.wide, protect, report.color)
    if shown.height < df.height:
        rest = ", JSON and CSV hold all" if report.exports_whole else ""
        lines.append(f"({shown.height} of {df.height} rows; --top 0 lists all{rest})")
    return lines


def _block(b, report: Report, width: int) -> list[str]:
    """One block of a section's `blocks` as lines."""
    wide = report.wide
    if isinstance(b, TextBlock):
        lines = _wrap(plain(b.parts), width, wide) if b.parts else []
        return lines + [x for i in b.items for x in _wrap("- " + plain(i), width, wide)]
    if isinstance(b, TableBlock):
        return _table(b.frame, b.whole, report, width, b.keep)
    if isinstance(b, Image):
        return _wrap(f"(picture: {b.caption}, {b.name})", width, wide)
    if isinstance(b, Findings):
        if not b.rows:
            return _wrap(b.empty, width, wide)
        out = []
        for f in b.rows:
            ranks = f" (ranks {', '.join(str(r) for r in f.ranks)})" if f.ranks else ""
            out += _wrap(f"[{f.severity}] {f.rule}{ranks}: {f.message}\n    -> {f.recommendation}", width, wide)
        return out
    return []


def render(report: Report) -> str:
    """The report as text for a terminal."""
    width = report.width or terminal_width()
    wide = report.wide
    lines: list[str] = []
    if report.headline:
        lines += _wrap(report.headline, width, wide) + [""]
    for s in report.sections:
        lines += _wrap(f"== {s.title}", width, wide)
        if s.text:  # as written: a command's text keeps its `backticks` on a terminal
            lines += _wrap(s.text, width, wide)
        if s.table is not None and s.show_table:
            lines += _table(s.table, s.whole, report, width, s.keep)
        for b in s.blocks:
            lines += _block(b, report, width)
        lines.append("")
    if report.thresholds:
        if wide:
            # prose, wrapped at the width even with --wide (it was one line of ~800 characters)
            lines += _wrap("thresholds: " + ", ".join(f"{k}={v}" for k, v in report.thresholds.items()), width, False)
        else:
            n = len(report.thresholds)
            lines += _wrap(f"thresholds: {n} values, each a flag (--help); --wide or the JSON lists them", width, wide)
    out = "\n".join(lines).rstrip() + "\n"
    return _color_tags(out) if report.color else out


ANSI = {"bold red": "\x1b[1;31m", "yellow": "\x1b[33m", "cyan": "\x1b[36m"}


def _color_tags(out: str) -> str:
    """`[high]`, `[error]`, `[medium]`, ... coloured by severity (ANSI), for a colour terminal."""
    for sev, style in SEVERITY_STYLES.items():
        out = out.replace(f"[{sev}]", f"{ANSI[style]}[{sev}]\x1b[0m")
    return out


RENDERER = Format("table", ".txt", False, "text tables fitted to the terminal", render)
