"""Shared fixtures: where the real traces are (outside the repository, never copied in)."""

from __future__ import annotations

from pathlib import Path

import pytest

# ../shared/traces seen from the repository root.
SHARED_TRACES_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture(scope="session")
def SHARED_TRACES() -> Path:
    """The folder of real Kineto traces; tests that need it are skipped where it is absent."""
    if not SHARED_TRACES_DIR.is_dir():
        pytest.skip(f"real traces not available at {SHARED_TRACES_DIR}")
    return SHARED_TRACES_DIR
