"""The incident report of one trace, built as a `Report` (traceanalyzer/report.py) and written
by the Markdown renderer (report.md and its pictures) and the HTML renderer (report.html).

Sections: Verdict and Findings first (what a reader of the ticket needs), then the evidence
(Trace, Timeline, Critical path, Stages, Idle by cause, Top gaps, Copies, Syncs, Memory, Roofline),
then Warnings about
the trace itself. A CPU-only trace says so in one line and leaves out the GPU sections.
Every number comes from the one `Session` the report is built from, so the report says exactly
what the commands say with the same options; an analysis that fails leaves a one-line note in
its section instead of stopping the report. Nothing from the trace's metadata is copied
except device names and the distributed rank, and every text goes through `scrub_text` (in the
renderers). A new section is one function here returning blocks: the renderers need no change.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.causes import HINTS
from traceanalyzer.cli.commands.path import shares
from traceanalyzer.render.values import flat, saving_text
from traceanalyzer.report import Block, Code, FindingRow, Findings, Image, Report, Section, Strong, Table, Text, marked
from traceanalyzer.session import Session
from traceanalyzer.units import point_ms
from traceanalyzer.wording import plural

SECTIONS = (
    "Verdict",
    "Findings",
    "Trace",
    "Timeline",
    "Critical path",
    "Stages",
    "Idle by cause",
    "Top gaps",
    "Copies",
    "Syncs",
    "Memory",
    "Roofline",
    "Warnings",
)
CPU_ONLY_SECTIONS = ("Verdict", "Findings", "Trace", "Critical path", "Stages", "Memory", "Warnings")
CPU_ONLY = "CPU-only trace: no GPU activity was recorded, so there is no GPU idle time, copy or kernel to analyse."
CUT_OFF = (
    "No GPU event was read: the file is cut short (see Trace health), so this is not known to be a CPU-only trace."
)
GAP_COLUMNS = ["device", "step", "start_us", "duration_us", "cause", "op", "range", "python_frame", "waited_on"]


def _table(df: pl.DataFrame, whole: bool = True) -> Table:
    return Table(flat(df), whole)


def _image(name: str, png: bytes | None, caption: str) -> list[Block]:
    return [Image(name, png, caption)] if png else []


def _names(ses: Session) -> list[str]:
    """The names the verdict may mention (culprit ops and Python frames): shown as code."""
    c = ses.gaps.culprits
    cols = [x for x in ("op", "python_frame") if x in c.columns]
    return [v for col in cols for v in c.get_column(col).head(50).drop_nulls().to_list()]


def _verdict(ses: Session) -> list[Block]:
    """One or two sentences: how busy the GPU was and why it waited; or that it is CPU-only."""
    gaps = ses.gaps
    if not gaps.has_gpu_work:
        return [Text.of(CUT_OFF if ses.trace.gpu_cut_off else CPU_ONLY)]
    text = ses.verdict.sentence(windows.describe(gaps.window_kind))
    errors = [h for h in ses.health if h.severity == "error"]
    head = (
        (Strong(f"Trace health error ({', '.join(h.check for h in errors)})"), ": the numbers below are unreliable. ")
        if errors
        else ()
    )
    rules = list(dict.fromkeys(f.rule for f in ses.findings if f.severity in ("high", "medium")))
    tail = ". " + (f"Findings: {', '.join(rules)}." if rules else "No finding of high or medium severity.")
    return [Text((*head, *marked(text + tail, _names(ses))))]


def _findings(ses: Session) -> list[Block]:
    """Every finding, by what fixing it would save per step (firm estimates first)."""
    rows = tuple(
        FindingRow(f.severity, f.rule, f.message, f"{f.recommendation} ({saving_text(f)})")
        for f in ses.findings_by_saving
    )
    return [Findings(rows)]


def _critical_path(ses: Session, top: int) -> list[Block]:
    cp = ses.critical_path
    return [
        Text.of(
            "The chain of work and waits that set each step's end (`traceanalyzer path`); the black line on the "
            "timeline above. Work off the path can get faster without the step getting shorter; `traceanalyzer "
            "whatif` replays a change. Share of the step time, over all steps:"
        ),
        _table(shares(cp.by_kind).select("kind", "segments", "duration_us", "share")),
        _table(shares(cp.by_name.head(top)).select("kind", "name", "segments", "duration_us", "share")),
    ]


def _roofline(ses: Session, top: int) -> list[Block]:
    from traceanalyzer.render.roofline_plot import roofline_headline, roofline_png, roofline_table

    r = ses.roofline
    out: list[Block] = [Text.of(roofline_headline(r) + ". Peaks: dense datasheet figures (docs/roofline.md).")]
    if r.ops.height:
        out.append(_table(roofline_table(r.ops.head(top))))
        out += _image("roofline.png", roofline_png(r, os.path.basename(ses.path)), "Roofline")
    return out


def _summary(ses: Session) -> list[Block]:
    trace = ses.trace
    m = trace.meta
    used = trace.gpu.select(pl.col("device").n_unique()).item() if trace.gpu.height else 0
    items: list = [("Trace: ", Code(os.path.basename(trace.path)))]
    if m.devices or used:
        names = sorted({d.name for d in m.devices})
        items.append(
            f"Devices: {', '.join(names) or 'not named'} ({plural(len(m.devices), 'device')} listed; GPU work on {used})"
        )
    else:
        items.append("Devices: none (CPU-only trace)")
    activities = f"{trace.gpu.height:,} GPU " + ("activity" if trace.gpu.height == 1 else "activities")
    items.append(
        f"Span: {point_ms(m.end_ns, m.origin_ns):,.1f} ms; {plural(trace.steps.height, 'profiler step')}; "
        f"{plural(trace.ops.height, 'CPU op')}, {activities}"
    )
    if m.rank is not None:
        items.append(f"Rank {m.rank} of {m.world_size}" + (f" ({m.backend})" if m.backend else ""))
    return [Text(items=tuple((i,) if isinstance(i, str) else i for i in items))]


def _timeline(ses: Session, size: tuple[int, int, int]) -> list[Block]:
    from traceanalyzer.cli.pictures import timeline_picture

    width, height, dpi = size
    pic = timeline_picture(ses, width=width, height=height, dpi=dpi)
    label = pic.window.label
    return [
        Text.of(f"Window: {label}. CPU threads on top, GPU streams below; shaded: GPU idle, coloured by cause."),
        *_image("timeline.png", pic.png, f"Timeline, {label}"),
    ]


def _stages(ses: Session) -> list[Block]:
    from traceanalyzer.render import charts

    r = ses.stages
    gpu = ses.gaps.has_gpu_work
    names = [x for x in r.stages if gpu or x != "gpu_idle"]
    table = r.table
    if not gpu:  # no GPU, so no GPU idle stage
        table = table.drop([c for c in table.columns if c.startswith("gpu_idle")])
    png = charts.stage_bars(r, ses.trace, hide=() if gpu else ("gpu_idle",))
    return [
        Text.of(
            f"Each moment of a step goes to one stage, by priority ({r.view} view): {', '.join(names)}. Times in µs."
        ),
        _table(table),
        *_image("stages.png", png, "Step time by stage"),
    ]


def _idle(ses: Session) -> list[Block]:
    from traceanalyzer.render import charts

    gaps = ses.gaps
    table = gaps.idle_by_cause.with_columns(hint=pl.col("cause").replace_strict(HINTS, default=""))
    return [
        Text.of(
            "GPU idle time (the complement of the union of kernels, memcpys and memsets per device inside the "
            "steps), by what the launching CPU thread was doing."
        ),
        _table(table),
        *_image("gap_histogram.png", charts.gap_histogram(gaps, ses.trace), "Idle gaps by duration and cause"),
    ]


def _meanwhile() -> pl.Expr:
    """What another thread of the process was stuck in meanwhile: often the real culprit."""
    b = pl.col("blocked_thread")
    inner = (
        pl.lit(" (")
        + b.struct.field("op")
        + pl.when(b.struct.field("range").is_not_null())
        .then(pl.lit(" in ") + b.struct.field("range"))
        .otherwise(pl.lit(""))
        + pl.lit(")")
    )
    return (
        pl.when(b.is_not_null())
        .then(
            pl.lit("thread ")
            + b.struct.field("tid").cast(pl.String)
            + pl.lit(" blocked in ")
            + b.struct.field("api")
            + pl.when(b.struct.field("op").is_not_null()).then(inner).otherwise(pl.lit(""))
        )
        .alias("meanwhile")
    )


def _top_gaps(ses: Session, top: int) -> list[Block]:
    gaps = ses.gaps
    table = gaps.gaps.select([c for c in GAP_COLUMNS if c in gaps.gaps.columns] + [_meanwhile()])
    out: list[Block] = [
        Text.of(
            f"Gaps of at least {gaps.options.min_gap_us:g} µs, longest first ({gaps.gaps.height:,} in all); "
            "start_us from the trace start."
        ),
        _table(table.head(top)),
    ]
    if gaps.culprits.height:
        out += [Text.of("Top culprits (cause, op, Python frame):"), _table(gaps.culprits.head(top))]
    return out


def _note_summary_steps(result, top: int) -> list[Block]:
    """The shape copies and syncs share: a note, a summary by site, totals per step."""
    out: list[Block] = [Text.of(result.note)] if result.note else []
    if result.summary.height:
        out.append(_table(result.summary.head(top)))
    if result.per_step.height:
        out += [Text.of("Per step:"), _table(result.per_step)]
    return out


def _copies(ses: Session, top: int) -> list[Block]:
    from traceanalyzer.render import charts

    png = charts.copy_bandwidth(ses.copies, ses.trace)
    return _note_summary_steps(ses.copies, top) + _image("copy_bandwidth.png", png, "Copy bandwidth against size")


def _syncs(ses: Session, top: int) -> list[Block]:
    s = ses.syncs
    out: list[Block] = []
    if not s.note:
        out.append(
            Text.of(
                f"GPU idle caused by syncs (`sync_idle_us`): {s.sync_idle_us:,.0f} µs; CPU time blocked in "
                f"synchronising calls (`blocked_us`): {s.blocked_us:,.0f} µs."
            )
        )
    return out + _note_summary_steps(s, top)


def _memory(ses: Session) -> list[Block]:
    from traceanalyzer.render import charts

    m = ses.memory
    if not m.has_memory:
        return [Text.of(m.note or "no [memory] events in this trace")]
    cols = ["device", "peak_allocated_mb", "peak_at_us", "peak_step", "reserved_at_peak_mb", "max_reserved_mb"]
    table = m.devices.select([c for c in cols if c in m.devices.columns])
    table = table.rename({c: c.removesuffix("_mb") + "_mib" for c in table.columns if c.endswith("_mb")})
    return [
        *([Text.of(m.note)] if m.note else []),
        Text.of("Memory in MiB (1 MiB = 1,048,576 bytes)."),
        _table(table),
        *_image("memory.png", charts.memory_timeline(m, ses.trace), "Memory over time"),
    ]


def _warnings(ses: Session) -> list[Block]:
    """What the reader should know about the trace file itself, apart from the findings."""
    return [Text.bullets(list(ses.trace.warnings) or ["none"])]


def _health(ses: Session) -> Section | None:
    if not any(h.severity != "info" for h in ses.health):
        return None
    items = [
        (
            Strong(f"[{h.severity}] {h.check}"),
            f": {h.message}" + (f" (unreliable: {', '.join(h.unreliable)})" if h.unreliable else ""),
        )
        for h in ses.health
    ]
    return Section("Trace health", blocks=(Text(items=tuple(items)),))


def _guarded(what: str, fn: Callable[[], list[Block]]) -> tuple[Block, ...]:
    try:
        return tuple(fn())
    except Exception as exc:  # noqa: BLE001 - one failing analysis must not lose the report
        return (Text((f"{what} not available: {type(exc).__name__}: {exc}",)),)


def build_report(ses: Session, top: int = 10, width: int = 1600, height: int = 900, dpi: int = 100) -> Report:
    """The incident report of a Session: every section reads the session's results."""
    size = (width, height, dpi)
    parts: dict[str, Callable[[], list[Block]]] = {
        "Verdict": lambda: _verdict(ses),
        "Findings": lambda: _findings(ses),
        "Trace": lambda: _summary(ses),
        "Timeline": lambda: _timeline(ses, size),
        "Critical path": lambda: _critical_path(ses, top),
        "Stages": lambda: _stages(ses),
        "Idle by cause": lambda: _idle(ses),
        "Top gaps": lambda: _top_gaps(ses, top),
        "Copies": lambda: _copies(ses, top),
        "Syncs": lambda: _syncs(ses, top),
        "Memory": lambda: _memory(ses),
        "Roofline": lambda: _roofline(ses, top),
        "Warnings": lambda: _warnings(ses),
    }
    gpu = ses.gaps.has_gpu_work
    health = _health(ses)
    sections = [health] if health else []
    sections += [
        Section(title, blocks=_guarded(title.lower(), fn))
        for title, fn in parts.items()
        if gpu or title in CPU_ONLY_SECTIONS
    ]
    name = os.path.basename(ses.trace.path)
    return Report(
        "report",
        ses.trace.path,
        {},
        tuple(sections),
        {},
        title=f"traceanalyzer report: {name}",
        table_rows=None,
    )


def report_sections(markdown: str) -> list[str]:
    """The section headings of a Markdown report, in order."""
    return [line[3:].strip() for line in markdown.splitlines() if line.startswith("## ")]
