"""Atomic output: the whole file or nothing, with ordinary permissions."""

from __future__ import annotations

import os
import stat

import pytest

from traceanalyzer.render.output import write_atomic


def test_written_file_has_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "r.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.md").stat().st_mode) == 0o644


def test_failed_write_leaves_no_file(tmp_path):
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "r.md", 123)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_replaces_existing_file_whole(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old contents that are longer")
    write_atomic(target, "new")
    assert target.read_text() == "new"
