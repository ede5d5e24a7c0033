"""The scenario traces the project captured itself are named as the manifest says: the
expected top idle cause and the expected findings (scripts/accuracy.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _accuracy():
    spec = importlib.util.spec_from_file_location("accuracy", ROOT / "scripts" / "accuracy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_scenario_is_named_as_its_manifest_says(capsys):
    manifest = json.loads((ROOT / "sample_traces" / "manifest.json").read_text())
    assert manifest, "sample_traces/manifest.json lists no scenario"
    assert _accuracy().main(["--markdown"]) == 0, capsys.readouterr().out
