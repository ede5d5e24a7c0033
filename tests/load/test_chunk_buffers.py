"""The splitter hands chunks out as views of one reused buffer: a decoded value kept alive
past its chunk (msgspec's Raw keeps its input exported) must neither break reading nor see
its bytes change."""

from __future__ import annotations

import json

import msgspec

from traceanalyzer.load.chunks import EventSplitter
from traceanalyzer.load.source import ByteSource


def test_chunks_survive_values_kept_alive(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(3000)
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}, indent=1))
    kept: list = []  # every event as msgspec.Raw: views into the splitter's buffer

    def try_decode(chunk) -> bool:
        kept.extend(msgspec.json.decode(chunk, type=list[msgspec.Raw]))
        return True

    with ByteSource(path) as src:
        n = sum(1 for _ in EventSplitter(src, chunk_bytes=4096).chunks(try_decode))
    assert n > 20  # many chunks, so the buffer was refilled while views were alive
    assert [json.loads(bytes(r)) for r in kept] == events


def test_source_name_is_the_path_as_given(tmp_path):
    path = tmp_path / "sub" / "t.json"
    path.parent.mkdir()
    path.write_text('{"traceEvents": []}')
    with ByteSource(path) as src:  # a Path: its full path, not its basename
        assert src.name == str(path)
    with ByteSource(str(path)) as src:
        assert src.name == str(path)
