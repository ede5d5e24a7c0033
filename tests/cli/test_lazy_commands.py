"""Start-up stays lazy: `traceanalyzer --help` lists every command from the summaries in
`cli.commands.COMMANDS` without importing a command module, an analysis or polars, and each summary
is what the command's own help says first (so the listing reads as if click built it)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
from click.testing import CliRunner

from traceanalyzer.cli.commands import COMMANDS
from traceanalyzer.cli.main import cli


def test_every_registered_command_is_its_module_s_command():
    for name in COMMANDS:
        command = importlib.import_module(f"traceanalyzer.cli.commands.{name}").command
        assert isinstance(command, click.Command) and command.name == name


def test_each_summary_is_the_first_paragraph_of_the_command_s_help():
    for name, summary in COMMANDS.items():
        command = importlib.import_module(f"traceanalyzer.cli.commands.{name}").command
        assert command.short_help is None, name  # the listing reads the help, as click does
        assert " ".join(command.help.split("\n\n")[0].split()) == summary, name


def test_help_lists_every_command_as_click_would():
    listed = CliRunner().invoke(cli, ["--help"], terminal_width=100).output
    eager = click.Group(name=cli.name, params=cli.params, help=cli.help, context_settings=cli.context_settings)
    for name in COMMANDS:
        eager.add_command(importlib.import_module(f"traceanalyzer.cli.commands.{name}").command)
    assert listed == CliRunner().invoke(eager, ["--help"], terminal_width=100).output
    assert all(f"  {name} " in listed for name in COMMANDS)


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["gapz"])
    assert result.exit_code == 2 and "No such command 'gapz'" in result.output
    if hasattr(click.exceptions, "NoSuchCommand"):  # click >= 8.4 suggests the close name, loaded or not
        assert "Did you mean 'gaps'?" in result.output


def _modules_after(call: str, which: str, *argv: str) -> subprocess.CompletedProcess:
    """Run `call` (a use of the CLI's `main`, SystemExit caught) in a fresh interpreter, then print
    on stderr the sorted modules `which` (an expression of `m`, a module's name) selects."""
    code = (
        "import sys; from traceanalyzer.cli.main import main\n"
        f"try:\n    {call}\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if {which}), file=sys.stderr)"
    )
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)


def test_help_imports_no_command_analysis_or_polars():
    """Nor the output cache (`cli.replay`, `jobs`: hashing, pickling, temporary files), which only a
    command that may replay or record loads."""
    for argv in ("['--help']", "['--version']"):
        out = _modules_after(
            f"main({argv})",
            "m.startswith(('polars', 'numpy', 'traceanalyzer.cli.commands.', 'traceanalyzer.analyses', "
            "'traceanalyzer.session', 'traceanalyzer.cli.replay', 'traceanalyzer.jobs', 'rich', 'markdown_it', "
            "'matplotlib', 'msgspec', 'pickle', 'tempfile'))",
        )
        assert out.stdout.startswith(("Usage:", "traceanalyzer, version")) and out.stderr.strip() == "[]", argv


def test_a_command_loads_only_its_own_module():
    out = _modules_after("main(['gaps', '--help'])", "m.startswith('traceanalyzer.cli.commands.')")
    assert out.stdout.startswith("Usage: traceanalyzer gaps")
    assert out.stderr.strip() == "['traceanalyzer.cli.commands.gaps']"


def test_gaps_help_imports_no_polars_analysis_or_rule():
    """`gaps --help` reads the options and renderers' registries only (`--fail-on RULE`: the rule
    ids are read when one is given); what builds the report loads when the command runs."""
    out = _modules_after(
        "main(['gaps', '--help'])",
        "m.startswith(('polars', 'numpy', 'rich', 'msgspec', 'traceanalyzer.analyses', 'traceanalyzer.session', "
        "'traceanalyzer.findings', 'traceanalyzer.render.'))",
    )
    assert "--fail-on RULE" in out.stdout and ".json (JSON, every field)" in out.stdout
    assert out.stderr.strip() == "[]"
    bad = CliRunner().invoke(cli, ["gaps", "t.json", "--fail-on", "nosuch"])
    assert bad.exit_code == 2 and "'sync_stalls'" in bad.output  # the ids, from the registry


def test_gaps_on_a_gpu_trace_does_not_import_numpy(SHARED_TRACES, tmp_path):
    """numpy costs ~0.1 CPU-s of start-up, a fifth of `gaps` on a 10 MB trace: the gaps path (the
    loader, the analyses, µs for display, JSON) runs on polars alone."""
    trace = SHARED_TRACES / "a100_simple_add_syncs.json.gz"
    out = tmp_path / "gaps.json"
    run = _modules_after(
        "main(['gaps', sys.argv[1], '--no-cache', '--format', 'json', '-o', sys.argv[2]])",
        "m.split('.')[0] in ('numpy', 'multiprocessing')",
        str(trace),
        str(out),
    )
    assert json.loads(out.read_text())["summary"]["gap_count"] > 0
    assert run.stderr.strip().splitlines()[-1] == "[]"


def test_one_trace_file_loads_no_directory_mode(SHARED_TRACES, tmp_path):
    """`gaps`, `summary` on one file: the directory mode (its command module, the process pools, the
    cross-rank analyses, the per-rank file reader) is imported only for a directory; nor does `gaps`
    load the notebook's HTML display."""
    trace = SHARED_TRACES / "a100_simple_add_syncs.json.gz"
    for command, extra in (("gaps", ", 'html'"), ("summary", "")):
        out = tmp_path / f"{command}.json"
        run = _modules_after(
            f"main([{command!r}, sys.argv[1], '--no-cache', '--format', 'json', '-o', sys.argv[2]])",
            "m.startswith(('traceanalyzer.cli.commands.directory', 'traceanalyzer.jobs.executors', "
            "'traceanalyzer.jobs.multirank', 'traceanalyzer.jobs.rank_io', 'traceanalyzer.jobs.stragglers', "
            f"'multiprocessing', 'concurrent.futures.process'{extra}))",
            str(trace),
            str(out),
        )
        assert json.loads(out.read_text())["command"] == command
        assert run.stderr.strip().splitlines()[-1] == "[]", command
