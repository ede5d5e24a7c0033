"""Markdown: one heading and one table per section, ready to paste into a ticket."""

from __future__ import annotations

from traceanalyzer.render.values import cell
from traceanalyzer.report import Report

EXTENSION = ".md"
BINARY = False


def _escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table(df) -> list[str]:
    """A frame as Markdown table lines."""
    if df.height == 0:
        return ["_none_"]
    cols = df.columns
    out = [
        "| " + " | ".join(cols) + " |",
        "|" + "|".join("---:" if df.schema[c].is_numeric() else "---" for c in cols) + "|",
    ]
    for r in df.iter_rows():
        out.append("| " + " | ".join(_escape(cell(v, c)) for c, v in zip(cols, r)) + " |")
    return out


def render(report: Report, level: int = 2) -> str:
    """A Report as Markdown."""
    h = "#" * level
    lines = [f"{h} traceanalyzer {report.command}: `{report.input}`", ""]
    if report.headline:
        lines += [report.headline, ""]
    for w in report.warnings:
        lines += [f"> warning: {w}", ""]
    for s in report.sections:
        lines += [f"{h}# {s.title}", ""]
        if s.text:
            lines += [s.text, ""]
        if s.table is not None and s.show_table:
            rows = report.table_rows
            shown = s.table if not rows or s.whole else s.table.head(rows)
            lines += table(shown) + [""]
            if shown.height < s.table.height:
                lines += [f"_{shown.height} of {s.table.height} rows; `--top 0` lists all_", ""]
    if report.thresholds:
        lines.append("Thresholds: " + ", ".join(f"`{k}={v}`" for k, v in report.thresholds.items()))
    return "\n".join(lines).rstrip() + "\n"
