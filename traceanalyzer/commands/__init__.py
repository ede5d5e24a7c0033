"""One module per subcommand: parse options, call the library, hand a Report to a renderer.
Each module exposes a click command named `command`; cli.py registers them."""

COMMAND_MODULES = [
    "gaps",
    "memory",
    "diff",
    "copies",
    "syncs",
    "timeline",
    "report",
    "annotate",
    "stages",
    "ops",
    "kernels",
    "rules",
    "summary",
]
