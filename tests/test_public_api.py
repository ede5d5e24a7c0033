"""The public API: `__all__` is complete and importable, every registered analysis is exported,
and `import traceanalyzer` stays free of the CLI and plotting libraries."""

from __future__ import annotations

import subprocess
import sys

import traceanalyzer as ta
from traceanalyzer.registry import ANALYSES


def test_all_names_exist():
    missing = [n for n in ta.__all__ if not hasattr(ta, n)]
    assert missing == []


def test_every_registered_analysis_is_exported():
    exported = {getattr(ta, n) for n in ta.__all__ if n.startswith("analyse_")}
    assert set(ANALYSES.values()) <= exported


def test_load_is_the_function():
    assert callable(ta.load) and ta.load.__module__ == "traceanalyzer.load.loader"


def test_import_does_not_pull_click_or_matplotlib():
    code = "import sys, traceanalyzer; print(sorted(m for m in ('click', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
