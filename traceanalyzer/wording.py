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


def span(us: float) -> str:
    """A length of time in the unit that keeps its digits: `49 µs`, `9.3 ms`, `12.4 s` (a 49 µs
    window is not "0.0 ms")."""
    if us < 1000:
        return f"{us:,.0f} µs"
    if us < 1_000_000:
        return f"{us / 1000:,.1f} ms"
    return f"{us / 1e6:,.1f} s"
