"""Start-up stays lazy: `traceanalyzer --help` lists every command from the summaries in
`cli.commands.COMMANDS` without importing a command module, an analysis or polars, and each summary
is what the command's own help says first (so the listing reads as if click built it)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

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


def test_help_imports_no_command_analysis_or_polars():
    code = (
        "import sys; from traceanalyzer.cli.main import main; main(['--help']); "
        "print(sorted(m for m in sys.modules if m.startswith(('polars', 'numpy', 'traceanalyzer.cli.commands.', "
        "'traceanalyzer.analyses', 'traceanalyzer.session', 'rich', 'markdown_it', 'matplotlib'))), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in out.stdout and out.stderr.strip() == "[]"


def test_a_command_loads_only_its_own_module():
    code = (
        "import sys; from traceanalyzer.cli.main import main; main(['gaps', '--help']); "
        "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('traceanalyzer.cli.commands.')), "
        "file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("Usage: traceanalyzer gaps")
    assert out.stderr.strip() == "['gaps']"


def test_gaps_help_imports_no_polars_analysis_or_rule():
    """`gaps --help` reads the options and renderers' registries only (`--fail-on RULE`: the rule
    ids are read when one is given); what builds the report loads when the command runs."""
    code = (
        "import sys; from traceanalyzer.cli.main import main; main(['gaps', '--help']); "
        "print(sorted(m for m in sys.modules if m.startswith(('polars', 'numpy', 'rich', 'msgspec', "
        "'traceanalyzer.analyses', 'traceanalyzer.session', 'traceanalyzer.findings', 'traceanalyzer.render.'))), "
        "file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--fail-on RULE" in out.stdout and ".json (JSON, every field)" in out.stdout
    assert out.stderr.strip() == "[]"
    bad = CliRunner().invoke(cli, ["gaps", "t.json", "--fail-on", "nosuch"])
    assert bad.exit_code == 2 and "'sync_stalls'" in bad.output  # the ids, from the registry


def test_gaps_on_a_gpu_trace_does_not_import_numpy(tmp_path):
    """numpy costs ~0.1 CPU-s of start-up, a fifth of `gaps` on a 10 MB trace: the gaps path (the
    loader, the analyses, µs for display, JSON) runs on polars alone."""
    trace = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "a100_simple_add_syncs.json.gz"
    out = tmp_path / "gaps.json"
    code = (
        "import sys; from traceanalyzer.cli.main import main\n"
        "try:\n    main(['gaps', sys.argv[1], '--no-cache', '--format', 'json', '-o', sys.argv[2]])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'multiprocessing')), file=sys.stderr)"
    )
    run = subprocess.run([sys.executable, "-c", code, str(trace), str(out)], capture_output=True, text=True, check=True)
    assert json.loads(out.read_text())["summary"]["gap_count"] > 0
    assert run.stderr.strip().splitlines()[-1] == "[]"
