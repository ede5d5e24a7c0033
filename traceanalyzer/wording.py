"""Small pieces of English every floor writes the same way."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """`1 step`, `2 steps`, `1,024 kernels`: the one plural of the package."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
