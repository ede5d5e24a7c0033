"""Schemas and layouts: 2021 category names, legacy metadata, loose ids and tids, ROCm, sync
markers, CUDA graphs, metadata after the events, and the byte layer (minified, gzip or not,
chunk boundaries). Expected values come from the raw JSON, read with the stdlib in the test."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.load.loader import RawTables, read_tables
from traceanalyzer.load.source import ByteSource

WORKERS0 = "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
LEGACY = "edge_legacy_compute_properties.json"
LARGE_INT = "edge_large_integer.pt.trace.json.gz"
ROCM = "mi250_rocm_minitoy.json.gz"
SYNCS = "a100_simple_add_syncs.json.gz"
GRAPHS = "gb10_vllm_cudagraphs.pt.trace.json.gz"
H100 = "h100_owlv2_inference.json.gz"
DLRM0 = "dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz"

TABLES = (
    "ops",
    "python",
    "runtime",
    "gpu",
    "sync_markers",
    "gpu_annotations",
    "memory",
    "flows",
    "thread_names",
    "steps",
)
RUNTIME_CATS = {"cuda_runtime", "Runtime", "cuda_driver"}
KERNEL_CATS = {"kernel", "Kernel"}


def ns(us) -> int:
    return int((Decimal(str(us)) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


def _canonical(df: pl.DataFrame) -> pl.DataFrame:
    # thread_names comes out of a unique(): its row order carries no meaning
    return df.sort(df.columns, nulls_last=True) if "thread_name" in df.columns else df


def assert_same_frame(got: pl.DataFrame, want: pl.DataFrame, what: str) -> None:
    try:
        assert_frame_equal(_canonical(got), _canonical(want), check_exact=True)
    except AssertionError as exc:
        raise AssertionError(f"table {what}: {exc}") from None


def assert_same_trace(a, b) -> None:
    assert a.event_counts == b.event_counts
    for table in TABLES:
        assert_same_frame(getattr(a, table), getattr(b, table), table)
    assert a.meta.raw == b.meta.raw
    assert a.meta.devices == b.meta.devices
    assert (a.meta.origin_ns, a.meta.end_ns) == (b.meta.origin_ns, b.meta.end_ns)


# -- 2021 schema (PyTorch 1.8/1.9) ------------------------------------------------------------
@pytest.fixture(scope="module")
def workers0_raw(SHARED_TRACES, raw_json):
    return raw_json(SHARED_TRACES / WORKERS0)["traceEvents"]


@pytest.fixture(scope="module")
def workers0(SHARED_TRACES, load_trace):
    return load_trace(SHARED_TRACES / WORKERS0)


def test_2021_profiler_steps_are_operator_ranges(workers0_raw, workers0):
    raw_steps = [e for e in workers0_raw if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert {e["cat"] for e in raw_steps} == {"Operator"}
    want = sorted((int(e["name"].split("#")[1]), ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in raw_steps)
    assert [s for s, _, _ in want] == list(range(5, 11))
    got = workers0.steps.sort("step").select("step", "cpu_start_ns", "cpu_end_ns").rows()
    assert got == want


def test_2021_runtime_gpu_correlation_links_all_kernels(workers0_raw, workers0):
    runtime_corr = {e["args"]["correlation"] for e in workers0_raw if e.get("cat") == "Runtime"}
    kernels = [e for e in workers0_raw if e.get("cat") == "Kernel"]
    linkable = sum(e["args"]["correlation"] in runtime_corr for e in kernels)
    assert linkable == len(kernels) > 0
    k = workers0.gpu.filter(pl.col("kind") == "kernel")
    assert k.height == len(kernels)
    assert k["runtime_id"].null_count() == 0
    # each link points at the runtime row with the same correlation
    joined = k.join(workers0.runtime.select("runtime_id", pl.col("correlation").alias("rt_corr")), on="runtime_id")
    assert joined.height == k.height
    assert (joined["correlation"] == joined["rt_corr"]).all()


def test_2021_lower_case_external_id_is_read(workers0_raw, workers0):
    # 2021 ops write `External id`; their runtime calls and GPU activities `external id`
    for table, cats, key in (
        ("ops", {"Operator"}, "External id"),
        ("runtime", {"Runtime"}, "external id"),
        ("gpu", {"Kernel", "Memcpy", "Memset"}, "external id"),
    ):
        want = sorted(e["args"][key] for e in workers0_raw if e.get("cat") in cats and key in e.get("args", {}))
        assert want, table
        got = getattr(workers0, table)["external_id"].drop_nulls().sort().to_list()
        assert got == want, table


def test_string_tids_become_ints(workers0_raw, workers0):
    def as_int(tid):
        return tid if isinstance(tid, int) else int(re.search(r"-?\d+", tid).group())

    raw_str_tids = {e["tid"] for e in workers0_raw if isinstance(e.get("tid"), str)}
    assert {"25738", "stream 7"} <= raw_str_tids
    for table, cats in (("ops", {"Operator"}), ("runtime", {"Runtime"}), ("gpu", {"Kernel", "Memcpy", "Memset"})):
        df = getattr(workers0, table)
        assert df.schema["tid"] == pl.Int64
        want = Counter(as_int(e["tid"]) for e in workers0_raw if e.get("cat") in cats)
        assert Counter(df["tid"].to_list()) == want, table
    assert set(workers0.gpu["tid"].to_list()) == {7}


# -- legacy metadata, large integers, missing dur ---------------------------------------------
def test_legacy_compute_properties_devices(SHARED_TRACES, raw_json, load_trace):
    props = raw_json(SHARED_TRACES / LEGACY)["computeProperties"]
    trace = load_trace(SHARED_TRACES / LEGACY)
    want = [(p["id"], p["name"], p["totalGlobalMem"], p["multiProcessorCount"]) for p in props]
    got = [(d.id, d.name, d.total_memory_bytes, d.sm_count) for d in trace.meta.devices]
    assert got == want
    assert len(want) == 4 and all(sm == 80 for *_, sm in want)


def test_legacy_compute_properties_compute_capability(SHARED_TRACES, raw_json, load_trace):
    props = raw_json(SHARED_TRACES / LEGACY)["computeProperties"]
    trace = load_trace(SHARED_TRACES / LEGACY)
    assert [d.compute_capability for d in trace.meta.devices] == [f"{p['major']}.{p['minor']}" for p in props]


def test_id_beyond_int64_loads(SHARED_TRACES, raw_json, load_trace):
    events = raw_json(SHARED_TRACES / LARGE_INT)["traceEvents"]
    big = [v for e in events for v in e.get("args", {}).values() if isinstance(v, int) and v >= 2**63]
    assert big  # the file does hold such an id
    trace = load_trace(SHARED_TRACES / LARGE_INT)
    assert (trace.ops.height, trace.gpu.height) == (1, 1)
    assert trace.ops["ts_ns"].to_list() == [ns(e["ts"]) for e in events if e["cat"] == "cpu_op"]


def test_ids_beyond_int64_in_read_fields_become_null(tmp_path, load_trace):
    huge = 2**64 + 5
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 5,
            "args": {"correlation": huge, "External id": huge},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 20,
            "dur": 5,
            "args": {"correlation": huge, "External id": -huge, "stream": 7, "device": 0},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 30,
            "dur": 5,
            "args": {"correlation": 3, "stream": 7, "device": 0},
        },
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 1, "ts": 10, "id": huge},
    ]
    path = tmp_path / "huge_ids.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    assert trace.runtime["correlation"].to_list() == [None]
    assert trace.gpu.sort("ts_ns")["correlation"].to_list() == [None, 3]
    assert trace.gpu.sort("ts_ns")["external_id"].to_list() == [None, None]
    assert trace.flows["id"].to_list() == [None]


def test_events_without_dur_have_zero_duration(tmp_path, load_trace):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::op", "pid": 1, "tid": 1, "ts": 100.5},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 101,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 102.25,
            "args": {"correlation": 1, "stream": 7, "device": 0},
        },
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 103},
        {"ph": "X", "cat": "python_function", "name": "a.py(1): f", "pid": 1, "tid": 1, "ts": 99},
    ]
    path = tmp_path / "no_dur.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load_trace(path)
    for table, want_ts in (
        ("ops", 100_500),
        ("runtime", 101_000),
        ("gpu", 102_250),
        ("sync_markers", 103_000),
        ("python", 99_000),
    ):
        df = getattr(trace, table)
        assert df.select("ts_ns", "dur_ns", "end_ns").rows() == [(want_ts, 0, want_ts)], table


# -- ROCm, sync markers, CUDA graphs ----------------------------------------------------------
def test_rocm_hip_runtime_calls_in_runtime_table(SHARED_TRACES, raw_json, load_trace):
    events = raw_json(SHARED_TRACES / ROCM)["traceEvents"]
    want = Counter(e["name"] for e in events if e.get("cat") in RUNTIME_CATS)
    assert want and all(name.startswith("hip") for name in want)
    trace = load_trace(SHARED_TRACES / ROCM)
    assert Counter(trace.runtime["name"].to_list()) == want
    # hipLaunchKernel / hipExtModuleLaunchKernel link to their kernels by correlation
    rt_corr = {e["args"]["correlation"] for e in events if e.get("cat") in RUNTIME_CATS}
    linked = sum(e["args"]["correlation"] in rt_corr for e in events if e.get("cat") in KERNEL_CATS)
    assert trace.gpu.filter(pl.col("kind") == "kernel")["runtime_id"].drop_nulls().len() == linked > 0


def test_cuda_sync_events_are_sync_markers_not_gpu_work(SHARED_TRACES, raw_json, load_trace):
    events = raw_json(SHARED_TRACES / SYNCS)["traceEvents"]
    syncs = [e for e in events if e.get("cat") == "cuda_sync"]
    assert syncs
    trace = load_trace(SHARED_TRACES / SYNCS)
    want = sorted((e["name"], ns(e["ts"]), ns(e["dur"])) for e in syncs)
    assert sorted(trace.sync_markers.select("name", "ts_ns", "dur_ns").rows()) == want
    gpu_work = [e for e in events if e.get("cat") in {"kernel", "gpu_memcpy", "gpu_memset"}]
    assert trace.gpu.height == len(gpu_work)
    # (the Trace keeps no `cat`: no GPU row is one of the sync events, by name and start)
    assert not set(trace.gpu.select("name", "ts_ns").rows()) & {(name, ts) for name, ts, _ in want}
    assert not set(trace.gpu["name"].to_list()) & {e["name"] for e in syncs}


def test_cuda_graph_kernels_link_to_their_graph_launch(SHARED_TRACES, raw_json, load_trace):
    events = raw_json(SHARED_TRACES / GRAPHS)["traceEvents"]
    launches = {
        e["args"]["correlation"] for e in events if e.get("cat") in RUNTIME_CATS and e["name"] == "cudaGraphLaunch"
    }
    want = sum(e["args"].get("correlation") in launches for e in events if e.get("cat") in KERNEL_CATS)
    del events
    assert want == 11_540  # the README's count, reproduced from the raw JSON
    trace = load_trace(SHARED_TRACES / GRAPHS)
    kernels = trace.gpu.filter(pl.col("kind") == "kernel")
    via_graph = kernels.join(
        trace.runtime.select("runtime_id", pl.col("name").alias("rt_name"), pl.col("correlation").alias("rt_corr")),
        on="runtime_id",
    ).filter(pl.col("rt_name") == "cudaGraphLaunch")
    assert via_graph.height == want
    assert (via_graph["correlation"] == via_graph["rt_corr"]).all()
    assert via_graph["runtime_id"].n_unique() == len(launches)  # many kernels per launch


# -- metadata and the byte layer --------------------------------------------------------------
def test_metadata_after_trace_events_is_read(SHARED_TRACES, load_trace):
    with gzip.open(SHARED_TRACES / ROCM, "rb") as fh:
        text = fh.read()
    doc = json.loads(text)
    after = [
        k
        for k in ("traceName", "displayTimeUnit", "baseTimeNanoseconds")
        if text.rfind(f'"{k}"'.encode()) > text.rfind(b"]")
    ]
    assert "traceName" in after and "baseTimeNanoseconds" in after
    trace = load_trace(SHARED_TRACES / ROCM)
    for key in doc.keys() - {"traceEvents"}:
        assert trace.meta.raw.get(key) == doc[key], key


def test_minified_trace_loads_like_indented(SHARED_TRACES, load_trace, tmp_path):
    with gzip.open(SHARED_TRACES / ROCM, "rb") as fh:
        original = fh.read()
    assert original.count(b"\n") > 100  # Kineto's indented layout
    minified = json.dumps(json.loads(original), separators=(",", ":")).encode()
    assert b"\n" not in minified
    path = tmp_path / "minified.json"
    path.write_bytes(minified)
    assert_same_trace(load_trace(path), load_trace(SHARED_TRACES / ROCM))


def test_array_args_are_lists_whatever_the_indentation(SHARED_TRACES, load_trace, tmp_path):
    # h100_owlv2 writes every array over several lines ("grid": [\n 56,\n 2,\n 1\n ]).
    # By hand from the raw JSON: the first kernel (nchwToNhwcKernel) has grid [31752, 1, 1] and
    # block [256, 1, 1]; 845 kernels run on a [10370, 1, 1] grid; the first aten::addmm has
    # Input Dims [[1024], [5185, 1024], [1024, 1024], [], []].
    indented = load_trace(SHARED_TRACES / H100)
    gpu = indented.gpu.filter(pl.col("kind") == "kernel").sort("ts_ns")
    # every value fits int32: stored so (trace.py, "Storage"; an Int64 list where one does not)
    assert gpu.schema["grid"] == pl.List(pl.Int32) and gpu.schema["block"] == pl.List(pl.Int32)
    assert gpu.row(0, named=True)["grid"] == [31752, 1, 1]
    assert gpu.row(0, named=True)["block"] == [256, 1, 1]
    assert gpu.filter(pl.col("grid") == [10370, 1, 1]).height == 845
    addmm = indented.ops.filter(pl.col("name") == "aten::addmm").sort("ts_ns").row(0, named=True)
    assert json.loads(addmm["input_dims"]) == [[1024], [5185, 1024], [1024, 1024], [], []]
    assert addmm["input_dims"] == "[[1024],[5185,1024],[1024,1024],[],[]]"
    assert addmm["input_type"] == '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]'
    # the same events minified load to the same tables, to the byte
    with gzip.open(SHARED_TRACES / H100, "rb") as fh:
        doc = json.load(fh)
    path = tmp_path / "minified.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    minified = load_trace(path)
    assert_frame_equal(minified.gpu, indented.gpu, check_exact=True)
    assert_frame_equal(minified.ops, indented.ops, check_exact=True)


def test_gzip_and_plain_copies_load_identically(SHARED_TRACES, load_trace, tmp_path):
    gz = tmp_path / "copy.json.gz"
    shutil.copyfile(SHARED_TRACES / DLRM0, gz)
    plain = tmp_path / "copy.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    a, b = load_trace(gz), load_trace(plain)
    assert_same_trace(a, b)
    assert a.gpu.height > 0 and a.ops.height > 0


def _read_tables_counting_chunks(path, monkeypatch, **kwargs):
    """read_tables(...) plus how many chunks the decoder accepted."""
    accepted = []
    original = RawTables.add_chunk

    def add_chunk(self, data):
        ok = original(self, data)
        accepted.append(ok)
        return ok

    with monkeypatch.context() as m:
        m.setattr(RawTables, "add_chunk", add_chunk)
        with ByteSource(path) as src:
            result = read_tables(src, **kwargs)
    return result, sum(accepted)


def _tricky_trace(path) -> None:
    """Events whose insides look like event boundaries: `}, {` in strings, lists of objects."""
    events = []
    for i in range(60):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"op}}, {{{i}" if i % 3 == 0 else f"op{i}",
                "pid": 1,
                "tid": 1,
                "ts": 1000 + 10 * i,
                "dur": 5 + i % 4,
                "args": {
                    "External id": i,
                    "Input Dims": [[i, 2], []],
                    "Input type": ["float", "}, {"],
                    "list of objects": [{"a": i}, {"b": "}, {"}, {}],
                },
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": 0,
                "tid": 7,
                "ts": 2000 + 10 * i,
                "dur": 3,
                "args": {"correlation": i, "stream": 7, "device": 0, "grid": [i, 1, 1], "block": [128, 1, 1]},
            }
        )
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "tricky"}, indent=1))


@pytest.mark.parametrize(
    ("name", "chunk_bytes"),
    [(ROCM, 64), (ROCM, 4096), (LEGACY, 3000), (DLRM0, 65536), ("minified", 300), ("tricky", 32), ("tricky", 500)],
)
def test_tiny_chunks_give_the_same_tables(SHARED_TRACES, tmp_path, monkeypatch, name, chunk_bytes):
    if name == "minified":  # everything on one line: cuts between `},{` with no white space
        with gzip.open(SHARED_TRACES / ROCM, "rb") as fh:
            doc = json.loads(fh.read())
        path = tmp_path / "minified.json"
        path.write_text(json.dumps(doc, separators=(",", ":")))
    elif name == "tricky":
        path = tmp_path / "tricky.json"
        _tricky_trace(path)
    else:
        # a plain copy: ByteSource inflates gzip in blocks of compressed input, so chunk_bytes
        # only governs the cuts on uncompressed input
        path = tmp_path / "plain.json"
        with open(SHARED_TRACES / name, "rb") as fh:
            data = fh.read()
        path.write_bytes(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    (ref_tables, ref_meta, ref_counts, ref_warn), ref_chunks = _read_tables_counting_chunks(path, monkeypatch)
    (tables, meta, counts, warn), chunks = _read_tables_counting_chunks(path, monkeypatch, chunk_bytes=chunk_bytes)
    assert ref_chunks == 1  # the default reads these small files in one chunk...
    assert chunks > 5  # ...and the tiny size really cuts them into many
    assert (meta, counts, warn) == (ref_meta, ref_counts, ref_warn)
    assert tables.keys() == ref_tables.keys()
    for kind in tables:
        assert_same_frame(tables[kind], ref_tables[kind], kind)
    # every event has a row, but launch flows (ac2g, async), which are counted only
    launch_flows = sum(n for (cat, _ph), n in ref_counts.items() if cat in ("ac2g", "async"))
    assert sum(ref_counts.values()) - launch_flows == sum(t.height for t in ref_tables.values()) > 0
    if name == "tricky":
        assert ref_tables["op"].height == ref_tables["gpu"].height == 60
        assert ref_meta["traceName"] == "tricky"
