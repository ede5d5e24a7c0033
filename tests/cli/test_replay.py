"""The output cache (`cli.replay`): a command line run again on the same trace prints and writes
byte for byte what the first run did, without decoding, analysing or importing polars; any
other command line, a changed file, a flag that does more than print, or a damaged entry is a
run like any other."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import traceanalyzer.session
from traceanalyzer.cli import cli, replay
from traceanalyzer.jobs import cache

TRACE = "a100_multistream_syncs.json.gz"


@pytest.fixture
def cached(cached, monkeypatch):
    """The cache on (`conftest.cached`), the terminal 100 columns wide."""
    monkeypatch.setenv("COLUMNS", "100")
    return cached


def _run(*args: str) -> tuple[str, str]:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout, r.stderr


def _forbid(monkeypatch) -> None:
    """Decoding or any gap analysis now fails the test."""

    def boom(*a, **k):
        raise AssertionError("computed again")

    monkeypatch.setattr(importlib.import_module("traceanalyzer.load"), "load", boom)
    for name in ("classify_gaps", "analyse_gaps", "analyse_health", "analyse_steps", "step_caveats"):
        monkeypatch.setattr(traceanalyzer.session, name, boom)


def _outputs(root) -> list:
    return sorted(root.glob("*/outputs/*/events.pickle"))


def test_same_command_line_is_replayed_byte_for_byte(cached, trace, tmp_path, monkeypatch):
    out = tmp_path / "out"
    lines = [
        ("gaps", str(trace), "--format", "json"),
        ("gaps", str(trace)),  # the table, fitted to COLUMNS
        ("syncs", str(trace), "--top", "3"),
        ("summary", str(trace), "-o", str(out / "s.json")),
        ("gaps", str(trace), "-o", str(out / "g.csv")),  # several files
    ]
    first = []
    for args in lines:
        printed = _run(*args)
        files = {p.name: p.read_bytes() for p in sorted(out.glob("*"))} if out.exists() else {}
        first.append((printed, files))
    assert len(_outputs(cached)) == len(lines)
    assert len(first[-1][1]) > 2  # g.csv and its other tables beside it
    assert first[-1][0][1].count("wrote ") == len(first[-1][1]) - 1  # s.json was written before
    shutil.rmtree(out)
    _forbid(monkeypatch)
    for args, (printed, files) in zip(lines, first):
        again = _run(*args)
        assert again == printed, args
        assert {p.name: p.read_bytes() for p in sorted(out.glob("*"))} == files, args


def test_other_lines_files_and_display_are_misses(cached, trace, monkeypatch):
    _run("gaps", str(trace), "--format", "json")
    _run("gaps", str(trace), "--format", "json", "--min-gap", "50")  # other options
    assert len(_outputs(cached)) == 2
    monkeypatch.setenv("COLUMNS", "140")  # another width: the table looks otherwise
    _run("gaps", str(trace), "--format", "json")
    assert len(_outputs(cached)) == 3
    os.utime(trace, ns=(os.stat(trace).st_atime_ns, os.stat(trace).st_mtime_ns + 10**9))
    _run("gaps", str(trace), "--format", "json")  # the file changed: a new trace key
    assert len(list(cached.iterdir())) == 2


def test_flags_that_do_more_than_print_are_never_replayed(cached, trace, tmp_path):
    _run("gaps", str(trace), "--plot", str(tmp_path / "p.png"))
    _run("gaps", str(trace), "--fail-on", "data_loading")
    _run("gaps", str(trace), "--no-cache")
    _run("--no-cache", "gaps", str(trace))
    assert _outputs(cached) == []
    assert replay.command_key("gaps", [str(tmp_path)], {}) is None  # a directory of ranks
    assert replay.command_key("gaps", ["-"], {}) is None
    assert not replay.replayable("gaps", [str(trace), "--plot=x.png"], ("--plot",))


def test_no_cache_after_the_trace_hashes_no_file(trace, monkeypatch):
    # `gaps t.json --no-cache` is never replayed: its trace is not fingerprinted first (the
    # first and last MiB hashed) only to be dropped at the next token.
    hashed = []
    monkeypatch.setattr(cache, "fingerprint", lambda p: hashed.append(p) or "x")
    assert replay.command_key("gaps", [str(trace), "--no-cache"], {}) is None
    assert replay.command_key("gaps", [str(trace), "--cache-dir=/tmp/c"], {}) is None
    assert hashed == []
    assert replay.command_key("gaps", [str(trace), "--format", "json"], {})[0] == str(trace)
    assert hashed == [str(trace)]


def test_a_failed_run_is_not_kept(cached, trace):
    r = CliRunner().invoke(cli, ["gaps", str(trace), "--record", "1"])  # no such flag
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["gaps", str(trace), "--gap", "100000"])  # past the end of the list
    assert r.exit_code != 0 and "there are" in str(r.exception)
    assert _outputs(cached) == []


def test_load_warnings_are_replayed(cached, SHARED_TRACES, tmp_path, monkeypatch):
    """A damaged trace's warnings go to stderr on the replay too, as the first run wrote them."""
    raw = gzip.decompress((SHARED_TRACES / TRACE).read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: int(len(raw) * 0.8)])  # truncated: read up to where it breaks
    first = _run("gaps", str(cut), "--format", "json")
    assert "warning" in first[1] and "truncated" in first[1]
    _forbid(monkeypatch)
    assert _run("gaps", str(cut), "--format", "json") == first


def test_a_damaged_output_entry_is_a_miss(cached, trace):
    first = _run("gaps", str(trace), "--format", "json")
    (entry,) = _outputs(cached)
    entry.write_bytes(b"not a pickle")
    assert _run("gaps", str(trace), "--format", "json") == first
    entry.write_bytes(b"\x80\x05N.")  # a pickle, but not a recording
    assert _run("gaps", str(trace), "--format", "json") == first


def test_a_replay_imports_neither_polars_nor_an_analysis(cached, trace):
    """Nor the options' dataclasses (~20 ms of a 0.1 s replay): the cache key is made without them."""
    args = ["gaps", str(trace), "--format", "json"]
    first = _run(*args)[0]
    code = (
        "import sys; from traceanalyzer.cli.main import main; rc = main(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m.startswith(('polars', 'numpy', 'msgspec', 'rich', "
        "'traceanalyzer.analyses', 'traceanalyzer.session', 'traceanalyzer.load', 'traceanalyzer.findings', "
        "'traceanalyzer.options', 'traceanalyzer.cli.opening'))), "
        "rc, file=sys.stderr)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cached.parent)}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    assert out.stdout == first and out.stderr.strip() == "[] 0"
    assert json.loads(out.stdout)["command"] == "gaps"
