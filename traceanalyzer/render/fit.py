"""Fitting a table into a width: which columns to show and how wide each is. Names (ops,
kernels, Python frames with their line, APIs: `values.NAME_COLUMNS`) are never cut: they fold
over several lines; prose wraps; other text is cut in the middle. When even that does not fit,
columns give way in order: the low-priority ones (`DROP_FIRST`), columns holding one value in
every row (said under the table), right of the key text that is not a name (flags, shapes),
then, while even the narrowest widths do not fit, columns from the right, text before numbers
before names; the
first name column (the table's key) and the columns the caller protects (the one that explains
the dominant cause) never. Pure string arithmetic; `text` draws the result with rich."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from traceanalyzer.render.names import strip_signature
from traceanalyzer.render.values import NAME_COLUMNS

FIXED_WIDTH = 100  # the width when the output is not a terminal and COLUMNS is not set
GUTTER = 2  # spaces between two columns
MIN_TEXT = 14  # a shortened text column keeps at least this many characters
MIN_WRAP = 24  # a wrapped column (advice) keeps at least this many
COMFORTABLE = 32  # low-priority columns are hidden before a text column gets narrower than this
# Long prose: wrapped over several lines rather than shortened.
WRAP_COLUMNS = {"advice", "recommendation", "message", "meaning", "checks", "evidence", "note", "thresholds", "value"}
# Hidden first when a table does not fit, in this order; then the rightmost text columns.
DROP_FIRST = (
    "blocked_thread",
    "next_activity",
    "waited_on",
    "waited_for",
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


def middle_ellipsis(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut in the middle with `…` and the tail kept
    longer than the head (a path's file and function, a kernel's own name)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    cpp = ".py(" not in text and ": " not in text and ("::" in text or "<" in text or text.endswith(")"))
    if cpp:  # a C++ name: what names it comes first; its argument list goes
        text = strip_signature(text)
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


# Where a name folds, best first: after a C++ scope, a path separator, a comma or at a space;
# then after a dot, an underscore (a word of a snake_case name) or a closing bracket, or before an
# opening one (a Python frame's line number: `base.py` / `(1173): _ensure_tensor_on_device`)
BREAKS_AFTER = (("::", "/", ",", " "), (".", "_", ">", ")"))
BREAKS_BEFORE = ((), ("(",))


def fold_name(text: str, width: int) -> str:
    """A name as lines of at most `width` (joined by newlines), each folded where a reader would
    break it (`BREAKS_AFTER`, `BREAKS_BEFORE`: the last such place of the better kind past the
    line's middle), else before a capital of a CamelCase word, else at the width.
    `autograd::engine::evaluate_function: CompiledFunctionBackward` in 21 columns is
    `autograd::engine::` / `evaluate_function:` / `CompiledFunction` / `Backward`, not cut
    mid-word (`autograd::engine::eva` / `luate_function:`)."""
    if width < 2 or len(text) <= width:
        return text
    lines, rest = [], text
    while len(rest) > width:
        cut = _fold_at(rest, width)
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip(" ")
    return "\n".join([*lines, rest] if rest else lines)


def _fold_at(text: str, width: int) -> int:
    """How many characters of `text` (longer than `width`) the first folded line takes (a space
    it ends with is dropped, so a space just past the width is a place to fold too)."""
    half = width // 2
    for after, before in zip(BREAKS_AFTER, BREAKS_BEFORE, strict=True):
        cuts = [i + len(b) for b in after if (i := text.rfind(b, 0, width + (b == " "))) >= 0]
        cuts += [i for b in before if (i := text.rfind(b, 1, width + 1)) > 0]
        cut = max(cuts, default=0)
        if cut > half:
            return cut
    camel = next((i for i in range(width, half, -1) if text[i].isupper() and text[i - 1].islower()), None)
    return camel if camel is not None else width


@dataclass(frozen=True)
class Fit:
    """The columns kept (by index), their widths, the columns hidden, which wrap (prose and names),
    and the value of each hidden column that held one value in every row."""

    keep: list[int]
    widths: list[int]
    hidden: list[str]
    wrap: list[bool]
    constant: dict[str, str] = field(default_factory=dict)


MIN_NAME = 20  # a folded name column keeps at least this many characters per line
COMFORTABLE_NAME = 40  # a Python frame with its line, most kernel labels


def fit_columns(
    headers: list[str],
    cells: list[list[str]],
    numeric: list[bool],
    width: int,
    protect: tuple[str, ...] | frozenset[str] = (),
) -> Fit:
    """Choose columns and widths so the table's lines are at most `width` characters (see the
    module's docstring for the order in which columns give way). Numbers are never shortened;
    names fold down to `MIN_NAME`, prose wraps down to `MIN_WRAP`, other text is cut down to
    `MIN_TEXT`."""
    n = len(headers)
    natural = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    prose = [h in WRAP_COLUMNS for h in headers]
    name = [h in NAME_COLUMNS and not numeric[i] for i, h in enumerate(headers)]
    key = next((i for i in range(n) if name[i] and headers[i] not in DROP_FIRST), 0)
    keep_always = {key} | {i for i, h in enumerate(headers) if h in protect}

    def least(i: int) -> int:
        if numeric[i]:
            return natural[i]
        return min(natural[i], MIN_NAME if name[i] else MIN_WRAP if prose[i] else MIN_TEXT)

    def comfortable(i: int) -> int:
        if numeric[i]:
            return natural[i]
        return min(natural[i], COMFORTABLE_NAME if name[i] else COMFORTABLE + (8 if prose[i] else 0))

    def total(idx: list[int], w) -> int:
        return sum(w(i) for i in idx) + GUTTER * max(len(idx) - 1, 0)

    keep = list(range(n))
    hidden: list[str] = []
    constant: dict[str, str] = {}

    def give_way(order: list[int], w) -> None:
        for i in order:
            if total(keep, w) <= width or len(keep) <= 1:
                return
            if i in keep and i not in keep_always:
                keep.remove(i)
                hidden.append(headers[i])

    one_value = [i for i in range(n) if len(cells) > 1 and len({r[i] for r in cells}) == 1]
    give_way([headers.index(c) for c in DROP_FIRST if c in headers], comfortable)
    before = set(hidden)
    give_way(one_value, comfortable)
    constant = {headers[i]: cells[0][i] for i in one_value if headers[i] in set(hidden) - before}
    # Right of the key, before the names fold narrow: text that is not a name (flags, shapes).
    give_way([i for i in reversed(range(key + 1, n)) if not numeric[i] and not name[i] and not prose[i]], comfortable)
    right = list(reversed(range(1, n)))
    give_way([i for i in right if not name[i] and not numeric[i]], least)
    give_way([i for i in right if numeric[i]], least)
    give_way([i for i in right if name[i]], least)
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
    return Fit(keep, [widths[i] for i in keep], hidden, [prose[i] or name[i] for i in keep], constant)
