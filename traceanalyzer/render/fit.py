"""Fitting a table into a width: which columns to show, how wide each is, and how to shorten a
cell so what matters stays visible (the function at the end of a Python frame, the kernel's
name after its namespace). Pure string arithmetic; `text` draws the result with rich."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass

FIXED_WIDTH = 100  # the width when the output is not a terminal and COLUMNS is not set
GUTTER = 2  # spaces between two columns
MIN_TEXT = 14  # a shortened text column keeps at least this many characters
MIN_WRAP = 24  # a wrapped column (advice) keeps at least this many
COMFORTABLE = 32  # low-priority columns are hidden before a text column gets narrower than this
# Long prose: wrapped over several lines rather than shortened.
WRAP_COLUMNS = {"advice", "recommendation", "message", "meaning", "checks", "evidence", "note", "thresholds"}
# Hidden first when a table does not fit, in this order; then the rightmost text columns.
DROP_FIRST = (
    "blocked_thread",
    "next_activity",
    "waited_on",
    "inner_op",
    "input_dims",
    "launched_by",
    "freed_at_us",
    "launch_delay_us",
    "next_stream",
    "tid",
    "pid",
    "range",
    "apis",
    "shown_by",
    "file",
)


def terminal_width() -> int:
    """Columns to fit: `COLUMNS` when set, the terminal's width on a terminal, else 100."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) >= 20:
        return int(env)
    if sys.stdout.isatty():
        return max(shutil.get_terminal_size((FIXED_WIDTH, 40)).columns, 20)
    return FIXED_WIDTH


def _strip_signature(text: str) -> str:
    """A C++ kernel name without `void ` and its argument list: what is left names it."""
    t = text.removeprefix("void ")
    if t.endswith(")") and "(" in t:
        depth = 0
        for k in range(len(t) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(t[k], 0)
            if depth == 0:
                return t[:k] if k > 0 else t
    return t


def middle_ellipsis(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut in the middle with `…` and the tail kept
    longer than the head (a path's file and function, a kernel's own name)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    cpp = ".py(" not in text and ": " not in text and ("::" in text or "<" in text or text.endswith(")"))
    if cpp:  # a C++ name: what names it comes first; its argument list goes
        text = _strip_signature(text)
        if len(text) <= width:
            return text
        lt = text.find("<")
        if 0 < lt and text.endswith(">") and lt + 6 <= width:  # the name whole, its template cut
            return text[: lt + 1] + middle_ellipsis(text[lt + 1 : -1], width - lt - 2) + ">"
        head = (width - 1) * 2 // 3
        return text[:head] + "…" + text[len(text) - (width - 1 - head) :]
    keep = width - 1
    tail = keep - keep // 3
    base = text.rsplit("/", 1)[-1]
    func = text.rsplit(": ", 1)[-1]
    if "/" in text and len(base) + 1 <= keep:  # keep the whole file name and function
        tail = max(tail, len(base) + 1)
    elif ": " in text and len(func) <= keep:  # at least the whole function
        tail = max(tail, len(func))
    head = keep - tail
    return text[:head] + "…" + text[len(text) - tail :]


@dataclass(frozen=True)
class Fit:
    """The columns kept (by index), their widths, the columns hidden, and which wrap."""

    keep: list[int]
    widths: list[int]
    hidden: list[str]
    wrap: list[bool]


def fit_columns(headers: list[str], cells: list[list[str]], numeric: list[bool], width: int) -> Fit:
    """Choose columns and widths so the table's lines are at most `width` characters.

    Numbers are never shortened; text columns shrink (middle ellipsis) down to `MIN_TEXT`,
    prose columns wrap down to `MIN_WRAP`; when even that is too wide, columns are hidden,
    `DROP_FIRST` first, then the rightmost, never the first."""
    natural = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    wrap = [h in WRAP_COLUMNS for h in headers]

    def least(i: int) -> int:
        if numeric[i]:
            return natural[i]
        return min(natural[i], MIN_WRAP if wrap[i] else MIN_TEXT)

    keep = list(range(len(headers)))

    def total(idx: list[int], w) -> int:
        return sum(w(i) for i in idx) + GUTTER * max(len(idx) - 1, 0)

    order = [headers.index(c) for c in DROP_FIRST if c in headers]
    order += [i for i in reversed(range(1, len(headers))) if i not in order]

    def comfortable(i: int) -> int:
        return natural[i] if numeric[i] else min(natural[i], COMFORTABLE + (8 if wrap[i] else 0))

    hidden = []
    # First the low-priority columns, while the others cannot have a comfortable width; then
    # any column from the right, while even the narrowest widths do not fit.
    for i in [headers.index(c) for c in DROP_FIRST if c in headers]:
        if total(keep, comfortable) <= width:
            break
        keep.remove(i)
        hidden.append(headers[i])
    for i in [j for j in order if j in keep]:
        if total(keep, least) <= width or len(keep) <= 1:
            break
        keep.remove(i)
        hidden.append(headers[i])
    widths = {i: natural[i] for i in keep}
    # Shrink the widest shrinkable column one character at a time: water-filling, so short
    # columns keep their full text and long ones share what is left.
    excess = total(keep, lambda i: widths[i]) - width
    while excess > 0:
        candidates = [i for i in keep if widths[i] > least(i)]
        if not candidates:
            break
        i = max(candidates, key=lambda j: (widths[j], j))
        widths[i] -= 1
        excess -= 1
    return Fit(keep, [widths[i] for i in keep], hidden, [wrap[i] for i in keep])
