"""The single-file cache: a second command on the same trace reads the decoded tables and the
results of the first instead of decoding and computing them again, prints the same bytes, and
never touches the input; any change of the file, the options or the version is a miss."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import shutil

import pytest
from click.testing import CliRunner

import traceanalyzer.session
from traceanalyzer.cli import cli
from traceanalyzer.jobs import cache, trace_files

TRACE = "a100_multistream_syncs.json.gz"


@pytest.fixture
def as_files(monkeypatch) -> None:
    """Every table and result frame of rows in Arrow files of its own, none packed in a pickle,
    a table in several files of a few columns each (the layout of a trace over ~20 MB; the test
    trace's small tables are under `TABLE_INLINE_BYTES`, its op table 2.6 MB)."""
    monkeypatch.setattr(trace_files, "TABLE_INLINE_BYTES", 0)
    monkeypatch.setattr(trace_files, "FRAME_INLINE_BYTES", 0)
    monkeypatch.setattr(trace_files, "GROUP_BYTES", 256 << 10)


def _run(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


def _forbid(monkeypatch) -> None:
    """Decoding or computing gaps now fails the test: both must come from the cache."""

    def boom(*a, **k):
        raise AssertionError("computed again")

    monkeypatch.setattr(importlib.import_module("traceanalyzer.load"), "load", boom)
    monkeypatch.setattr(traceanalyzer.session, "classify_gaps", boom)
    monkeypatch.setattr(traceanalyzer.session, "analyse_gaps", boom)


def test_second_command_reads_tables_and_results_from_the_cache(cached, trace, as_files, monkeypatch):
    before = hashlib.sha256(trace.read_bytes()).hexdigest(), os.stat(trace).st_mtime_ns
    first = _run("gaps", str(trace), "--format", "json")
    entries = list(cached.iterdir())
    assert len(entries) == 1 and (entries[0] / "trace" / "tables.pickle").is_file()
    # a table in Arrow files of consecutive columns, not in the pickle (a table read when first needed)
    import polars as pl

    from traceanalyzer.load import load

    files = {p.name for p in (entries[0] / "trace").glob("*.arrow")}
    assert {"ops.0.arrow", "gpu.0.arrow"} <= files
    ops = sorted((p for p in (entries[0] / "trace").glob("ops.*.arrow")), key=lambda p: int(p.name.split(".")[1]))
    held = [list(pl.read_ipc_schema(p)) for p in ops]
    assert 1 < len(held) < sum(map(len, held)) and [c for cs in held for c in cs] == load(trace).ops.columns
    assert not list(cached.rglob(".tmp-*"))  # written atomically: nothing half-written left
    _forbid(monkeypatch)
    assert _run("gaps", str(trace), "--format", "json") == first
    # summary reads the same gap classification (same options), so it needs no decoding either
    summary = json.loads(_run("summary", str(trace), "--format", "json"))
    assert summary["idle_by_cause"]  # built from the cached classification (classify_gaps is forbidden)
    assert (hashlib.sha256(trace.read_bytes()).hexdigest(), os.stat(trace).st_mtime_ns) == before


def test_column_groups_hold_consecutive_columns_up_to_the_limit():
    """Columns in order, a file's worth at a time: 8,000 bytes each (1,000 Int64), so two to a
    group of 20,000 bytes; a struct of two of them (16,000) with neither neighbour."""
    import polars as pl

    df = pl.DataFrame({c: range(1000) for c in "abcde"}, schema={c: pl.Int64 for c in "abcde"})
    assert trace_files.column_groups(df, 20_000) == [["a", "b"], ["c", "d"], ["e"]]
    assert trace_files.column_groups(df, 0) == [[c] for c in "abcde"]  # one column a file
    assert trace_files.column_groups(df, 1 << 40) == [list("abcde")]
    big = df.with_columns(pl.struct("a", "b").alias("ab")).select("a", "ab", "c")  # 8,000 + 16,000 + 8,000
    assert trace_files.column_groups(big, 20_000) == [["a"], ["ab"], ["c"]]


def test_the_trace_writer_lets_each_column_go_once_written(trace, as_files, tmp_path, monkeypatch):
    """Handed the Trace's fields, `dump_trace` holds no column it has written: a command that
    drops columns while the writer runs beside it has them freed then. The op table's columns
    are numpy arrays lent to polars (read in place: the array lives while a frame holds its
    column), watched by weak references; when a column group is written, no column of an earlier
    group may still be alive. The Trace reads back whole."""
    import gc
    import weakref

    import polars as pl

    from traceanalyzer import load

    loaded = load(trace)
    fields = trace_files.trace_fields(loaded)
    want = fields["ops"]
    ints = [c for c, t in want.schema.items() if t == pl.Int64 and not want[c].null_count()]
    refs = {}

    def lent(c: str) -> pl.Series:
        a = want[c].to_numpy().copy()  # the writer's copy: the Trace holds the original
        refs[c] = weakref.ref(a)
        return pl.Series(c, a)

    fields["ops"] = want.select(ints).with_columns(lent(c) for c in ints)
    del fields["runtime"], fields["gpu"]  # (the ops are enough, the rest small tables)
    seen: list[list[str]] = []
    alive: list[list[str]] = []
    real = trace_files.write_frame

    def watched(df, path):
        gc.collect()
        alive.append([c for group in seen for c in group if c in refs and refs[c]() is not None])
        seen.append(df.columns)
        real(df, path)

    monkeypatch.setattr(trace_files, "write_frame", watched)
    folder = tmp_path / "entry"
    folder.mkdir()
    trace_files.dump_trace(fields, folder)
    assert fields == {} and len(seen) >= 3 and len(ints) >= 5  # emptied; the ops in several groups
    assert alive == [[]] * len(alive), alive  # no column written before is held while the next is
    assert all(r() is None for r in refs.values())  # and none once done
    assert trace_files.load_trace(folder).ops.equals(want.select(ints))


def test_small_tables_and_frames_are_packed_in_the_pickle(cached, trace, monkeypatch):
    """A table or result frame under TABLE_ / FRAME_INLINE_BYTES is packed into its entry's pickle, not written
    as Arrow files of its own (a file costs ~0.5 ms), and reads back equal to the decoded one,
    lazily too."""
    import dataclasses

    import polars as pl
    from polars.testing import assert_frame_equal

    from traceanalyzer.load import load

    _run("gaps", str(trace))
    (entry,) = list(cached.iterdir())
    decoded = load(trace)
    small, big = ("steps", "thread_names", "python", "memory"), ("ops", "gpu")  # 0-422 bytes; 2.6, 3.6 MB
    assert all(getattr(decoded, n).estimated_size() <= trace_files.TABLE_INLINE_BYTES for n in small)
    assert all(getattr(decoded, n).estimated_size() > trace_files.TABLE_INLINE_BYTES for n in big)
    files = {p.name.split(".")[0] for p in (entry / "trace").glob("*.arrow")}
    assert not files & set(small) and set(big) <= files
    read = _tables_read(monkeypatch)
    t = cache.load_trace(entry / "trace")
    assert not read and "steps" not in vars(t)  # not unpacked before it is asked for
    for name in (*small, *big):
        assert_frame_equal(getattr(t, name), getattr(decoded, name))
    assert read == [*small, *big]
    # the results: only frames over the limit as files of their own
    (results,) = list(entry.glob("results-*"))
    value = cache.load(results / "gaps")
    frames = {id(v): v for f in dataclasses.fields(value) if isinstance(v := getattr(value, f.name), pl.DataFrame)}
    as_files = [df for df in frames.values() if df.estimated_size() > trace_files.FRAME_INLINE_BYTES]
    assert as_files and len(as_files) < len(frames)
    assert len(list((results / "gaps").glob(f"*{cache.EXT}"))) == len(as_files)
    # a packed table that cannot be unpacked (damaged, the pickle around it sound): decoded again
    tables = entry / "trace" / "tables.pickle"
    rest, heights, widths, inline = pickle.loads(tables.read_bytes())
    tables.write_bytes(pickle.dumps((rest, heights, widths, {**inline, "steps": b"damaged"})))
    assert set(inline) == set(heights) - set(widths) and set(small) <= set(inline)
    t = cache.load_trace(entry / "trace", fallback=lambda: decoded)
    assert t.steps is decoded.steps and not (entry / "trace").exists()


def test_cached_output_equals_a_fresh_run(cached, trace):
    """Every command that reads the cache prints what a run without it prints."""
    for cmd in ("summary", "gaps", "syncs", "copies", "stages", "kernels", "ops", "path", "roofline"):
        _run(cmd, str(trace), "--format", "json")
    for cmd in ("summary", "gaps", "syncs", "copies", "stages", "kernels", "ops", "path", "roofline"):
        fresh = _run(cmd, str(trace), "--format", "json", "--no-cache")
        assert _run(cmd, str(trace), "--format", "json") == fresh, cmd


def test_no_cache_and_cache_dir(cached, trace, tmp_path):
    _run("--no-cache", "gaps", str(trace))
    _run("gaps", str(trace), "--no-cache")
    assert not cached.exists()
    elsewhere = tmp_path / "elsewhere"
    _run("--cache-dir", str(elsewhere), "gaps", str(trace))
    assert len(list(elsewhere.iterdir())) == 1 and not cached.exists()
    _run("gaps", str(trace), "--cache-dir", str(tmp_path / "via-ranks-flag"))  # the directory mode's flag
    assert (tmp_path / "via-ranks-flag").is_dir()


def test_a_changed_file_or_other_options_are_misses(cached, trace):
    _run("gaps", str(trace))
    (key,) = list(cached.iterdir())
    os.utime(trace, ns=(os.stat(trace).st_atime_ns, os.stat(trace).st_mtime_ns + 10**9))
    _run("gaps", str(trace))
    assert len(list(cached.iterdir())) == 2  # the touched file is a new trace key
    _run("gaps", str(trace), "--min-gap", "50")
    (new,) = [d for d in cached.iterdir() if d != key]
    assert len(list(new.glob("results-*"))) == 2  # other options, their own results
    assert len(list(key.glob("results-*"))) == 1


def test_fingerprint_sees_the_ends_of_the_file(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b"x" * (3 << 20))
    st = os.stat(p)
    a = cache.fingerprint(p)
    with open(p, "r+b") as fh:  # same size, same mtime, last byte changed
        fh.seek(-1, os.SEEK_END)
        fh.write(b"y")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.fingerprint(p) != a


def test_other_code_is_a_miss(cached, trace, monkeypatch):
    """A result computed by other code (a checkout edited under one version) is never read."""
    _run("gaps", str(trace))
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "other code")
    _run("gaps", str(trace))
    assert len(list(cached.iterdir())) == 2


def test_prune_removes_the_least_recently_used_first(tmp_path):
    for name, size, age in [("old", 300, 30), ("mid", 300, 20), ("new", 300, 10)]:
        d = tmp_path / name / "trace"
        d.mkdir(parents=True)
        (d / "value.pickle").write_bytes(b"x" * size)
        t = 1_700_000_000 - age
        os.utime(tmp_path / name, (t, t))
    # 900 bytes held, 650 allowed: the oldest goes; "mid" is in use, so "new" goes next at 350
    assert [p.name for p in cache.prune(tmp_path, 650)] == ["old"]
    assert [p.name for p in cache.prune(tmp_path, 350, keep=tmp_path / "mid")] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid"]


def test_cache_max_keeps_only_the_trace_in_use(cached, trace, SHARED_TRACES, tmp_path, monkeypatch):
    other = tmp_path / "other.json.gz"
    shutil.copy(SHARED_TRACES / "mi250_rocm_minitoy.json.gz", other)
    _run("gaps", str(other))
    _run("--cache-max", "1", "gaps", str(trace))
    (left,) = list(cached.iterdir())
    assert (left / "trace").is_dir() and len(list(left.glob("results-*"))) == 1
    _forbid(monkeypatch)
    _run("gaps", str(trace))  # the entry in use survived the pruning: a hit


def _tables_read(monkeypatch) -> list[str]:
    """The cached Trace's tables read from now on (from their Arrow files or their pickle)."""
    read = []
    cls = trace_files._cached_trace_class()
    real = cls.__getattr__

    def reading(self, name):
        if name in self.__dict__.get("_heights", ()):
            read.append(name)
        return real(self, name)

    monkeypatch.setattr(cls, "__getattr__", reading)
    return read


def test_cached_results_read_no_table_they_do_not_need(cached, trace, monkeypatch):
    """With every result it prints in the cache, gaps reads the step table (to know the steps)
    and its results, none of the event tables; the trace's tables come only when asked for."""
    _run("gaps", str(trace), "--format", "json")
    fresh = _run("gaps", str(trace), "--format", "csv", "--no-cache")
    read = _tables_read(monkeypatch)
    _forbid(monkeypatch)
    assert _run("gaps", str(trace), "--format", "csv") == fresh  # another format: not a replay
    assert read == ["steps"]
    (entry,) = list(cached.iterdir())
    t = cache.load_trace(entry / "trace")
    assert t.has_gpu_work and "gpu" not in vars(t)  # from the row count
    assert t.ops.height == len(t.ops) and "ops" in vars(t)  # read on first use, then kept


def test_steps_from_ranges_read_from_a_cached_trace(cached, SHARED_TRACES, tmp_path):
    """A trace without ProfilerStep: the Session re-makes the Trace with its detected steps
    (dataclasses.replace over a cached one) and prints what a run without the cache prints."""
    path = tmp_path / "vllm.json.gz"
    shutil.copy(SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz", path)
    _run("gaps", str(path), "--format", "json")
    for cmd in ("summary", "syncs"):
        assert _run(cmd, str(path), "--format", "json") == _run(cmd, str(path), "--format", "json", "--no-cache")


def test_damaged_entries_are_decoded_or_computed_again(cached, trace, as_files):
    _run("gaps", str(trace), "--format", "json")
    fresh = _run("summary", str(trace), "--format", "json", "--no-cache")
    (entry,) = list(cached.iterdir())
    (entry / "trace" / "ops.1.arrow").write_bytes(b"ARROW1 damaged")  # read only when summary asks for ops
    (results,) = list(entry.glob("results-*"))
    (results / "gaps" / "value.pickle").write_bytes(b"damaged")
    assert _run("summary", str(trace), "--format", "json") == fresh
    assert not (entry / "trace" / "ops.1.arrow").exists()  # the damaged trace entry went
    assert _run("summary", str(trace), "--format", "json", "--top", "3") == _run(
        "summary", str(trace), "--format", "json", "--top", "3", "--no-cache"
    )
    (entry / "trace").mkdir(exist_ok=True)
    (entry / "trace" / "tables.pickle").write_bytes(b"damaged")
    assert cache.load_trace(entry / "trace") is cache.MISSING


def test_a_column_file_shorter_than_its_table_is_decoded_again(cached, trace, as_files):
    """A table's columns are read side by side in one query (`trace_files.read_columns`): a
    column of fewer rows than the others (a damaged entry, valid Arrow) fails the read, never
    padded with nulls, and the file is decoded again."""
    import polars as pl

    _run("gaps", str(trace), "--format", "json")
    fresh = _run("summary", str(trace), "--format", "json", "--no-cache")
    (entry,) = list(cached.iterdir())
    column = entry / "trace" / "ops.1.arrow"
    short = pl.read_ipc(column).head(1)
    assert pl.read_ipc(column).height > 1
    short.write_ipc(column)
    assert _run("summary", str(trace), "--format", "json") == fresh
    assert not column.exists()  # the damaged trace entry went


@pytest.mark.parametrize("inline", [None, 0], ids=["packed", "files"])
def test_a_cached_trace_is_the_loaded_one_table_for_table(SHARED_TRACES, tmp_path, monkeypatch, inline):
    """Written on a thread and read back lazily, every table, the metadata, the counts and the
    warnings are the loaded Trace's, its tables packed in the pickle or in Arrow files."""
    import dataclasses

    import polars as pl

    from traceanalyzer.load import load

    if inline is not None:
        monkeypatch.setattr(trace_files, "TABLE_INLINE_BYTES", inline)

    path = SHARED_TRACES / "v100_memory_events.json.gz"  # memory events: a table most traces lack
    loaded = load(path)
    store = cache.TraceCache(tmp_path, str(path), "[]", "{}")
    store.put_trace(loaded)
    store.wait()
    back = store.get_trace()
    assert isinstance(back, type(loaded)) and not vars(back).keys() & {"ops", "gpu", "memory"}
    for f in dataclasses.fields(loaded):
        mine, theirs = getattr(back, f.name), getattr(loaded, f.name)
        if isinstance(theirs, pl.DataFrame):
            assert mine.equals(theirs) and mine.schema == theirs.schema, f.name
            assert set(mine.n_chunks("all")) <= {1}, f.name  # its columns' files side by side, or its pickle
        else:
            assert mine == theirs, f.name
    assert loaded.memory.height > 0 and back.has_gpu_work == loaded.has_gpu_work
    steps = dataclasses.replace(back, steps=back.steps.head(1))  # what the Session does with detected steps
    assert steps.ops.equals(loaded.ops) and steps.steps.height == 1


@pytest.mark.parametrize(("rows", "files"), [(1000, 0), (100_000, 2)])
def test_a_frame_held_twice_comes_back_once_and_in_one_chunk(tmp_path, rows, files):
    """A DataFrame that a result holds twice (two layers' shared union) is stored once (one Arrow
    file, or packed in the entry when under FRAME_INLINE_BYTES) and comes back as one frame, and a
    chunked frame comes back with one chunk per column: the dependency model copies every
    chunked column it hands to numpy."""
    import polars as pl

    part = pl.DataFrame({"a": list(range(rows)), "b": [str(i) for i in range(rows)]})
    chunked = pl.concat([part, part, part], rechunk=False)
    assert chunked.n_chunks() == 3
    assert (part.estimated_size() > trace_files.FRAME_INLINE_BYTES) == (files > 0)
    cache.dump((chunked, chunked, part), tmp_path)
    assert len(list(tmp_path.glob(f"*{cache.EXT}"))) == files
    one, again, other = cache.load(tmp_path)
    assert one is again and other is not one
    assert one.equals(chunked) and one.n_chunks("all") == [1, 1] and other.equals(part)


def test_summary_hands_the_cache_its_whole_gap_results(cached, trace):
    """`summary` reads a few columns of every gap and of the classified pieces and lets the rest
    go before its rules run, and the CPU activity's unions once the model is built; the cache
    still keeps every column of them (a later `timeline` or `gaps` reads them), as a Session
    computing them keeps them."""
    import polars as pl

    from traceanalyzer.load import load
    from traceanalyzer.session import Session

    _run("summary", str(trace), "--format", "json")
    (results,) = (d for d in next(cached.iterdir()).iterdir() if d.name.startswith("results-"))
    fresh = Session(load(trace))
    for name, table in (("gaps", "all_gaps_ns"), ("classified", "pieces")):
        kept, full = getattr(cache.load(results / name), table), getattr(getattr(fresh, name), table)
        assert isinstance(kept, pl.DataFrame) and kept.height > 0 and kept.equals(full), name
    unions = cache.load(results / "activity").unions  # summary lets them go once the model is built
    assert len(unions) == len(fresh.activity.unions) and all(a.equals(b) for a, b in zip(unions, fresh.activity.unions))


@pytest.mark.parametrize("first", ["path", "syncs", "gaps"])
def test_summary_after_another_command_prints_what_a_fresh_run_prints(cached, trace, first):
    """Whatever an earlier command left in the cache (the critical path without the findings,
    the classification without the model), summary lets go of only what nothing left reads."""
    _run(first, str(trace), "--format", "json")
    fresh = _run("summary", str(trace), "--format", "json", "--no-cache")
    assert _run("summary", str(trace), "--format", "json") == fresh


def test_a_released_trace_is_freed_though_its_cache_names_it(SHARED_TRACES, tmp_path):
    """The store names the Session's traces in the results it pickles (`share`) without keeping
    them: once the Session releases its Trace nothing holds it (`gaps` writes its output without
    it, as without a cache), while a result that holds the Trace still pickles it by name."""
    import gc
    import weakref

    from traceanalyzer.load import load
    from traceanalyzer.session import Session

    path = SHARED_TRACES / TRACE
    store = cache.TraceCache(tmp_path, str(path), "[]", "{}")
    ses = Session(load(path), store=store)
    alive = weakref.ref(ses.trace)
    store.put("holder", {"trace": ses.trace})  # a result that refers to the trace
    assert store.get("holder")["trace"] is ses.trace
    assert (store.results / "holder" / "value.pickle").stat().st_size < 200  # by name, no table in it
    ses.release("trace")
    gc.collect()
    assert alive() is None and not dict(store.shared)


def test_lazy_is_a_trace_read_from_the_cache_only(SHARED_TRACES, tmp_path):
    """`cache.lazy`: a Trace from the cache reads its tables on first use (a command narrowing it
    would read them all), a decoded one or a plain copy has them."""
    import dataclasses

    from traceanalyzer.load import load

    path = SHARED_TRACES / TRACE
    loaded = load(path)
    store = cache.TraceCache(tmp_path, str(path), "[]", "{}")
    store.put_trace(loaded, background=False)
    back = store.get_trace()
    assert cache.lazy(back) and not cache.lazy(loaded)
    assert not cache.lazy(dataclasses.replace(back, steps=back.steps))
