"""Cell formatting shared by the text and Markdown renderers."""

from __future__ import annotations

from typing import Any

import polars as pl

# A kernel's grid and block read as CUDA writes them: 128x1x1.
LAUNCH_SHAPES = {"grid", "block"}
# Columns that hold names (ops, kernels, Python frames, APIs, files): shown verbatim, in code
# spans in Markdown and HTML, never cut in the middle on a terminal.
NAME_COLUMNS = {
    "op", "name", "kernel", "python_frame", "frame", "range", "waited_on", "api", "call_api", "sync_api", "apis",
    "inner_op", "launched_by", "module", "chain", "file", "site", "meanwhile", "next_activity", "shown_by",
    "culprit", "top_op", "top_kernel", "stack", "function", "callsite", "pg_name", "kernel_name", "op_name",
    "waited_for", "prev_activity", "op_chain",
}  # fmt: skip
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


def flat(df: pl.DataFrame) -> pl.DataFrame:
    """Only the columns a document table can show: no lists or structs (a grid or block as 128x1x1)."""
    shapes = [c for c in LAUNCH_SHAPES if isinstance(df.schema.get(c), pl.List)]
    df = df.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join("x") for c in shapes)
    keep = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct, pl.Array))]
    return df.select(keep)


# Columns holding kernel names: demangled and shortened by templates for display (render.names).
KERNEL_COLUMNS = {"kernel", "top_kernel", "kernel_name", "waited_for"}


def display_frame(df: pl.DataFrame) -> pl.DataFrame:
    """The frame as a person reads it: kernel names demangled and shortened (JSON and CSV keep
    the full name)."""
    from traceanalyzer.render.names import short_names

    cols = [c for c in df.columns if c in KERNEL_COLUMNS and df.schema[c] == pl.String]
    if not cols:
        return df
    out = []
    for c in cols:
        labels = short_names(df.get_column(c).drop_nulls().unique().to_list())
        out.append(pl.col(c).replace_strict(labels, default=pl.col(c), return_dtype=pl.String))
    return df.with_columns(out)


# Terminal colours of the gap causes (rich style names), close to the pictures' palette.
CAUSE_STYLES = {
    "sync": "red",
    "data_loading": "dark_orange",
    "cpu_bound": "magenta",
    "launch_latency": "bright_magenta",
    "slow_launch": "bright_magenta",
    "gpu_wait": "yellow",
    "runtime_call": "bright_yellow",
    "untraced": "cyan",
    "kernel_spacing": "bright_black",
}


def cause_style(cause: str) -> str:
    """The rich style of a cause's name on a colour terminal ('' for one without)."""
    return CAUSE_STYLES.get(cause, "")
