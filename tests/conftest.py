"""Shared fixtures: where the real traces are (outside the repository, never copied in).

`TRACEANALYZER_SHARED_TRACES` names the folder; by default `../shared/traces` beside the
checkout. Where it is absent, the tests that need it are skipped, and the run ends with one
line saying how many were skipped for that and where the traces were looked for."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The single-file cache (traceanalyzer.jobs.cache) is off in tests, and points away from the real
# home cache should a test turn it on: CI runs as root in a fresh clone, and a test must compute
# what it checks. The `cached` fixture below turns it on in a temporary folder.
os.environ["TRACEANALYZER_NO_CACHE"] = "1"
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME = tempfile.mkdtemp(prefix="traceanalyzer-test-cache-")
atexit.register(shutil.rmtree, _CACHE_HOME, True)
# Tables are laid out at the fixed width (`render.fit.terminal_width`) unless a test sets COLUMNS:
# the shell or the test runner's (pytest-xdist's workers get 80) must not change what is printed.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

ENV = "TRACEANALYZER_SHARED_TRACES"
SHARED_TRACES_DIR = Path(
    os.environ.get(ENV) or Path(__file__).resolve().parents[1].parent / "shared" / "traces"
).resolve()
NO_TRACES = f"real traces not available at {SHARED_TRACES_DIR} (set {ENV} to their folder)"


@pytest.fixture(scope="session")
def SHARED_TRACES() -> Path:
    """The folder of real Kineto traces; tests that need it are skipped where it is absent."""
    if not SHARED_TRACES_DIR.is_dir():
        pytest.skip(NO_TRACES)
    return SHARED_TRACES_DIR


@pytest.fixture
def cached(monkeypatch, tmp_path) -> Path:
    """The single-file cache on, in a temporary XDG_CACHE_HOME (off for every other test, above):
    its root, `<XDG_CACHE_HOME>/traceanalyzer`."""
    monkeypatch.delenv("TRACEANALYZER_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "traceanalyzer"


@pytest.fixture
def trace(SHARED_TRACES, tmp_path) -> Path:
    """A copy of a100_multistream_syncs of the test's own (the cache keys a file by its path and mtime)."""
    dst = tmp_path / "a100_multistream_syncs.json.gz"
    shutil.copy(SHARED_TRACES / dst.name, dst)
    return dst


@pytest.fixture(scope="module")
def real_report_dir(SHARED_TRACES, tmp_path_factory) -> Path:
    """report.md, report.html and the pictures of v100_resnet50_dataloader_workers0, once."""
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    out = tmp_path_factory.mktemp("report")
    path = SHARED_TRACES / "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
    r = CliRunner().invoke(cli, ["report", str(path), "-o", str(out), "--html"])
    assert r.exit_code == 0, (r.output, r.exception)
    return out


def pytest_terminal_summary(terminalreporter) -> None:
    """One line: how many tests were skipped because the real traces are missing, and why."""
    skipped = terminalreporter.stats.get("skipped", [])
    missing = [r for r in skipped if "real traces not available" in str(getattr(r, "longrepr", ""))]
    parametrised_away = not SHARED_TRACES_DIR.is_dir()
    if missing or parametrised_away:
        terminalreporter.write_line(
            f"traceanalyzer: {len(missing)} test(s) skipped: {NO_TRACES}"
            + ("; tests parametrised over the traces collected none" if parametrised_away else "")
        )
