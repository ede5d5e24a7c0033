"""The command, and only the command, tunes polars' allocator: `_RJEM_MALLOC_CONF=narenas:1,
muzzy_decay_ms:0` is set by the console entry point before polars is imported (jemalloc reads it once, when polars
loads), a value the user set is kept, and the library leaves a notebook's environment alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from traceanalyzer.cli.main import ALLOCATOR_CONF, ALLOCATOR_ENV

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"

# Runs the console entry point on `--version`, then reports whether polars had been imported when
# `run` began and what the variable is once the command has run: from an atexit handler, since `run`
# ends the process (`cli.main.end`: the handlers run, the teardown does not).
ENTRY = """
import atexit, os, sys
import importlib
m = importlib.import_module("traceanalyzer.cli.main")
before = "polars" in sys.modules

@atexit.register
def report():
    print(before, os.environ.get("{env}", "<unset>"))
    import polars  # polars puts its own decay settings first and appends ours, which jemalloc reads last
    print(os.environ["{env}"].split(",")[-1])

sys.argv = ["traceanalyzer", "--version"]
m.run()
"""


def _python(code: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k != ALLOCATOR_ENV} | env
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, check=True)
    return out.stdout.strip().splitlines()[-2:]


def test_the_command_sets_one_arena_before_polars_loads():
    assert ALLOCATOR_CONF == "narenas:1,muzzy_decay_ms:0"
    # jemalloc reads the last value of each setting: ours, after polars' own muzzy_decay_ms:1000
    assert _python(ENTRY.format(env=ALLOCATOR_ENV)) == [f"False {ALLOCATOR_CONF}", "muzzy_decay_ms:0"]


def test_a_value_the_user_set_wins():
    assert _python(ENTRY.format(env=ALLOCATOR_ENV), **{ALLOCATOR_ENV: "narenas:4"}) == ["False narenas:4", "narenas:4"]


def test_the_library_leaves_the_environment_alone():
    trace = next(SAMPLE.glob("*.json*"))
    code = (
        "import os, traceanalyzer as ta\n"
        f"ses = ta.Session.open({str(trace)!r}); ses.gaps\n"
        f"print(os.environ.get({ALLOCATOR_ENV!r}, '<unset>'))"
    )
    assert "narenas" not in _python(code)[-1]  # polars' own defaults only
