"""The memory timeline is the exact step function of the `[memory]` events (issue #24): change
points kept, decimated only where events crowd into one bucket, never a maximum over empty time."""

from __future__ import annotations

import bisect
import gzip
import json

import polars as pl

from traceanalyzer.load import load
from traceanalyzer.options import Options
from traceanalyzer.session import Session

W0 = "v100_resnet50_dataloader_workers0.pt.trace.json.gz"


def _hand_running_sum(path):
    """(t_ms, bytes allocated on the GPU since the trace start) after each CUDA [memory] event."""
    raw = json.load(gzip.open(path))["traceEvents"]
    timed = [e for e in raw if e.get("ph") == "X" and e.get("cat") != "Trace"]
    origin = min(e["ts"] for e in timed)
    mem = [e for e in raw if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    out, total = [], 0
    for e in mem:  # file order, as the allocator wrote them
        total += e["args"]["Bytes"]
        out.append(((e["ts"] - origin) / 1000, total))
    return sorted(out, key=lambda x: x[0])


def _value_at(points, t_ms):
    k = bisect.bisect_right([p[0] for p in points], t_ms) - 1
    return points[k][1]


def test_workers0_gpu_memory_is_zero_between_steps(SHARED_TRACES):
    path = SHARED_TRACES / W0
    hand = _hand_running_sum(path)
    # By hand: the running sum reaches 0 at 155.669 ms and stays there until 245.204 ms (19.3 MB
    # for 2.2 ms), back to 0 at 247.444 ms, up again at 247.568 ms.
    zero_from = next(t for t, v in hand if 155 < t < 156 and v == 0)
    assert round(zero_from, 3) == 155.669
    assert all(v == 0 for t, v in hand if zero_from <= t < 245.2)
    ses = Session(load(str(path)), Options())
    tl = ses.memory.timeline.filter(pl.col("device") == "cuda:0").sort("t_us")
    pts = [(t / 1000, mb * 1048576) for t, mb in zip(tl["t_us"].to_list(), tl["allocated_mb"].to_list())]
    for t in (155.7, 170.0, 200.0, 230.0, 245.0):
        assert _value_at(pts, t) == 0, t
    assert round(_value_at(pts, 246.0)) == 19_267_584
    assert _value_at(pts, 247.5) == 0
    # No point of the series holds more than the hand sum's largest value in its bucket: the
    # old series said 956.6 MiB from 152 to 241 ms.
    assert not any(150_000 < t < 245_000 and mb > 0 for t, mb in zip(tl["t_us"], tl["allocated_mb"]) if t > 155_700)
    # Change points kept where events are sparse: the drop to 0 and the lone rise at 245.204 ms.
    kept = {round(t / 1000, 3) for t in tl["t_us"].to_list()}
    assert {155.669, 245.204} <= kept


def test_memory_json_timeline_is_the_same_series(SHARED_TRACES):
    from click.testing import CliRunner

    from traceanalyzer.cli import cli

    out = CliRunner().invoke(cli, ["memory", str(SHARED_TRACES / W0), "--format", "json"]).stdout
    tl = [p for p in json.loads(out)["timeline"] if p["device"] == "cuda:0"]
    pts = sorted((p["t_us"] / 1000, p["allocated_bytes"]) for p in tl)
    assert _value_at(pts, 200.0) == 0 and _value_at(pts, 246.0) == 19_267_584
