"""Shared fixtures: where the real traces are (outside the repository, never copied in)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The single-file cache (traceanalyzer.jobs.cache) is off in tests, and points away from the real
# home cache should a test turn it on: CI runs as root in a fresh clone, and a test must compute
# what it checks. tests/jobs/test_cache.py turns it on in a temporary folder.
os.environ["TRACEANALYZER_NO_CACHE"] = "1"
os.environ["XDG_CACHE_HOME"] = _CACHE_HOME = tempfile.mkdtemp(prefix="traceanalyzer-test-cache-")
atexit.register(shutil.rmtree, _CACHE_HOME, True)

# ../shared/traces seen from the repository root.
SHARED_TRACES_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture(scope="session")
def SHARED_TRACES() -> Path:
    """The folder of real Kineto traces; tests that need it are skipped where it is absent."""
    if not SHARED_TRACES_DIR.is_dir():
        pytest.skip(f"real traces not available at {SHARED_TRACES_DIR}")
    return SHARED_TRACES_DIR
