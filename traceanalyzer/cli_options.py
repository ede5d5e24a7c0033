"""Click flags generated from the option dataclasses, and the output options every command
shares (`--format`, `--top`, `-o`)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import click

FORMATS = ("table", "json", "csv", "markdown")


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_us", "").replace("_", "-")


def dataclass_options(cls: type) -> Callable[[Callable], Callable]:
    """Decorate a click command with one flag per field of `cls`; the values arrive as keyword
    arguments named after the fields. Use `build(cls, kwargs)` to get the dataclass back."""

    def decorate(fn: Callable) -> Callable:
        for f in reversed(dataclasses.fields(cls)):
            default = f.default
            help_text = f.metadata.get("help", "")
            unit = " µs" if f.name.endswith("_us") and "µs" not in help_text else ""
            fn = click.option(
                _flag(f),
                f.name,
                type=type(default) if default is not None else str,
                default=default,
                show_default=True,
                help=f"{help_text}{' (' + unit.strip() + ')' if unit else ''}",
            )(fn)
        return fn

    return decorate


def build(cls: type, kwargs: dict[str, Any]) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in names})


def output_options(fn: Callable) -> Callable:
    fn = click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False),
        default=None,
        help="write to this file (atomically) instead of stdout",
    )(fn)
    fn = click.option(
        "--top", type=click.IntRange(min=0), default=20, show_default=True, help="rows per table (0: all)"
    )(fn)
    fn = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        help="output format [default: table on a terminal, else table unless -o names .json/.csv/.md]",
    )(fn)
    return fn


def resolve_format(fmt: str | None, output: str | None) -> str:
    if fmt:
        return fmt
    if output:
        for ext, name in ((".json", "json"), (".csv", "csv"), (".md", "markdown")):
            if output.endswith(ext):
                return name
    return "table"


def progress_printer() -> Callable[[int, int], None] | None:
    """A bytes-read progress line on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None
    last = [-1]

    def show(done: int, total: int) -> None:
        if total <= 0:
            return
        pct = int(done * 100 / total)
        if pct != last[0]:
            last[0] = pct
            bar = "#" * (pct // 4)
            sys.stderr.write(f"\rloading [{bar:<25}] {pct:3d}% {done / 1e6:,.0f}/{total / 1e6:,.0f} MB")
            if done >= total:
                sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()

    return show
