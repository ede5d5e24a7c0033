"""What a timeline picture shows, before any drawing: the window and its time axis in pixel
columns, the lanes, the gap labels, the colours. `timeline` draws it.

The events and their bars are prepared a floor above (`traceanalyzer.cli.pictures`): events
narrower than a pixel are merged there per pixel column (`TimeAxis.columns`, then the one
interval merge of `analyses.intervals`), so the cost of drawing depends on the picture's width,
not on the number of events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyzer.causes import COLOURS, WAITED_ON
from traceanalyzer.errors import UsageError
from traceanalyzer.redact import scrub_text
from traceanalyzer.trace import Trace
from traceanalyzer.units import point_ms

# Colours: GPU work kinds, CPU activity kinds and gap causes. A cause shares the colour of the
# CPU activity that explains it (data_loading = DataLoader ranges, sync = sync calls).
KIND_COLORS = {
    "kernel": "#1f5fbf",
    "memcpy": "#2ca02c",
    "memset": "#9467bd",
    "cpu_op": "#a0a0a0",
    "data_loading": "#ff7f0e",
    "sync": "#d62728",
}
KIND_LABELS = {
    "kernel": "kernel",
    "memcpy": "memcpy",
    "memset": "memset",
    "cpu_op": "CPU op (top level)",
    "data_loading": "DataLoader range",
    "sync": "sync call (CPU blocked)",
}
CAUSE_COLORS = COLOURS  # the registry's colours (traceanalyzer.causes), in its order
# Causes the palette does not know yet get one of these, the same one for the same name.
FALLBACK_COLORS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
GAP_ALPHA = 0.35


def cause_color(cause: str | None) -> str:
    """The colour of a gap cause; a cause not in `CAUSE_COLORS` gets a stable fallback."""
    if cause in CAUSE_COLORS:
        return CAUSE_COLORS[cause]
    import zlib

    return FALLBACK_COLORS[zlib.crc32(str(cause).encode()) % len(FALLBACK_COLORS)]


def cause_order(present: list[str]) -> list[str]:
    """Causes in the palette's order, then any unknown ones by name."""
    known = [c for c in CAUSE_COLORS if c in present]
    return known + sorted(c for c in set(present) if c not in CAUSE_COLORS)


MAX_CPU_LANES = 4
MAX_GPU_LANES = 8
LABELLED_GAPS = 4


@dataclass(frozen=True)
class Window:
    """The time window a timeline shows, with its label."""

    start_ns: int
    end_ns: int
    label: str  # "step 9 (slowest of 6)", "12.0-30.0 ms"
    step: int | None = None


# The plot's fixed margins in pixels: lane names on the left; the title above (the gap labels'
# strip and the step names come on top of it); the time axis and the legend below.
LEFT_PX, RIGHT_PX, TOP_PX, BOTTOM_PX = 170, 20, 64, 118
RUN_JOIN_PX = 3  # blocking calls of one API less than this many pixels apart are named as one run


@dataclass(frozen=True)
class TimeAxis:
    """The time axis of a picture `width` pixels wide showing a window: the plot spans the
    window and 1% more on either side, `plot_w` pixel columns of `ns_per_px` each from `lo_ns`."""

    width: int
    lo_ns: float
    hi_ns: float
    ns_per_px: float
    plot_w: int

    @classmethod
    def of(cls, w: Window, width: int) -> TimeAxis:
        """The axis of window `w` in a picture `width` pixels wide."""
        plot_w = max(width - LEFT_PX - RIGHT_PX, 50)
        pad = (w.end_ns - w.start_ns) * 0.01
        lo_ns, hi_ns = w.start_ns - pad, w.end_ns + pad
        return cls(width, lo_ns, hi_ns, (hi_ns - lo_ns) / plot_w, plot_w)

    def columns(self, df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
        """Intervals (by..., ts_ns, end_ns) -> (by..., px0, px1): the pixel columns each one
        touches, counted from the plot's left edge (px1 exclusive), at least one column wide."""
        lo = int(self.lo_ns)
        return df.select(
            *by,
            px0=((pl.col("ts_ns") - lo) / self.ns_per_px).floor().cast(pl.Int64),
            px1=((pl.col("end_ns") - lo) / self.ns_per_px).ceil().cast(pl.Int64),
        ).with_columns(px1=pl.max_horizontal("px1", pl.col("px0") + 1))


@dataclass(frozen=True)
class TimelineInputs:
    """Everything a timeline draws, prepared a floor above from a Session
    (`traceanalyzer.cli.pictures.timeline_inputs`): the window and its axis, the events in the
    window, their bars merged per pixel column, the runs of blocking calls named on their lane."""

    trace: Trace  # its metadata, steps (the dashed lines) and runtime calls (which threads get a lane)
    gaps: Any  # analyses.gaps.GapsResult: all_gaps, all_gaps_ns, has_gpu_work
    main_thread: tuple[int, int] | None
    window: Window
    axis: TimeAxis
    cpu: pl.DataFrame  # pid, tid, kind (cpu_op | data_loading | sync), ts_ns, end_ns in the window
    gpu: pl.DataFrame  # device, stream, kind, ts_ns, end_ns in the window
    cpu_bars: pl.DataFrame  # pid, tid, kind, px0, px1: `cpu` merged per pixel column (px1 exclusive)
    gpu_bars: pl.DataFrame  # device, stream, kind, px0, px1
    call_runs: pl.DataFrame  # blocking calls in the window, in runs (cpu_activity.call_runs): name, calls
    path: pl.DataFrame | None = None  # critical-path segments (analyses.critical_path), drawn as a line


@dataclass(frozen=True)
class Lane:
    """One horizontal lane of a timeline: a CPU thread or a GPU stream."""

    key: tuple  # ("cpu", pid, tid) or ("gpu", device, stream)
    label: str
    index: int  # 0 = top


@dataclass(frozen=True)
class Layout:
    """Where things landed in the picture, for tests and for callers that add to it: pixel
    coordinates have their origin at the picture's top-left corner."""

    width_px: int
    height_px: int
    axes_px: tuple[float, float, float, float]  # left, top, right, bottom
    xlim_ms: tuple[float, float]
    lanes: tuple[Lane, ...]
    gpu_lanes_px: tuple[float, float] | None  # top, bottom of the GPU lanes band

    def x_px(self, ms: float) -> float:
        """The pixel column of a time (ms from the trace start)."""
        left, _, right, _ = self.axes_px
        a, b = self.xlim_ms
        return left + (ms - a) / (b - a) * (right - left)

    def lane_px(self, key: tuple) -> tuple[float, float]:
        """top, bottom pixel rows of a lane's bar."""
        _, top, _, bottom = self.axes_px
        n = len(self.lanes)
        lane = next(x for x in self.lanes if x.key == key)
        per = (bottom - top) / n
        return top + (lane.index + 0.1) * per, top + (lane.index + 0.9) * per


@dataclass(frozen=True)
class Picture:
    """A drawn picture: its bytes in `fmt` (png, svg or pdf), where things landed, its window."""

    data: bytes
    layout: Layout
    window: Window
    extras: dict[str, Any] = field(default_factory=dict)
    fmt: str = "png"

    @property
    def png(self) -> bytes:
        """The bytes of a PNG picture."""
        if self.fmt != "png":
            raise ValueError(f"this picture is {self.fmt}, not png")
        return self.data


# -- data preparation (pure polars) -----------------------------------------------------------


def choose_window(
    trace: Trace,
    step: int | None = None,
    start_ms: float | None = None,
    end_ms: float | None = None,
    windows: pl.DataFrame | None = None,
    steady_steps: tuple[int, ...] | None = None,
) -> Window:
    """--step N, or --start/--end in ms from the trace start, or by default the slowest step of
    the steady state (`steady_steps`: the steps the averages count, no warm-up step and none in
    the start-up; any step when none is left); without ProfilerStep the one window of `windows`
    (the GPU work's span, as every analysis uses), else the whole trace."""
    origin = trace.meta.origin_ns
    if start_ms is not None or end_ms is not None:
        a = origin + int(round((start_ms or 0.0) * 1e6))
        b = origin + int(round(end_ms * 1e6)) if end_ms is not None else trace.meta.end_ns
        if b <= a:
            raise UsageError(
                trace.path,
                f"empty window: --end ({point_ms(b, origin):g} ms) is not after --start ({point_ms(a, origin):g} ms)",
            )
        return Window(a, b, f"{point_ms(a, origin):,.1f}–{point_ms(b, origin):,.1f} ms")
    steps = trace.steps
    if step is not None:
        row = steps.filter(pl.col("step") == step)
        if row.is_empty():
            have = ", ".join(str(s) for s in steps["step"].to_list()) or "none"
            raise UsageError(trace.path, f"no ProfilerStep#{step} in this trace (steps: {have})")
        r = row.row(0, named=True)
        return Window(r["start_ns"], r["end_ns"], f"step {step}", step)
    if steps.height:
        steady = steps if steady_steps is None else steps.filter(pl.col("step").is_in(list(steady_steps)))
        pool = steady if steady.height else steps
        r = pool.with_columns(_d=pl.col("end_ns") - pl.col("start_ns")).sort(["_d", "step"], descending=[True, False])
        r = r.row(0, named=True)
        if steps.height == 1:
            label = f"step {r['step']}"
        elif pool.height < steps.height:
            label = f"step {r['step']} (slowest of {pool.height} in the steady state)"
        else:
            label = f"step {r['step']} (slowest of {steps.height})"
        return Window(r["start_ns"], r["end_ns"], label, r["step"])
    if trace.meta.end_ns <= origin:
        return Window(origin, origin + 1_000_000, "empty trace")
    if windows is not None and windows.height == 1:  # the one window every analysis uses without steps
        w = windows.row(0, named=True)
        return Window(w["start_ns"], w["end_ns"], "the trace as one step (no ProfilerStep)")
    return Window(origin, trace.meta.end_ns, "the whole trace (no ProfilerStep)")


def in_window(df: pl.DataFrame, w: Window) -> pl.DataFrame:
    """The rows of an event table that overlap the window."""
    return df.filter((pl.col("end_ns") > w.start_ns) & (pl.col("ts_ns") < w.end_ns))


def choose_lanes(inputs: TimelineInputs) -> list[Lane]:
    """CPU threads that matter (the main thread first, then threads with data loading,
    sync calls or launches, by time), then GPU streams by device and stream."""
    trace, w, cpu, gpu = inputs.trace, inputs.window, inputs.cpu, inputs.gpu
    main = inputs.main_thread
    span = max(w.end_ns - w.start_ns, 1)
    clipped = (pl.min_horizontal("end_ns", pl.lit(w.end_ns)) - pl.max_horizontal("ts_ns", pl.lit(w.start_ns))).clip(0)
    score = cpu.group_by("pid", "tid").agg(
        busy=clipped.filter(pl.col("kind") == "cpu_op").sum(),
        special=clipped.filter(pl.col("kind") != "cpu_op").sum(),
    )
    launches = (
        in_window(trace.runtime, w).group_by("pid", "tid").agg(launches=pl.len())
        if trace.runtime.height
        else pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "launches": pl.UInt32})
    )
    score = score.join(launches, on=["pid", "tid"], how="full", coalesce=True).fill_null(0)
    score = score.filter((pl.col("special") > 0) | (pl.col("busy") > 0.01 * span)).sort(
        ["special", "busy", "launches"], descending=True
    )
    threads = [(r["pid"], r["tid"]) for r in score.iter_rows(named=True)]
    if main is not None:
        threads = [main] + [t for t in threads if t != main]
    threads = threads[:MAX_CPU_LANES]
    lanes: list[Lane] = []
    for pid, tid in threads:
        role = "\n(launching thread)" if main == (pid, tid) else ""
        lanes.append(Lane(("cpu", pid, tid), f"CPU thread {tid}{role}", len(lanes)))
    streams = gpu.group_by("device", "stream").agg(busy=(pl.col("end_ns") - pl.col("ts_ns")).sum())
    streams = streams.sort("busy", descending=True).head(MAX_GPU_LANES).sort("device", "stream")
    for r in streams.iter_rows(named=True):
        lanes.append(Lane(("gpu", r["device"], r["stream"]), f"GPU {r['device']} stream {r['stream']}", len(lanes)))
    return lanes


def short_text(s: str | None, n: int = 48) -> str:
    """`s` in at most `n` characters, cut in the middle (the function at the end stays)."""
    if not s:
        return ""
    from traceanalyzer.render.fit import middle_ellipsis

    return middle_ellipsis(scrub_text(str(s)), n)


def window_idle(gaps: pl.DataFrame, a_us: float, b_us: float) -> pl.DataFrame:
    """Gaps overlapping [a_us, b_us) clipped to it: start_us, duration_us are the visible part
    (a gap that began before the window counts from the window's start)."""
    if gaps.is_empty():
        return gaps
    end = pl.col("start_us") + pl.col("duration_us")
    return gaps.filter((pl.col("start_us") < b_us) & (end > a_us)).with_columns(
        start_us=pl.max_horizontal(pl.col("start_us"), pl.lit(a_us)),
        duration_us=pl.min_horizontal(end, pl.lit(b_us)) - pl.max_horizontal(pl.col("start_us"), pl.lit(a_us)),
    )


def place_labels(spans: list[tuple[float, float]], lo: float, hi: float, rows: int) -> list[tuple[float, int] | None]:
    """Positions for labels `spans` (wanted centre, width; same unit as lo..hi): the centre
    moved so the label stays inside [lo, hi], and a row (0 = nearest the data) where it overlaps
    no label already placed; None when no row has room. Placed in the given order."""
    taken: list[list[tuple[float, float]]] = [[] for _ in range(rows)]
    out: list[tuple[float, int] | None] = []
    for centre, w in spans:
        w = min(w, hi - lo)
        c = min(max(centre, lo + w / 2), hi - w / 2)
        a, b = c - w / 2, c + w / 2
        for r in range(rows):
            if all(b <= x or a >= y for x, y in taken[r]):
                taken[r].append((a, b))
                out.append((c, r))
                break
        else:
            out.append(None)
    return out


def gap_label(r: dict[str, Any]) -> str:
    """The label of a gap: its cause, duration, op, Python line and what another thread was blocked in."""
    dur = r["duration_us"]
    head = f"{r['cause']} · {dur / 1000:,.1f} ms" if dur >= 1000 else f"{r['cause']} · {dur:,.0f} µs"
    lines = [head]
    what = r.get("op") or r.get("range")
    if r["cause"] in WAITED_ON and r.get("waited_on"):
        lines.append(short_text("waited on " + r["waited_on"]))
    if r["cause"] == "sync" and r.get("sync_api"):
        lines.append(short_text("CPU blocked in " + r["sync_api"]))
    elif r.get("call_api") and r.get("call_us"):
        lines.append(short_text(f"in {r['call_api']} ({r['call_us'] / 1000:,.1f} ms)"))
    if what:
        lines.append(short_text(what))
    if r.get("python_frame"):
        lines.append(short_text(r["python_frame"]))
    other = r.get("blocked_thread")
    if isinstance(other, dict) and other.get("api"):
        where = ", ".join(x for x in (other.get("op"), other.get("range")) if x)
        lines.append(
            short_text(
                f"meanwhile CPU {other.get('tid')} blocked in {other['api']}" + (f" ({where})" if where else ""), 60
            )
        )
    return "\n".join(lines)
