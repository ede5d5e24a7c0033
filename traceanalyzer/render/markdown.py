"""Markdown: the report's title, headline, warnings, then one heading per section and its
blocks, ready to paste into a ticket (GitHub, GitLab, Jira's Markdown) and the source of the
HTML page.

Plain text is escaped (so `__next__` is not bold and `<module>` is not an HTML tag that GitHub
drops), names go in code spans (table cells of name columns, `Code` parts of prose), every
text passes `scrub_text`. `write` puts the pictures beside the Markdown file."""

from __future__ import annotations

import os
import re

import polars as pl

from traceanalyzer.redact import scrub_text
from traceanalyzer.render.base import Format
from traceanalyzer.render.output import write_atomic
from traceanalyzer.render.values import NAME_COLUMNS, cell, display_frame
from traceanalyzer.report import Code, Findings, Image, Inline, Report, Strong, Table, Text
from traceanalyzer.report import inline as parse

# The ASCII punctuation that starts markup anywhere in a line (emphasis, code, links, HTML,
# table cells, strike-through, entities); CommonMark lets a backslash escape each of them. An
# underscore between two letters or digits never starts emphasis, so `data_loading` stays
# readable in the Markdown source while `__next__` is escaped.
_SPECIAL = re.compile(r"([\\`*\[\]<>|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# What starts a block only at the start of a line: a heading, a list, a setext rule.
_LINE_START = re.compile(r"^(\s*)([#+\-=]|\d+(?=[.)](\s|$)))")


def escape(text: str) -> str:
    """Plain text as Markdown that shows it verbatim (one line: newlines become spaces)."""
    t = _SPECIAL.sub(r"\\\1", scrub_text(text).replace("\n", " "))
    m = _LINE_START.match(t)
    if m and not m.group(2).isdigit():
        return t[: m.end(1)] + "\\" + t[m.end(1) :]
    if m:  # "1." starts an ordered list: escape the dot
        return t[: m.end()] + "\\" + t[m.end() :]
    return t


def code(text: str) -> str:
    """`text` as a code span, with a fence longer than any run of backticks inside; `|` escaped
    for table cells (GFM splits cells before it reads code spans)."""
    t = scrub_text(text).replace("\n", " ").replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall(r"`+", t)), default=0) + 1)
    pad = " " if t.startswith(("`", " ")) or t.endswith(("`", " ")) else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def inline(parts: tuple[Inline, ...]) -> str:
    """Prose parts as Markdown: text escaped, `Code` in code spans, `Strong` in bold."""
    out = []
    for p in parts:
        if isinstance(p, Code):
            out.append(code(p.text))
        elif isinstance(p, Strong):
            out.append(f"**{escape(p.text)}**")
        else:
            out.append(escape(p))
    return "".join(out)


def _paragraph(parts: tuple[Inline, ...]) -> list[str]:
    """A paragraph; its own line breaks kept as hard breaks (a backslash at the line's end)."""
    lines: list[list[Inline]] = [[]]
    for p in parts:
        if isinstance(p, str) and "\n" in p:
            first, *rest = p.split("\n")
            lines[-1].append(first)
            lines += [[r.lstrip()] for r in rest]
        else:
            lines[-1].append(p)
    text = [inline(tuple(x for x in line if x != "")) for line in lines]
    text = [t for t in text if t.strip()]
    return [t + "\\" for t in text[:-1]] + text[-1:]


def table(df: pl.DataFrame) -> list[str]:
    """A frame as Markdown table lines: names in code spans, the rest escaped."""
    if df.height == 0:
        return ["_none_"]
    df = display_frame(df)  # kernel names demangled and shortened, as on a terminal
    cols = df.columns
    out = [
        "| " + " | ".join(escape(c) for c in cols) + " |",
        "|" + "|".join("---:" if df.schema[c].is_numeric() else "---" for c in cols) + "|",
    ]
    for r in df.iter_rows():
        cells = []
        for c, v in zip(cols, r):
            s = cell(v, c)
            cells.append(code(s) if c in NAME_COLUMNS and v is not None and s else s if v is None else escape(s))
        out.append("| " + " | ".join(cells) + " |")
    return out


def finding_line(f) -> str:
    """One finding as a list item: severity and rule in bold, its ranks, message and advice."""
    ranks = f" (ranks {', '.join(str(r) for r in f.ranks)})" if f.ranks else ""
    text = f"{inline(parse(f.message))} — {inline(parse(f.recommendation))}"
    return f"- **\\[{escape(f.severity)}\\] {escape(f.rule)}**{escape(ranks)}: {text}"


def blocks(report: Report, image_prefix: str = "") -> list[str]:
    """Every section of the report as Markdown lines."""
    lines: list[str] = []
    for s in report.sections:
        lines += [f"## {escape(s.title)}", ""]
        for b in s.content():
            if isinstance(b, Text):
                if b.parts:
                    lines += _paragraph(b.parts) + [""]
                if b.items:
                    lines += [f"- {inline(i)}" for i in b.items] + [""]
            elif isinstance(b, Table):
                rows = report.table_rows
                shown = b.frame if not rows or b.whole else b.frame.head(rows)
                lines += table(shown) + [""]
                if shown.height < b.frame.height:
                    lines += [f"_{shown.height} of {b.frame.height} rows; `--top 0` lists all_", ""]
            elif isinstance(b, Image):
                lines += [f"![{escape(b.caption)}]({image_prefix}{b.name})", ""]
            elif isinstance(b, Findings):
                lines += ([finding_line(f) for f in b.rows] or [f"- {escape(b.empty)}"]) + [""]
    return lines


def render(report: Report) -> str:
    """A Report as Markdown."""
    lines = [f"# {escape(report.heading)}", ""]
    if report.headline:
        lines += [escape(report.headline), ""]
    for w in report.warnings:
        lines += [f"> warning: {escape(w)}", ""]
    lines += blocks(report)
    if report.thresholds:
        lines.append("Thresholds: " + ", ".join(code(f"{k}={v}") for k, v in report.thresholds.items()))
    return "\n".join(lines).rstrip() + "\n"


def write(report: Report, path: str) -> list[str]:
    """The Markdown at `path` and its pictures beside it (referenced by file name)."""
    folder = os.path.dirname(path)
    written = []
    for img in report.images():
        p = os.path.join(folder, img.name)
        write_atomic(p, img.data)
        written.append(p)
    write_atomic(path, render(report))
    return [path, *written]


RENDERER = Format("markdown", ".md", False, "Markdown (pictures beside it)", render, write)
