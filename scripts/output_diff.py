"""What differs between two JSON outputs, by normalised path, and whether a list of intended
changes covers it (used by `scripts/compare_outputs.py`; tested in tests/test_compare_outputs.py).

A difference has a normalised path (keys joined by dots, list indices as `[]`:
`findings[].saving_us`, `thresholds.peak_tflops`, `critical_path`) and a kind:

- `new`: a key, or a list element, only in the new output;
- `gone`: only in the base;
- `order`: the same keys or list elements in another order;
- `digits`: two floats equal to 1e-12 relative (the last digits of a sum now exact);
- `value`: anything else (a changed scalar or type, a list of another length that cannot be aligned).

Lists are compared by position when that is what they are (same length and the same identity
at each index); otherwise their elements are aligned by identity, so that a finding added at the
front does not show as every later finding changed. The identity of a list of objects is the key
(or pair of keys) whose scalar values are unique on both sides and shared by most elements; a
list of unique scalars is its own identity.

The intended changes are Markdown tables in the section whose heading contains "Fields that differ
from" (docs/changes.md; its subsections included), one row per command and field pattern:

    | Command | Field | Change | Why |
    |---|---|---|---|
    | `summary` | `critical_path` | new | the critical path of each step (issue 25, 7b85072) |

Command: backticked names separated by commas, or `*` (every command). Field: backticked patterns
separated by commas; a pattern covers its path and everything below it, `*` stands for one key
(`summary.idle_by_cause.*`), and one ending in `[]` covers whole elements only (`findings[]` new:
a finding only here, not a key new in every finding). Change: kinds separated by commas (`value`
also covers `digits`; `any` is every kind). Why: the reason, with its issue and commit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

KINDS = ("new", "gone", "order", "digits", "value")
HEADING = "Fields that differ from"
_KEY = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Difference:
    """One difference between two outputs: where (normalised path), what kind, an example."""

    path: str
    kind: str
    detail: str = field(default="", compare=False)


@dataclass(frozen=True)
class Listed:
    """One row of the list of intended changes."""

    commands: tuple[str, ...]  # empty: every command
    patterns: tuple[str, ...]
    kinds: frozenset[str]
    reason: str
    line: int = 0

    def covers(self, command: str, d: Difference) -> bool:
        """Whether this row lists difference `d` of `command`'s output."""
        if self.commands and command not in self.commands:
            return False
        if d.kind not in self.kinds and not (d.kind == "digits" and "value" in self.kinds):
            return False
        return any(_pattern_regex(p).match(d.path) for p in self.patterns)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    parts = [re.escape(s) for s in pattern.split("*")]
    # `x[]` is the elements themselves; any other pattern also covers what is below it.
    return re.compile(r"[^.\[\]]*".join(parts) + (r"$" if pattern.endswith("[]") else r"(?:$|[.\[])"))


def _child(path: str, key: str) -> str:
    if not _KEY.fullmatch(key):
        return f"{path}[{json.dumps(key)}]"
    return f"{path}.{key}" if path else key


def _short(v: object) -> str:
    s = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _digits(a: object, b: object) -> bool:
    """Two floats equal to 1e-12 relative (and not equal)."""
    return (
        _is_number(a)
        and _is_number(b)
        and (isinstance(a, float) or isinstance(b, float))
        and a != b
        and abs(a - b) <= 1e-12 * max(abs(a), abs(b))
    )


def differences(a: object, b: object, path: str = "") -> list[Difference]:
    """Every difference between base `a` and new `b`, by normalised path (see the module)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [Difference(_child(path, k), "gone", _short(a[k])) for k in a if k not in b]
        out += [Difference(_child(path, k), "new", _short(b[k])) for k in b if k not in a]
        for k in a:
            if k in b:
                out += differences(a[k], b[k], _child(path, k))
        common_a, common_b = [k for k in a if k in b], [k for k in b if k in a]
        if common_a != common_b:
            out.append(Difference(path or "(root)", "order", "keys"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        return _list_differences(a, b, path)
    if a == b and type(a) is type(b):
        return []
    kind = "digits" if _digits(a, b) else "value"
    return [Difference(path or "(root)", kind, f"{_short(a)} -> {_short(b)}")]


def _list_differences(a: list, b: list, path: str) -> list[Difference]:
    item = f"{path}[]"
    if not a or not b:  # every element is new, or every one gone
        return [Difference(item, "new" if b else "gone", _short(v)) for v in a or b]
    ident = _identity(a, b)
    if len(a) == len(b) and (ident is None or [ident(x) for x in a] == [ident(y) for y in b]):
        return [d for x, y in zip(a, b, strict=True) for d in differences(x, y, item)]
    dicts = all(isinstance(v, dict) for v in a + b)
    if ident is None and not dicts:
        return [Difference(path or "(root)", "value", f"length {len(a)} -> {len(b)}")]
    out, gone, new = [], list(a), list(b)
    if ident is not None:
        ids_a, ids_b = [ident(x) for x in a], [ident(y) for y in b]
        in_a, in_b = set(ids_a), set(ids_b)
        if [i for i in ids_a if i in in_b] != [i for i in ids_b if i in in_a]:
            out.append(Difference(path or "(root)", "order", "elements"))
        by_b = dict(zip(ids_b, b, strict=True))
        for i, x in zip(ids_a, a, strict=True):
            if i in in_b:
                out += differences(x, by_b[i], item)
        gone = [x for i, x in zip(ids_a, a, strict=True) if i not in in_b]
        new = [y for i, y in zip(ids_b, b, strict=True) if i not in in_a]
    # What is left is paired by its first field, in order (a finding of one rule whose message
    # changed is that finding changed, not one finding gone and another new).
    first = next(iter(a[0]), None) if dicts else None
    name = ident or (lambda v: json.dumps(v.get(first)))
    waiting: dict[str, list[int]] = {}  # the new elements by their first field, in order
    for j, y in enumerate(new):
        if first is not None and first in y:
            waiting.setdefault(json.dumps(y[first]), []).append(j)
    paired: set[int] = set()
    for x in gone:
        js = waiting.get(json.dumps(x[first])) if first is not None and first in x else None
        if not js:
            out.append(Difference(item, "gone", _short(name(x))))
            continue
        paired.add(j := js.pop(0))
        out += differences(x, new[j], item)
    out += [Difference(item, "new", _short(name(y))) for j, y in enumerate(new) if j not in paired]
    return out


def _scalar(v: object) -> bool:
    return isinstance(v, str | int | float | bool) or v is None


def _identity(a: list, b: list):
    """A function naming each element of both lists uniquely, or None (see the module)."""
    both = a + b
    if not both:
        return None
    if all(_scalar(v) for v in both):
        if len(set(map(json.dumps, a))) == len(a) and len(set(map(json.dumps, b))) == len(b):
            return json.dumps
        return None
    if not all(isinstance(v, dict) for v in both):
        return None
    keys = [k for k in both[0] if all(k in v and _scalar(v[k]) for v in both)]
    combos = [(k,) for k in keys]
    if len(both) <= 5000:  # pairs of keys too, on lists of a reasonable size
        combos += [(k, m) for i, k in enumerate(keys) for m in keys[i + 1 :]]
    best, best_score = None, 0
    for combo in combos:  # the most elements matched; the first such (a single key before pairs)
        va = [tuple(x[k] for k in combo) for x in a]
        vb = [tuple(y[k] for k in combo) for y in b]
        if len(set(va)) != len(va) or len(set(vb)) != len(vb):
            continue
        score = len(set(va) & set(vb))
        if score > best_score:
            best, best_score = combo, score
    if best is None:
        return None
    combo = best
    return lambda v: json.dumps([v[k] for k in combo]) if len(combo) > 1 else json.dumps(v[combo[0]])


def parse_listed(markdown: str) -> list[Listed]:
    """The rows of the tables in the first section whose heading contains HEADING (see the module);
    a reason cannot hold a `|`."""
    lines = markdown.splitlines()
    start = next((i for i, s in enumerate(lines) if s.startswith("#") and HEADING in s), None)
    if start is None:
        raise ValueError(f"no heading containing {HEADING!r}")
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    rows: list[Listed] = []
    for n, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break  # the next section (its subsections belong to it)
        if not line.startswith("|") or re.fullmatch(r"\|[\s|:-]+\|?", line):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            raise ValueError(f"line {n}: a row has 4 cells (command, field, change, why): {line}")
        command, fields, change, reason = cells
        if command.lower() == "command":
            continue
        commands = () if command.strip("`") == "*" else tuple(_spans(command, n))
        kinds = frozenset(KINDS if change == "any" else (k.strip() for k in change.split(",")))
        if unknown := kinds - set(KINDS):
            raise ValueError(f"line {n}: unknown change {sorted(unknown)} (one of {', '.join(KINDS)}, any)")
        if not reason:
            raise ValueError(f"line {n}: a listed field needs its reason")
        rows.append(Listed(commands, tuple(_spans(fields, n)), kinds, reason, n))
    if not rows:
        raise ValueError(f"no rows in the table under {HEADING!r}")
    return rows


def _spans(cell: str, n: int) -> list[str]:
    found = re.findall(r"`([^`]+)`", cell)
    if not found:
        raise ValueError(f"line {n}: names and fields are in backticks: {cell}")
    return found


def unlisted(command: str, diffs: list[Difference], listed: list[Listed]) -> tuple[list[Difference], set[int]]:
    """The differences no row covers, and the lines of the rows that covered some."""
    left, used = [], set()
    for d in diffs:
        rows = {r.line for r in listed if r.covers(command, d)}
        if not rows:
            left.append(d)
        used |= rows
    return left, used
