"""Property-based tests (hypothesis) of the gaps analysis on random event streams: for every
device, busy + idle = window; idle by cause sums to the idle time; no negative duration is
reported. The streams are written as JSON and read back through `load()`, so the loader's
sanitising (duplicates, clipping, ordering) is exercised too."""

from __future__ import annotations

import io
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceanalyzer.analyses.gaps import analyse_gaps
from traceanalyzer.load import load

ORIGIN = 1_700_000_000_000  # us

kernel = st.tuples(
    st.integers(0, 1),  # device
    st.integers(0, 2),  # stream
    st.integers(0, 5_000),  # start, us after ORIGIN
    st.integers(-5, 400),  # dur (negative and zero included)
    st.booleans(),  # launched by a traced runtime call?
    st.integers(0, 100),  # launch lead time, us
)
step = st.tuples(st.integers(0, 5_000), st.integers(1, 2_000))


def _trace(kernels, steps, fractional: bool) -> bytes:
    ev = []
    for i, (dev, stream, ts, dur, launched, lead) in enumerate(kernels):
        t = ORIGIN + ts + (0.123 if fractional and i % 2 else 0)
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": dev,
                "tid": stream,
                "ts": t,
                "dur": dur,
                "args": {"device": dev, "stream": stream, "correlation": i + 1},
            }
        )
        if launched:
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 9,
                    "tid": 1,
                    "ts": max(ORIGIN, t - lead),
                    "dur": 3,
                    "args": {"correlation": i + 1},
                }
            )
    for j, (ts, dur) in enumerate(sorted(steps)):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{j}",
                "pid": 9,
                "tid": 1,
                "ts": ORIGIN + ts,
                "dur": dur,
            }
        )
    return json.dumps({"traceEvents": ev}).encode()


def _load(data: bytes):
    fh = io.BytesIO(data)
    fh.name = "random.json"
    return load(fh)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kernel, min_size=1, max_size=25), st.lists(step, max_size=4), st.booleans())
def test_busy_plus_idle_is_the_window_and_causes_sum_to_idle(kernels, steps, fractional):
    result = analyse_gaps(_load(_trace(kernels, steps, fractional)))
    assert result.has_gpu_work
    tol = 1e-6
    for row in result.devices.iter_rows(named=True):
        assert abs(row["busy_us"] + row["idle_us"] - row["window_us"]) < tol
        assert row["busy_us"] >= 0 and row["idle_us"] >= 0 and row["window_us"] >= 0
        assert row["busy_us"] <= row["window_us"] + tol
    for row in result.steps.iter_rows(named=True):
        assert abs(row["busy_us"] + row["idle_us"] - row["window_us"]) < tol
        assert row["idle_us"] >= -tol
    idle = result.devices["idle_us"].sum()
    by_cause = result.idle_by_cause["idle_us"].sum() if result.idle_by_cause.height else 0.0
    assert abs(by_cause - idle) < 1e-3
    assert abs(result.all_gaps["duration_us"].sum() - idle) < 1e-3 if result.all_gaps.height else idle < 1e-3
    assert (result.all_gaps["duration_us"] > 0).all()
    assert (result.gaps["duration_us"] >= result.options.min_gap_us).all()
    if result.all_gaps.height:
        assert result.all_gaps["launch_delay_us"].drop_nulls().is_finite().all()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kernel, min_size=1, max_size=15))
def test_busy_time_is_the_union_of_kernels(kernels):
    """Without steps the window is the GPU span of the whole trace (every device is judged over
    the same one step); busy is the union of [ts, ts + max(dur, 0)] per device, computed here by
    a plain sweep over integer microseconds."""
    result = analyse_gaps(_load(_trace(kernels, [], False)))
    all_spans = [(ts, ts + max(dur, 0)) for _d, _s, ts, dur, _l, _ld in kernels]
    window = max(b for _a, b in all_spans) - min(a for a, _b in all_spans)
    for dev in {k[0] for k in kernels}:
        spans = sorted((ts, ts + max(dur, 0)) for d, _s, ts, dur, _l, _ld in kernels if d == dev)
        busy, reach = 0, None
        for a, b in spans:
            if reach is None or a > reach:
                busy += b - a
                reach = b
            elif b > reach:
                busy += b - reach
                reach = b
        row = result.devices.filter(result.devices["device"] == dev).row(0, named=True)
        assert abs(row["busy_us"] - busy) < 1e-6
        assert abs(row["window_us"] - window) < 1e-6
