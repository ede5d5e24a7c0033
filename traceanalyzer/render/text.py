"""Plain-text tables for a terminal."""

from __future__ import annotations

import shutil

from traceanalyzer.render.values import cell
from traceanalyzer.report import Report

EXTENSION = ".txt"
BINARY = False
MAX_CELL = 60


def _table(df) -> list[str]:
    cols = df.columns
    rows = [[cell(v, c) for c, v in zip(cols, r)] for r in df.iter_rows()]
    rows = [[v if len(v) <= MAX_CELL else v[: MAX_CELL - 1] + "…" for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    numeric = [df.schema[c].is_numeric() for c in cols]

    def fmt(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    out = [fmt(cols), "  ".join("-" * w for w in widths)]
    out += [fmt(r) for r in rows]
    return out


def render(report: Report) -> str:
    lines = []
    if report.headline:
        lines += [report.headline, ""]
    for s in report.sections:
        lines.append(f"== {s.title}")
        if s.text:
            lines.append(s.text)
        if s.table is not None:
            lines += _table(s.table) if s.table.height else ["(none)"]
        lines.append("")
    if report.thresholds:
        lines.append("thresholds: " + ", ".join(f"{k}={v}" for k, v in report.thresholds.items()))
    return "\n".join(lines).rstrip() + "\n"


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 40)).columns
