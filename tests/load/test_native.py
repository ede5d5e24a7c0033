"""The native decoder (traceanalyzer._native) gives the Python decoder's tables exactly, on
every shared trace and on hand-made events whose typed values are worked out here from the
JSON text; what it does not read (damage, odd types) it leaves to the Python decoder."""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SHARED_TRACES_DIR
from traceanalyzer.load import native
from traceanalyzer.load.loader import load
from traceanalyzer.load.source import ByteSource
from traceanalyzer.load.tables import read_serial

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRACE_FILES = sorted(
    [p for p in SHARED_TRACES_DIR.rglob("*") if p.is_file() and ".json" in p.name]
    + [p for p in SAMPLES.iterdir() if ".json" in p.name and p.name != "manifest.json"]
)


def test_native_module_is_built():
    # `pip install -e .` builds it (maturin); a silent fallback would hide a broken build.
    assert native.available()
    assert native.enabled() or native.os.environ.get(native.ENV) == "0"


def _read(source, use_native: bool, chunk_bytes: int | None = None):
    with ByteSource(source) as s:
        return read_serial(s, chunk_bytes, use_native=use_native)


@pytest.fixture
def declined(monkeypatch):
    """Counts the chunks the native decoder declines (returns None for) during a test."""
    seen = Counter()
    decode = native.decode

    def counting(data):
        out = decode(data)
        seen["declined" if out is None else "read"] += 1
        return out

    monkeypatch.setattr(native, "decode", counting)
    return seen


def _assert_same(pure, nat):
    (tp, mp, cp, wp), (tn, mn, cn, wn) = pure, nat
    assert mp == mn and cp == cn and wp == wn
    assert tp.keys() == tn.keys()
    for kind in tp:
        assert tp[kind].schema == tn[kind].schema, kind
        assert tp[kind].equals(tn[kind]), kind


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.name[:40])
def test_native_equals_pure_on_every_shared_trace(path, declined):
    if not path.exists():
        pytest.skip("shared traces not available")
    nat = _read(path, True)
    assert declined["read"] >= 1 and declined["declined"] == 0  # every chunk was read natively
    _assert_same(_read(path, False), nat)


def test_native_nanoseconds_are_exact_on_v100_ns_timestamps(SHARED_TRACES, raw_json):
    path = SHARED_TRACES / "v100_ns_timestamps.pt.trace.json.gz"
    events = raw_json(path, parse_float=Decimal)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]

    def ns(us):
        return int((Decimal(us) * 1000).to_integral_value(rounding=ROUND_HALF_UP))

    gpu = _read(path, True)[0]["gpu"].filter(pl.col("cat") == "kernel")
    assert gpu["ts_ns"].to_list() == [ns(e["ts"]) for e in kernels]
    assert gpu["dur_ns"].to_list() == [ns(e["dur"]) for e in kernels]
    assert sum(ns(e["ts"]) % 1000 != 0 for e in kernels) > 1000  # the digits a float64 loses


def _trace(events: list, tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _raw_text_trace(body: str, tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [' + body + "]}")
    return path


def test_values_worked_out_from_the_text(tmp_path, declined):
    body = ",".join(
        [
            # 1.23456 us -> 1234.56 ns -> 1235 (the 4th decimal rounds half up); string pid/tid
            '{"ph":"X","cat":"kernel","name":"k","pid":"7","tid":"stream 12","ts":1.23456,"dur":"+2.5",'
            '"args":{"device":0,"stream":12,"correlation":9223372036854775808,"grid":[ 4, 1,1 ],'
            '"block":[128,1,1],"memory bandwidth (GB/s)":12.5,"external id":41}}',
            # -0.0004 us -> -0.4 ns -> 0; 2^63 - 1 fits; "External id" beats 2021's key
            '{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":2,"ts":-0.0004,"dur":3,'
            '"args":{"External id":5,"external id":6,"Sequence number":9223372036854775807,'
            '"Input Dims":[[2, 3],\n [3]],"Input type":["float", "float"]}}',
            # metadata: args name null -> labels
            '{"ph":"M","name":"process_labels","pid":1,"tid":0,"args":{"name":null,"labels":"GPU 0"}}',
            '{"ph":"X","cat":"ac2g","name":"f","pid":1,"tid":2,"ts":1,"id":3}',
            '{"ph":"i","name":"[memory]","pid":1,"tid":2,"ts":4,"args":{"Bytes":-512,"Addr":123456789012345678901}}',
            '{"ph":"X","name":"Tab \\"quoted\\" \\u00e9","pid":1,"tid":2,"ts":5}',
        ]
    )
    tables, _meta, counts, warnings = _read(_raw_text_trace(body, tmp_path), True)
    assert declined == {"read": 1}
    gpu, op, meta, memory, other = (tables[k] for k in ("gpu", "op", "meta", "memory", "other"))
    assert gpu.row(0, named=True) | {"grid": None, "block": None} == {
        "name": "k",
        "cat": "kernel",
        "pid": 7,
        "tid": 12,
        "device": 0,
        "stream": 12,
        "correlation": None,  # 2^63 does not fit int64
        "external_id": 41,
        "bytes": None,
        "bandwidth_gbps": 12.5,
        "grid": None,
        "block": None,
        "graph_id": None,
        "ts_ns": 1235,
        "dur_ns": 2500,
    }
    assert gpu["grid"].to_list() == [[4, 1, 1]] and gpu["block"].to_list() == [[128, 1, 1]]
    assert op["ts_ns"].to_list() == [0] and op["external_id"].to_list() == [5]
    assert op["sequence_number"].to_list() == [2**63 - 1]
    assert op["input_dims"].to_list() == ["[[2,3],[3]]"] and op["input_type"].to_list() == ['["float","float"]']
    assert meta["value"].to_list() == ["GPU 0"]
    assert memory["bytes"].to_list() == [-512] and memory["addr"].to_list() == [None]
    assert other["name"].to_list() == ['Tab "quoted" é']
    assert "flow" not in {k for k, v in tables.items() if v.height}  # ac2g: counted, no rows
    assert counts[("ac2g", "X")] == 1 and counts[(None, "M")] == 1 and sum(counts.values()) == 6
    # pid and tid of the kernel were strings; the correlation and the Addr do not fit int64
    assert any("2 pid/tid values were written as strings" in w for w in warnings)
    assert any(w.startswith("2 ids do not fit int64") for w in warnings)
    _assert_same(_read(_raw_text_trace(body, tmp_path), False), (tables, _meta, counts, warnings))


# Each declines the native read (the Python decoder's rules or its salvage apply) and must
# give the Python path's answer.
ODD_EVENTS = {
    "float id": '{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":1,"ts":1,"args":{"correlation":5.0}}',
    "bool pid": '{"ph":"X","cat":"cpu_op","name":"a","pid":true,"tid":1,"ts":1}',
    "exponent ts": '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1.5e3}',
    "duplicate key": '{"ph":"X","cat":"cpu_op","name":"a","name":"b","pid":1,"tid":1,"ts":1}',
    "escaped key": '{"ph":"X","cat":"cpu_op","n\\u0061me":"a","pid":1,"tid":1,"ts":1}',
    "args not object": '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"args":[1]}',
    "not an object": "5",
    "numeric name": '{"ph":"X","cat":"cpu_op","name":5,"pid":1,"tid":1,"ts":1}',
    "junk ts": '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":"N/A"}',
    "bare NaN": '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":NaN}',
    "control char": '{"ph":"X","cat":"cpu_op","name":"a\tb","pid":1,"tid":1,"ts":1}',
    "trailing comma": '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,}',
}


@pytest.mark.parametrize("odd", ODD_EVENTS, ids=str)
def test_what_native_does_not_read_goes_to_python(odd, tmp_path, declined):
    good = '{"ph":"X","cat":"cpu_op","name":"ok","pid":1,"tid":1,"ts":2,"dur":1}'
    path = _raw_text_trace(good + "," + ODD_EVENTS[odd] + "," + good, tmp_path)
    nat = _read(path, True)
    assert declined["declined"] >= 1
    _assert_same(_read(path, False), nat)


def test_invalid_utf8_and_truncation_fall_back(tmp_path, declined):
    good = b'{"ph":"X","cat":"cpu_op","name":"ok","pid":1,"tid":1,"ts":2,"dur":1}'
    bad = b'{"ph":"X","cat":"cpu_op","name":"\xff\xfe","pid":1,"tid":1,"ts":3}'
    doc = b'{"traceEvents":[' + b",".join([good, bad, good]) + b"]}"
    for data in (doc, doc[:-30]):
        path = tmp_path / "u.json"
        path.write_bytes(data)
        _assert_same(_read(path, False), _read(path, True))
    assert declined["declined"] >= 2


def test_invalid_utf8_where_no_column_reads_it_falls_back(tmp_path, declined):
    # The native decoder validates UTF-8 only when a string held a byte beyond ASCII; a bad
    # byte in a value no column takes (an unread arg, a key it skips) must still send the chunk
    # to Python (msgspec skips such a value unread), as it did when the whole chunk was
    # validated first.
    good = b'{"ph":"X","cat":"cpu_op","name":"ok","pid":1,"tid":1,"ts":2,"dur":1}'
    for bad in (
        b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":3,"args":{"unread":"x\xc3"}}',
        b'{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":3,"k\xe2\x82":1}',
    ):
        path = tmp_path / "u.json"
        path.write_bytes(b'{"traceEvents":[' + b",".join([good, bad, good]) + b"]}")
        before = declined["declined"]
        pure, nat = _read(path, False), _read(path, True)
        assert declined["declined"] == before + 1
        _assert_same(pure, nat)


def test_names_beyond_ascii_are_read_natively(tmp_path, declined):
    # "\u00e9" escaped and "é" / "核" written as UTF-8: the same strings either way.
    body = ",".join(
        f'{{"ph":"X","cat":"cpu_op","name":"{n}","pid":1,"tid":1,"ts":{i},"dur":1,"args":{{"x":"ü"}}}}'
        for i, n in enumerate(["caf\\u00e9", "café", "核函数", 'q\\"uote\\"\\\\'])
    )
    path = _raw_text_trace(body, tmp_path)
    nat = _read(path, True)
    assert declined["declined"] == 0 and declined["read"] >= 1
    assert nat[0]["op"]["name"].to_list() == ["café", "café", "核函数", 'q"uote"\\']
    _assert_same(_read(path, False), nat)


def test_many_chunks_and_threads_give_the_same_tables(SHARED_TRACES, monkeypatch):
    path = SHARED_TRACES / "h100_owlv2_inference.json.gz"
    monkeypatch.setenv("TRACEANALYZER_WORKERS", "3")  # three pieces per chunk
    small = _read(path, True, chunk_bytes=3 << 20)
    _assert_same(_read(path, False), small)


def test_load_uses_the_native_decoder_unless_turned_off(SHARED_TRACES, monkeypatch, declined):
    path = SHARED_TRACES / "mi250_rocm_minitoy.json.gz"
    monkeypatch.delenv("TRACEANALYZER_NATIVE", raising=False)
    nat = load(path)
    assert declined["read"] >= 1
    monkeypatch.setenv("TRACEANALYZER_NATIVE", "0")
    assert not native.enabled()
    reads = declined["read"]
    pure = load(io.BytesIO(path.read_bytes()))
    assert declined["read"] == reads  # not called at all
    for f in dataclasses.fields(pure):
        a, b = getattr(pure, f.name), getattr(nat, f.name)
        if isinstance(a, pl.DataFrame):
            assert a.equals(b), f.name
    assert pure.event_counts == nat.event_counts and pure.warnings == nat.warnings


# Texts a field may hold in a real or damaged trace; the two decoders must agree on any mix.
_NUMBERS = ["0", "-1", "7", "1.5", "1.23456", "-0.0005", "1e3", "9223372036854775807", "9223372036854775808"]
_STRINGS = ['"7"', '"stream 7"', '"-12x"', '"12345678901234567890"', '""', '"a\\"b"', '"\\u00e9"', '"N/A"']
_OTHER = ["null", "true", "[1, 2]", '{"a": 1}', "[ [2, 3], [] ]"]
_FIELD_TEXTS = _NUMBERS + _STRINGS + _OTHER
_CATS = ['"kernel"', '"cpu_op"', '"cuda_runtime"', '"python_function"', '"cuda_sync"', '"gpu_user_annotation"']
_CATS += ['"fwdbwd"', '"ac2g"', '"gpu_memcpy"', '"Trace"', "null", '"Memset"']
_KEYS = ["pid", "tid", "ts", "dur", "id", "name"]
_ARG_KEYS = ["correlation", "External id", "external id", "device", "stream", "bytes", "grid", "Input Dims", "Addr"]


# Values the native decoder reads itself, by field (ids and args, times, names).
_NATIVE_IDS = ["0", "-1", "7", "9223372036854775807", "9223372036854775808", '"7"', '"stream 7"', "null"]
_NATIVE_TIMES = ["0", "-1", "7", "1.5", "1.23456", "-0.0005", '"7"', '"+1.5"', "null"]
_NATIVE_NAMES = ['"a"', '"a\\"b"', '"\\u00e9"', '""', "null"]


def _events_strategy(native_only: bool):
    from hypothesis import strategies as st

    def value(key: str):
        if not native_only:
            return st.sampled_from(_FIELD_TEXTS)
        if key in ("ts", "dur"):
            return st.sampled_from(_NATIVE_TIMES)
        return st.sampled_from(_NATIVE_NAMES if key == "name" else _NATIVE_IDS)

    def fields(keys: list[str]):
        return st.fixed_dictionaries({}, optional={k: value(k) for k in keys})

    event = st.tuples(
        st.sampled_from(_CATS),
        st.sampled_from(['"X"', '"M"', '"f"', '"s"', '"i"']),
        fields(_KEYS),
        st.one_of(st.none(), fields(_ARG_KEYS if not native_only else [k for k in _ARG_KEYS if k not in _RAW])),
    )
    return st.lists(event, min_size=1, max_size=30)


_RAW = {"grid", "Input Dims"}  # raw texts: any value is read (tested on the shared traces)


def _event_text(cat, ph, fields, args) -> str:
    parts = [f'"cat": {cat}', f'"ph": {ph}'] + [f'"{k}": {v}' for k, v in fields.items()]
    if args is not None:
        parts.append('"args": {' + ", ".join(f'"{k}": {v}' for k, v in args.items()) + "}")
    return "{" + ", ".join(parts) + "}"


@pytest.mark.parametrize("pool", ["all", "native"])
def test_random_loose_values_give_the_same_tables_either_way(pool, declined):
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(_events_strategy(pool == "native"))
    def check(events):
        body = ", ".join(_event_text(*e) for e in events)
        data = b'{"traceEvents": [' + body.encode() + b"]}"
        _assert_same(_read(io.BytesIO(data), False), _read(io.BytesIO(data), True))

    check()
    if pool == "native":  # values the native decoder reads itself: it read every chunk
        assert declined["read"] >= 20 and declined["declined"] == 0
    else:
        assert declined["read"] >= 5 and declined["declined"] >= 20


def test_declined_chunks_keep_their_place_among_native_ones(tmp_path, declined):
    # 60 events in chunks of ~1 KB: the chunks holding an odd event (a float correlation, a
    # bool pid) go to the Python decoder, the others stay native; rows keep the file's order.
    events = []
    for i in range(60):
        args = f'"correlation":{i}' if i not in (17, 41) else '"correlation":5.0'
        pid = "true" if i == 29 else "1"
        events.append(
            f'{{"ph":"X","cat":"kernel","name":"k{i % 7}","pid":{pid},"tid":2,"ts":{i}.5,"dur":1,'
            f'"args":{{"device":0,"stream":7,{args},"grid":[{i},1,1]}}}}'
        )
        events.append(f'{{"ph":"X","cat":"cpu_op","name":"op{i}","pid":1,"tid":2,"ts":{i},"dur":1}}')
    path = _raw_text_trace(",".join(events), tmp_path)
    nat = _read(path, True, chunk_bytes=1024)
    assert declined["declined"] >= 3 and declined["read"] >= 5  # both kinds of chunk, mixed
    gpu, op = nat[0]["gpu"], nat[0]["op"]
    assert op["name"].to_list() == [f"op{i}" for i in range(60)]
    assert gpu["ts_ns"].to_list() == [i * 1000 + 500 for i in range(60)]
    assert gpu["name"].to_list() == [f"k{i % 7}" for i in range(60)]
    assert gpu["grid"].to_list() == [[i, 1, 1] for i in range(60)]
    # the Python path reads 5.0 as 5 and true as 1 (to_int), the native one never sees them
    assert gpu["correlation"].to_list() == [5 if i in (17, 41) else i for i in range(60)]
    _assert_same(_read(path, False, chunk_bytes=1024), nat)


def test_native_columns_are_handed_over_once_in_one_chunk(tmp_path):
    body = ",".join(
        f'{{"ph":"X","cat":"cpu_op","name":"op{i % 3}","pid":1,"tid":2,"ts":{i},"dur":{"null" if i % 4 else 2}}}'
        for i in range(5000)
    )
    path = _raw_text_trace(body, tmp_path)
    tables = _read(path, True, chunk_bytes=4096)[0]  # ~60 chunks
    op = tables["op"]
    assert op.n_chunks("all") == [1] * op.width  # no concatenation of per-chunk frames
    assert op["dur_ns"].null_count() == 3750 and op["dur_ns"].drop_nulls().to_list() == [2000] * 1250
    assert op["name"].to_list()[:4] == ["op0", "op1", "op2", "op0"]
    cols = native.columns()
    native.add_pieces(native.decode(b'[{"ph":"X","cat":"cpu_op","name":"a","ts":1}]'), cols, Counter(), Counter())
    (kind, rows, specs), *_ = cols.finish()
    assert (kind, rows) == ("op", 1)
    _name, _tag, dictionary, codes = specs[0]
    assert pl.Series(dictionary).to_list() == [None, "a"] and pl.Series(codes).to_list() == [1]
    with pytest.raises(ValueError, match="already exported"):  # the buffers moved to polars
        dictionary.__arrow_c_array__()
