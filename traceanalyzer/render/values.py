"""Cell formatting shared by the text and Markdown renderers."""

from __future__ import annotations

from typing import Any

# A kernel's grid and block read as CUDA writes them: 128x1x1.
LAUNCH_SHAPES = {"grid", "block"}
IDENTIFIERS = {"tid", "pid", "step", "device", "stream", "rank", "launch_tid", "next_stream", "correlation"}


def cell(value: Any, column: str = "") -> str:
    """A value as table text: thousands separators, shares in percent, identifiers bare."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if column.endswith("share") or column.endswith("fraction") or column.startswith("share"):
            return f"{value * 100:.1f}%"
        if abs(value) >= 100 or value == int(value):
            return f"{value:,.0f}"
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        # Identifiers read better without thousands separators.
        if column in IDENTIFIERS or column.endswith("_id"):
            return str(value)
        return f"{value:,}"
    if isinstance(value, dict):
        return "; ".join(f"{k}={cell(v, k)}" for k, v in value.items() if v is not None) or "-"
    if isinstance(value, (list, tuple)):
        if column in LAUNCH_SHAPES:
            return "x".join(str(v) for v in value)
        return ", ".join(cell(v) for v in value)
    return str(value)


def header(column: str) -> str:
    """A column's header text."""
    return column


def saving_text(f: Any, per: str = "step") -> str:
    """The estimate in words: "saves ~58.8 ms per step (33.2 %), high confidence (without data_loading)"."""
    if f.saving_us is None:
        return f"saving not estimated: {f.saving_note}"
    amount = f"{f.saving_us / 1000:,.1f} ms" if abs(f.saving_us) >= 1000 else f"{f.saving_us:,.0f} µs"
    share = f" ({f.saving_share:.1%})" if f.saving_share is not None else ""
    return f"saves ~{amount} per {per}{share}, {f.saving_confidence} confidence ({f.saving_note})"
