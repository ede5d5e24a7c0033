"""Small pieces of English every floor writes the same way."""

from __future__ import annotations


def noun(n: int, word: str) -> str:
    """`word` for one, its plural otherwise: `copy` / `copies`, `step` / `steps`."""
    if n == 1:
        return word
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def plural(n: int, word: str) -> str:
    """`1 step`, `2 steps`, `1,024 kernels`, `3 GPU activities`: the one plural of the package."""
    return f"{n:,} {noun(n, word)}"
