"""`opt`: a dataclass field of an option group carrying its CLI help, flag, aliases and choices
(the flags and the JSON `thresholds` are generated from these fields)."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    aliases: tuple[str, ...] = (),
    choices: tuple[str, ...] = (),
    cli: bool = True,
) -> Any:
    """A dataclass field carrying its CLI help text, its flag name (derived from the field name
    when not given), shorter aliases a command may also accept when no other option claims them,
    the values it may take, and whether it is a flag at all."""
    meta = {"help": help, "flag": flag, "aliases": aliases, "choices": choices, "cli": cli}
    return field(default=default, metadata=meta)
