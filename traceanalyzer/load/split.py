"""What cutting the events array learns besides the events (`Split`: the document's other keys,
where the events stopped early, what was repaired or skipped), and the reading of the JSON
objects around the array: the header before `traceEvents` and the keys after it, repaired
where they can be (`repair.repair_exact`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from traceanalyzer.load.repair import fix_utf8, repair_exact


@dataclass
class Split:
    """What the splitter learned besides the events themselves."""

    metadata: dict[str, Any] = field(default_factory=dict)
    truncated: str | None = None  # where and why the events stopped early
    truncated_at: int | None = None  # byte offset (decompressed) of the first unread byte
    skipped_bytes: int = 0  # bytes after the last complete event that could not be read
    repairs: Counter = field(default_factory=Counter)  # fix -> count (see repair.py)
    damaged: list[tuple[int, int]] = field(default_factory=list)  # (offset, length) skipped mid-file


def loads_object(text: bytes) -> dict[str, Any] | None:
    """The JSON object `text`, repaired if need be; None when it is not one."""
    for attempt in (text, None):
        if attempt is None:
            attempt = repair_exact(fix_utf8(text), Counter())
        try:
            value = msgspec.json.decode(attempt)
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        return value if isinstance(value, dict) else None
    return None


def tail_ok(rest: bytes) -> bool:
    """`rest` (what follows the events array) closes the document, with or without more keys."""
    rest = rest.strip()
    return rest == b"}" or (rest.startswith(b",") and loads_object(b"{" + rest[1:]) is not None)


def tail_keys(rest: bytes) -> dict[str, Any] | None:
    """The top-level keys after the events array (traceName, baseTimeNanoseconds, ...), if any."""
    rest = rest.strip()
    return loads_object(b"{" + rest[1:]) if rest.startswith(b",") else None
