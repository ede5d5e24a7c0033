"""Click flags generated from the option groups of `options.Options`, and the output options
every command shares (`--format`, `--top`, `-o`)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import click

from traceanalyzer.errors import UsageError
from traceanalyzer.options import GROUPS, Options
from traceanalyzer.render import EXTENSIONS, RENDERERS

# Every choice, extension and help text below comes from the renderers' registry.
FORMATS = tuple(RENDERERS)


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.removesuffix("_us").replace("_", "-")


def _cli_fields(groups: Iterable[str]) -> list[dataclasses.Field]:
    return [f for g in groups for f in dataclasses.fields(GROUPS[g]) if f.metadata.get("cli", True)]


def option_flags(*groups: str) -> Callable[[Callable], Callable]:
    """Decorate a click command with one flag per field of the named option groups (see
    `options.GROUPS`); the values arrive as keyword arguments named after the fields. A field's
    aliases (`--min-finding`) are added when no other flag of the command claims them. With the
    `stages` group comes `--stages FILE`, the stage mapping. `build_options` gives the bundle
    back."""
    fields = _cli_fields(groups)
    primary = {_flag(f) for f in fields}
    alias_count = Counter(a for f in fields for a in f.metadata.get("aliases", ()))

    def decorate(fn: Callable) -> Callable:
        if "stages" in groups:
            fn = click.option(
                "--stages",
                "stages_file",
                type=click.Path(dir_okay=False),
                default=None,
                help="TOML file: [stages] table of stage = regular expression (on the op chain), in priority order",
            )(fn)
        for f in reversed(fields):
            default = f.default
            help_text = f.metadata.get("help", "")
            unit = " (µs)" if f.name.endswith("_us") and "µs" not in help_text else ""
            aliases = [a for a in f.metadata.get("aliases", ()) if a not in primary and alias_count[a] == 1]
            fn = click.option(
                _flag(f),
                *aliases,
                f.name,
                type=click.Choice(f.metadata["choices"]) if f.metadata.get("choices") else type(default),
                default=default,
                show_default=True,
                help=f"{help_text}{unit}",
            )(fn)
        return fn

    return decorate


def build_options(kwargs: dict[str, Any], *groups: str) -> Options:
    """The Options bundle from a command's keyword arguments (popping the option fields and
    `stages_file` out of `kwargs`); fields of groups the command has not keep their defaults."""
    names = {f.name for f in _cli_fields(groups)}
    values = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    stages_file = kwargs.pop("stages_file", None)
    if stages_file:
        from traceanalyzer.analyses.stages import read_mapping

        if values.get("stage_view", "pipeline") == "tensorboard":
            raise UsageError(None, "--stages cannot be combined with --view tensorboard")
        values["stage_mapping"] = tuple(read_mapping(stages_file))
    return Options().with_values(values)


PICTURE_EXTENSIONS = (".png", ".svg", ".pdf")
TABLE_EXTENSIONS = dict(EXTENSIONS)


def _formats_help() -> str:
    """`.txt (text tables ...), .json (...)`: the -o help, from the registry."""
    return ", ".join(f"{r.extension} ({r.help})" for r in RENDERERS.values())


class RuleChoice(click.Choice):
    """`click.Choice` over the rule ids, read from the rule registry only when a `--fail-on` is
    given (an unknown id is refused with the list): parsing a command line or showing its help
    imports no rule (the rules import the analyses and polars)."""

    def __init__(self) -> None:
        super().__init__(())

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        """`RULE` in the help, not the 21 ids (`traceanalyzer rules` lists them)."""
        return "RULE"

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        """Every rule id (`findings.RULE_IDS`)."""
        from traceanalyzer.findings import RULE_IDS

        return RULE_IDS

    @choices.setter
    def choices(self, value: Any) -> None:
        """Ignored: the registry decides (click's __init__ assigns them)."""


def fail_on_option(when: str = "") -> Callable[[Callable], Callable]:
    """`--fail-on RULE` (repeatable): exit with status 1 when that finding fires; `when` says
    at what point (after writing a report)."""
    return click.option(
        "--fail-on",
        "fail_on",
        multiple=True,
        type=RuleChoice(),
        help=f"exit with status 1 when this finding fires{when} (repeatable; `traceanalyzer rules` lists them)",
    )


def _remember(name: str) -> Callable:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta[f"traceanalyzer.{name}"] = value
        return value

    return callback


def _table_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a picture extension for a table at once, before the trace is read."""
    if value and extension(value) in PICTURE_EXTENSIONS:
        resolve_format(None, value)  # raises the one-line usage error
    return value


def cache_option(fn: Callable) -> Callable:
    """`--no-cache` on a command (as the group's `traceanalyzer --no-cache`), read through the
    click context by `cli.opening`."""
    return click.option(
        "--no-cache",
        is_flag=True,
        default=False,
        expose_value=False,
        callback=_remember("no_cache"),
        help="neither read nor write the single-file cache of decoded tables and results",
    )(fn)


def output_options(fn: Callable) -> Callable:
    """`--format`, `--top`, `-o/--output` and `--wide`, shared by every table command. `--top`
    limits the rows of the text tables (20 when not given); given explicitly, it limits the
    JSON and CSV too, which are otherwise complete. `--wide` reaches `emit` through the click
    context."""
    fn = cache_option(fn)
    fn = click.option(
        "--wide",
        is_flag=True,
        default=False,
        expose_value=False,
        callback=_remember("wide"),
        help="tables at full width: no column hidden, no cell shortened",
    )(fn)
    fn = click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False),
        default=None,
        callback=_table_path,
        help="write to this file (atomically) instead of stdout: " + _formats_help(),
    )(fn)
    fn = click.option(
        "--top",
        type=click.IntRange(min=0),
        default=None,
        callback=_remember("top"),
        help="rows per table (0: all) [default: 20 in tables; JSON and CSV complete]",
    )(fn)
    fn = click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        help="output format: "
        + ", ".join(f"{r.name} ({r.help})" for r in RENDERERS.values())
        + " [default: from the -o extension, else table]",
    )(fn)
    return fn


def record_option(noun: str, listing: str) -> Callable[[Callable], Callable]:
    """`--NOUN N`: show the N-th row of the command's list (1 = the first, `listing` says the
    order) vertically, one line per field, every field."""
    return click.option(
        f"--{noun}",
        "record",
        type=click.IntRange(min=1),
        default=None,
        help=f"show {noun} N of the list ({listing}) vertically, with every field",
    )


def extension(path: str) -> str:
    """The lower-case extension of `path` (`.png`), or ''."""
    name = path.rsplit("/", 1)[-1].lower()
    return "." + name.rsplit(".", 1)[-1] if "." in name.lstrip(".") else ""


def _extensions() -> str:
    exts = list(TABLE_EXTENSIONS)
    return ", ".join(exts[:-1]) + " or " + exts[-1]


def resolve_format(fmt: str | None, output: str | None) -> str:
    """The renderer to use: `--format`, else the extension of `-o`, else table. A picture
    extension for a table, or a table extension that contradicts `--format`, is a usage error."""
    ext = extension(output) if output else ""
    if ext in PICTURE_EXTENSIONS:
        raise UsageError(output, f"{ext} is a picture; this command writes tables: use {_extensions()}")
    if fmt:
        if ext in TABLE_EXTENSIONS and TABLE_EXTENSIONS[ext] != fmt:
            raise UsageError(output, f"--format {fmt} does not match the extension {ext}")
        return fmt
    return TABLE_EXTENSIONS.get(ext, "table")


def picture_format(output: str) -> str:
    """png, svg or pdf from the extension of a picture's path; anything else is a usage error."""
    ext = extension(output)
    if ext not in PICTURE_EXTENSIONS:
        raise UsageError(output, f"a picture is written as .png, .svg or .pdf, not {ext or 'a file without extension'}")
    return ext[1:]
