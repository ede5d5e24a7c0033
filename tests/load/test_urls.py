"""fsspec URLs (issue #24): `file://` and `memory://` for one file and for a directory of rank
files, read with fsspec's own objects; a missing filesystem package is one line, exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.synthetic import TraceBuilder
from traceanalyzer.cli import cli
from traceanalyzer.cli.main import main
from traceanalyzer.jobs.rank_io import list_dir
from traceanalyzer.load import load

fsspec = pytest.importorskip("fsspec")


def _trace(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 10000)
    b.kernel("a", 100, 1900, launch_ts=50)
    b.kernel("b", 6000, 3000, launch_ts=5890)
    return b.write(tmp_path)


def _gaps(path: str) -> dict:
    r = CliRunner().invoke(cli, ["gaps", path, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_file_url_of_one_trace(tmp_path):
    src = _trace(tmp_path)
    # file:///abs/path: the leading "/" of the path is the URL's third slash.
    url = f"file://{src}"
    assert url.startswith("file:///")
    a, b = _gaps(str(src)), _gaps(url)
    # kernel a ends at 2,000 µs and b starts at 6,000 µs: a 4,000 µs gap, read through either path.
    assert a["gaps"] == b["gaps"] and 4000.0 in [g["duration_us"] for g in b["gaps"]]


def test_memory_url_of_one_trace(tmp_path):
    src = _trace(tmp_path)
    fs = fsspec.filesystem("memory")
    fs.pipe("/one/t.json.gz", src.read_bytes())
    trace = load("memory://one/t.json.gz")
    assert trace.gpu.height == 2
    assert _gaps("memory://one/t.json.gz")["gaps"] == _gaps(str(src))["gaps"]


def test_directory_urls_keep_their_leading_slash(tmp_path):
    (tmp_path / "d").mkdir()
    for k in range(2):
        _trace(tmp_path / "d").rename(tmp_path / "d" / f"rank{k}.json")
    files = list_dir(f"file://{tmp_path / 'd'}")
    assert sorted(files) == [f"file://{tmp_path / 'd' / f'rank{k}.json'}" for k in range(2)]
    fs = fsspec.filesystem("memory")
    fs.pipe("/job/rank0.json", b"{}")
    assert list_dir("memory://job") == ["memory:///job/rank0.json"]  # fsspec's own unstrip_protocol


def test_missing_filesystem_package_is_one_line(capsys):
    from fsspec.registry import known_implementations

    try:
        import s3fs  # noqa: F401

        pytest.skip("s3fs is installed")
    except ImportError:
        pass
    assert known_implementations["s3"]["class"].startswith("s3fs.")
    assert main(["gaps", "s3://bucket/t.json.gz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["traceanalyzer: error: s3://bucket/t.json.gz: s3:// URLs need the s3fs package: pip install s3fs"]


def test_missing_file_url(tmp_path):
    assert main(["gaps", f"file://{tmp_path}/nope.json.gz"]) == 2
