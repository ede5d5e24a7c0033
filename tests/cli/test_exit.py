"""The console entry point ends the process without the interpreter's teardown (`cli.main.end`), and
loses nothing by it: the output is flushed, the exit status kept, the atexit handlers run, and a
thread still working (not a daemon) is waited for as by a normal exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from traceanalyzer.cli.main import FULL_EXIT_ENV

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces"

# A fresh interpreter: prints a buffered line, registers an atexit handler, then ends through `end`;
# an object whose `__del__` writes only runs in the teardown, so it tells which exit was taken.
CODE = """
import atexit, os, sys, threading, time
from traceanalyzer.cli.main import end

class Teardown:
    def __del__(self):
        os.write(2, b"teardown ran\\n")

keep = Teardown()
print("buffered output")
atexit.register(lambda: print("atexit ran"))
if sys.argv[1] == "thread":
    def work():
        time.sleep(0.2)
        print("thread finished", flush=True)
    threading.Thread(target=work).start()
end(int(sys.argv[2]))
"""


def _run(mode: str, status: int, **env: str) -> subprocess.CompletedProcess:
    import os

    environment = {k: v for k, v in os.environ.items() if k != FULL_EXIT_ENV} | env
    return subprocess.run(
        [sys.executable, "-c", CODE, mode, str(status)], capture_output=True, text=True, env=environment
    )


def test_the_fast_exit_keeps_output_status_and_atexit_handlers():
    out = _run("plain", 3)
    assert out.returncode == 3
    assert out.stdout.splitlines() == ["buffered output", "atexit ran"]
    assert "teardown ran" not in out.stderr  # the teardown was skipped


def test_a_working_thread_is_waited_for_by_a_normal_exit():
    out = _run("thread", 0)
    assert out.returncode == 0
    assert out.stdout.splitlines() == ["buffered output", "thread finished", "atexit ran"]
    assert "teardown ran" in out.stderr


def test_the_full_exit_on_request():
    out = _run("plain", 1, **{FULL_EXIT_ENV: "1"})
    assert out.returncode == 1
    assert out.stdout.splitlines() == ["buffered output", "atexit ran"]
    assert "teardown ran" in out.stderr


def test_a_reader_that_went_away_is_no_error():
    """`traceanalyzer ... | head -c 1`: the last flush of buffered output meets a closed pipe; exit 0
    and no message (a normal exit says `Exception ignored ... BrokenPipeError` and exits 120), also
    when a thread makes it the normal exit."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", FULL_EXIT_ENV)}
    for thread in ("", "threading.Thread(target=time.sleep, args=(0.1,)).start()\n"):
        code = (
            "import sys, threading, time\nfrom traceanalyzer.cli.main import end\n"
            f"{thread}time.sleep(0.3)\nsys.stdout.write('x' * 10)\nend(0)\n"  # buffered: written by the flush
        )
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before the process writes
        err = proc.stderr.read()
        assert (proc.wait(), err) == (0, b"")


def test_the_collector_is_paused_for_the_imports_only(tmp_path):
    """`cli.startup`: the entry point runs the imports without the cyclic collector, and collects
    again (what the imports made frozen) once the command's modules are in; a process that does
    not go through the entry point keeps its collector untouched."""
    trace = next((SAMPLE).glob("*.json.gz"))
    code = (
        "import atexit, gc, sys\nimport importlib\nmain = importlib.import_module('traceanalyzer.cli.main')\n"
        "atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count() > 0))\n"
        "sys.argv = ['traceanalyzer', *sys.argv[1:]]\nmain.run()\n"
    )
    for argv, seen in (
        (["gaps", str(trace), "--no-cache", "-o", str(tmp_path / "g.json")], "True True"),
        (["--version"], "False False"),  # nothing imported: the process ends before any collection matters
    ):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
        assert out.stdout.splitlines()[-1] == seen, argv
    lib = subprocess.run(
        [
            sys.executable,
            "-c",
            "import gc; import traceanalyzer.cli.commands.common; print(gc.isenabled(), gc.get_freeze_count())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert lib.stdout.split() == ["True", "0"]
