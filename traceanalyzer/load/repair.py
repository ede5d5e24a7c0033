"""Make damaged event text decodable where the damage is a known writer bug, counting each fix.

Only text that already failed to decode comes here, so the happy path pays nothing.

- Unescaped control characters inside strings (JSON forbids bytes below 0x20 there) are
  escaped as `\\u00XX`; the string keeps its content.
- Bare `N/A`, `NaN`, `Infinity`, `-Infinity` where a value belongs become `null`: the field is
  then "absent", which the normaliser already handles (an event without `ts` is ignored with a
  count, one without `dur` lasts zero).

`repair_fast` works on a whole chunk with two byte-level regular expressions (no Python call per
string); it cannot see whether a tab, newline or carriage return sits inside a string, because
outside strings those are white space. `repair_exact` tokenises strings and fixes those too;
it is used on single damaged events only.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter

# Control bytes that are never white space: invalid anywhere in JSON, so escaping them is safe
# (inside a string it restores the character; outside one the text was broken anyway).
_HARD_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# A bare token after `:` / `[` / `,` and before `,` / `]` / `}`: a value position.
_BARE = re.compile(rb"([:\[,]\s*)(N/A|NaN|-?Infinity|-?inf|nan|undefined)(?=\s*[,\]}])")
# JSON strings (escapes included), or a bare token outside them.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<![\w./])(?:N/A|NaN|-?Infinity|-?inf|nan|undefined)(?![\w/])', re.S)
_ANY_CONTROL = re.compile(rb"[\x00-\x1f]")

CONTROL = "control characters inside strings"
BARE = "bare N/A, NaN or Infinity values"


def _escape(m: re.Match) -> bytes:
    return b"\\u%04x" % m.group()[0]


def repair_fast(text: bytes, counts: Counter) -> bytes:
    """Escape hard control bytes and null bare tokens in a whole chunk."""
    text, n_ctrl = _HARD_CONTROL.subn(_escape, text)
    text, n_bare = _BARE.subn(rb"\1null", text)
    if n_ctrl:
        counts[CONTROL] += n_ctrl
    if n_bare:
        counts[BARE] += n_bare
    return text


def repair_exact(text: bytes, counts: Counter) -> bytes:
    """Escape every control byte inside strings and null bare tokens outside them."""
    fixed = Counter()

    def fix(m: re.Match) -> bytes:
        tok = m.group()
        if tok[:1] == b'"':
            new, n = _ANY_CONTROL.subn(_escape, tok)
            if n:
                fixed[CONTROL] += n
            return new
        fixed[BARE] += 1
        return b"null"

    out = _TOKEN.sub(fix, text)
    counts.update(fixed)
    return out


def _qmark(err: UnicodeError) -> tuple[str, int]:
    return "?" * (err.end - err.start), err.end  # type: ignore[attr-defined]


codecs.register_error("traceanalyzer_qmark", _qmark)


def fix_utf8(data: bytes) -> bytes:
    """Each byte that is not UTF-8 becomes '?': same length, so byte positions still hold."""
    return data.decode("utf-8", "traceanalyzer_qmark").encode("utf-8")
