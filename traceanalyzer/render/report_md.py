"""The incident report: Markdown with its pictures beside it, or one self-contained HTML file.

Sections: Verdict and Findings first (what a reader of the ticket needs), then the evidence
(Trace, Timeline, Stages, Idle by cause, Top gaps, Copies, Syncs, Memory), then Warnings about
the trace itself. A CPU-only trace says so in one line and leaves out the GPU sections.
Every number comes from the one `Session` the report is built from, so the report says exactly
what the commands say with the same options; an analysis that fails leaves a one-line note in
its section instead of stopping the report. Nothing from the trace's metadata is copied
except device names and the distributed rank, and every text goes through `scrub_text`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.analyses.copies import CopiesResult
from traceanalyzer.analyses.gaps import HINTS, GapsResult
from traceanalyzer.analyses.syncs import SyncsResult
from traceanalyzer.redact import scrub_text
from traceanalyzer.render.markdown import table as md_table
from traceanalyzer.render.values import LAUNCH_SHAPES
from traceanalyzer.session import Session
from traceanalyzer.trace import Trace
from traceanalyzer.version import __version__

SECTIONS = (
    "Verdict",
    "Findings",
    "Trace",
    "Timeline",
    "Stages",
    "Idle by cause",
    "Top gaps",
    "Copies",
    "Syncs",
    "Memory",
    "Warnings",
)
CPU_ONLY_SECTIONS = ("Verdict", "Findings", "Trace", "Stages", "Memory", "Warnings")
CPU_ONLY = "CPU-only trace: no GPU activity was recorded, so there is no GPU idle time, copy or kernel to analyse."
GAP_COLUMNS = ["device", "step", "start_us", "duration_us", "cause", "op", "range", "python_frame", "waited_on"]


@dataclass(frozen=True)
class Block:
    """One block of the incident report: a heading, text, table, list or picture."""

    kind: str  # heading | text | table | image | items
    text: str = ""
    table: pl.DataFrame | None = None
    items: tuple[str, ...] = ()
    image: str = ""  # file name in IncidentReport.images


@dataclass
class IncidentReport:
    """The incident report being built: its blocks and its pictures."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    images: dict[str, bytes] = field(default_factory=dict)

    def heading(self, text: str) -> None:
        """Add a section heading."""
        self.blocks.append(Block("heading", text))

    def text(self, text: str) -> None:
        """Add a paragraph."""
        self.blocks.append(Block("text", text))

    def table(self, df: pl.DataFrame) -> None:
        """Add a table (nested columns left out)."""
        self.blocks.append(Block("table", table=_flat(df)))

    def items(self, items: list[str]) -> None:
        """Add a bulleted list."""
        self.blocks.append(Block("items", items=tuple(items)))

    def picture(self, name: str, png: bytes | None, caption: str) -> None:
        """Add a picture (PNG bytes) with its caption; nothing when there is none."""
        if png:
            self.images[name] = png
            self.blocks.append(Block("image", caption, image=name))


def _flat(df: pl.DataFrame) -> pl.DataFrame:
    """Only the columns a table can show (no lists or structs; a grid or block as 128x1x1)."""
    shapes = [c for c in LAUNCH_SHAPES if isinstance(df.schema.get(c), pl.List)]
    df = df.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join("x") for c in shapes)
    keep = [c for c, t in df.schema.items() if not isinstance(t, (pl.List, pl.Struct, pl.Array))]
    return df.select(keep)


def _guard(rep: IncidentReport, what: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - one failing analysis must not lose the report
        rep.text(f"_{what} not available: {type(exc).__name__}: {exc}_")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _verdict(rep: IncidentReport, ses: Session) -> None:
    """One or two sentences: how busy the GPU was and why it waited; or that it is CPU-only."""
    gaps = ses.gaps
    if not gaps.has_gpu_work:
        rep.text(CPU_ONLY)
        return
    v = ses.verdict
    text = v.sentence(windows.describe(gaps.window_kind))
    errors = [h for h in ses.health if h.severity == "error"]
    if errors:
        text = (
            f"**Trace health error ({', '.join(h.check for h in errors)})**: the numbers below are unreliable. " + text
        )
    found = ses.findings
    rules = list(dict.fromkeys(f.rule for f in found if f.severity in ("high", "medium")))
    text += ". " + (f"Findings: {', '.join(rules)}." if rules else "No finding of high or medium severity.")
    rep.text(text)


def _summary(rep: IncidentReport, trace: Trace, gaps: GapsResult) -> None:
    m = trace.meta
    used = trace.gpu["device"].n_unique() if trace.gpu.height else 0
    lines = [f"- Trace: `{os.path.basename(trace.path)}`"]
    if m.devices or used:
        names = sorted({d.name for d in m.devices})
        lines.append(
            f"- Devices: {', '.join(names) or 'not named'} ({_plural(len(m.devices), 'device')} listed; "
            f"GPU work on {used})"
        )
    else:
        lines.append("- Devices: none (CPU-only trace)")
    lines.append(
        f"- Span: {(m.end_ns - m.origin_ns) / 1e6:,.1f} ms; {_plural(trace.steps.height, 'profiler step')}; "
        f"{_plural(trace.ops.height, 'CPU op')}, {_plural(trace.gpu.height, 'GPU activity')}".replace(
            "activitys", "activities"
        )
    )
    if m.rank is not None:
        lines.append(f"- Rank {m.rank} of {m.world_size}" + (f" ({m.backend})" if m.backend else ""))
    rep.text("\n".join(lines))


def _warnings(rep: IncidentReport, trace: Trace) -> None:
    """What the reader should know about the trace file itself, apart from the findings."""
    rep.items(list(trace.warnings) or ["none"])


def _stages(rep: IncidentReport, ses: Session) -> None:
    from traceanalyzer.render import charts

    r = ses.stages
    names = [x for x in r.stages if ses.gaps.has_gpu_work or x != "gpu_idle"]
    rep.text(f"Each moment of a step goes to one stage, by priority ({r.view} view): {', '.join(names)}. Times in µs.")
    table = r.table
    if not ses.gaps.has_gpu_work:  # no GPU, so no GPU idle stage
        table = table.drop([c for c in table.columns if c.startswith("gpu_idle")])
    rep.table(table)
    rep.picture(
        "stages.png",
        charts.stage_bars(r, ses.trace, hide=() if ses.gaps.has_gpu_work else ("gpu_idle",)),
        "Step time by stage",
    )


def _idle(rep: IncidentReport, trace: Trace, gaps: GapsResult) -> None:
    from traceanalyzer.render import charts

    if not gaps.has_gpu_work:
        rep.text(gaps.note or "no GPU work")
        return
    rep.text(
        "GPU idle time (the complement of the union of kernels, memcpys and memsets per device inside the steps), "
        "by what the launching CPU thread was doing."
    )
    rep.table(gaps.idle_by_cause.with_columns(hint=pl.col("cause").replace_strict(HINTS, default="")))
    rep.picture("gap_histogram.png", charts.gap_histogram(gaps, trace), "Idle gaps by duration and cause")


def _top_gaps(rep: IncidentReport, gaps: GapsResult, top: int) -> None:
    if not gaps.has_gpu_work:
        rep.text(gaps.note or "no GPU work")
        return
    rep.text(
        f"Gaps of at least {gaps.options.min_gap_us:g} µs, longest first ({gaps.gaps.height:,} in all); start_us from the trace start."
    )
    b = pl.col("blocked_thread")
    # What another thread of the process was stuck in meanwhile: often the real culprit.
    meanwhile = (
        pl.when(b.is_not_null())
        .then(
            pl.lit("thread ")
            + b.struct.field("tid").cast(pl.String)
            + pl.lit(" blocked in ")
            + b.struct.field("api")
            + pl.when(b.struct.field("op").is_not_null())
            .then(
                pl.lit(" (")
                + b.struct.field("op")
                + pl.when(b.struct.field("range").is_not_null())
                .then(pl.lit(" in ") + b.struct.field("range"))
                .otherwise(pl.lit(""))
                + pl.lit(")")
            )
            .otherwise(pl.lit(""))
        )
        .alias("meanwhile")
    )
    table = gaps.gaps.select([c for c in GAP_COLUMNS if c in gaps.gaps.columns] + [meanwhile])
    rep.table(table.head(top))
    if gaps.culprits.height:
        rep.text("Top culprits (cause, op, Python frame):")
        rep.table(gaps.culprits.head(top))


def _note_summary_steps(rep: IncidentReport, result: CopiesResult | SyncsResult, top: int) -> None:
    """The shape copies and syncs share: a note, a summary by site, totals per step."""
    if result.note:
        rep.text(result.note)
    if result.summary.height:
        rep.table(result.summary.head(top))
    if result.per_step.height:
        rep.text("Per step:")
        rep.table(result.per_step)


def _copies(rep: IncidentReport, ses: Session, top: int) -> None:
    from traceanalyzer.render import charts

    _note_summary_steps(rep, ses.copies, top)
    rep.picture("copy_bandwidth.png", charts.copy_bandwidth(ses.copies, ses.trace), "Copy bandwidth against size")


def _syncs(rep: IncidentReport, ses: Session, top: int) -> None:
    s = ses.syncs
    if not s.note:
        rep.text(
            f"GPU idle caused by syncs (`sync_idle_us`): {s.sync_idle_us:,.0f} µs; CPU time blocked in synchronising "
            f"calls (`blocked_us`): {s.blocked_us:,.0f} µs."
        )
    _note_summary_steps(rep, s, top)


def _memory(rep: IncidentReport, ses: Session) -> None:
    from traceanalyzer.render import charts

    m = ses.memory
    if not m.has_memory:
        rep.text(m.note or "no [memory] events in this trace")
        return
    if m.note:
        rep.text(m.note)
    cols = ["device", "peak_allocated_mb", "peak_at_us", "peak_step", "reserved_at_peak_mb", "max_reserved_mb"]
    table = m.devices.select([c for c in cols if c in m.devices.columns])
    rep.text("Memory in MiB (1 MiB = 1,048,576 bytes).")
    rep.table(table.rename({c: c.removesuffix("_mb") + "_mib" for c in table.columns if c.endswith("_mb")}))
    rep.picture("memory.png", charts.memory_timeline(m, ses.trace), "Memory over time")


def _findings(rep: IncidentReport, ses: Session) -> None:
    found = ses.findings
    rep.items([f"**[{f.severity}] {f.rule}**: {f.message} — {f.recommendation}" for f in found] or ["no rule fired"])


def build_report(ses: Session, top: int = 10, width: int = 1600, height: int = 900, dpi: int = 100) -> IncidentReport:
    """The incident report of a Session: every section reads the session's results."""
    from traceanalyzer.render.timeline import TimelineInputs, render_timeline

    trace = ses.trace
    gaps = ses.gaps
    rep = IncidentReport(f"traceanalyzer report: {os.path.basename(trace.path)}")
    gpu = gaps.has_gpu_work
    if any(h.severity != "info" for h in ses.health):
        rep.heading("Trace health")
        rep.items(
            [
                f"**[{h.severity}] {h.check}**: {h.message}"
                + (f" (unreliable: {', '.join(h.unreliable)})" if h.unreliable else "")
                for h in ses.health
            ]
        )

    def timeline() -> None:
        pic = render_timeline(TimelineInputs.of(ses), width=width, height=height, dpi=dpi)
        rep.text(
            f"Window: {pic.window.label}. CPU threads on top, GPU streams below; shaded: GPU idle, coloured by cause."
        )
        rep.picture("timeline.png", pic.png, f"Timeline, {pic.window.label}")

    parts = (
        ("Verdict", lambda: _verdict(rep, ses)),
        ("Findings", lambda: _findings(rep, ses)),
        ("Trace", lambda: _summary(rep, trace, gaps)),
        ("Timeline", timeline),
        ("Stages", lambda: _stages(rep, ses)),
        ("Idle by cause", lambda: _idle(rep, trace, gaps)),
        ("Top gaps", lambda: _top_gaps(rep, gaps, top)),
        ("Copies", lambda: _copies(rep, ses, top)),
        ("Syncs", lambda: _syncs(rep, ses, top)),
        ("Memory", lambda: _memory(rep, ses)),
        ("Warnings", lambda: _warnings(rep, trace)),
    )
    for title, fn in parts:
        if gpu or title in CPU_ONLY_SECTIONS:
            rep.heading(title)
            _guard(rep, title.lower(), fn)
    return rep


def to_markdown(rep: IncidentReport, image_prefix: str = "") -> str:
    """The report as Markdown, pictures referenced by file name."""
    lines = [f"# {rep.title}", "", f"_traceanalyzer {__version__}_", ""]
    for b in rep.blocks:
        if b.kind == "heading":
            lines += [f"## {b.text}", ""]
        elif b.kind == "text":
            lines += [b.text, ""]
        elif b.kind == "table" and b.table is not None:
            lines += md_table(b.table) + [""]
        elif b.kind == "items":
            lines += [f"- {i}" for i in b.items] + [""]
        elif b.kind == "image":
            lines += [f"![{b.text}]({image_prefix}{b.image})", ""]
    return scrub_text("\n".join(lines).rstrip() + "\n")


def to_html(rep: IncidentReport) -> str:
    """One self-contained page: the images inline as base64 data URIs (see report_html)."""
    from traceanalyzer.render.report_html import to_html as html

    return html(rep)


def write_report(rep: IncidentReport, directory: str, html_too: bool = False) -> list[str]:
    """report.md and its pictures in `directory` (and report.html when asked); returns the paths."""
    from traceanalyzer.render.output import write_atomic

    written = []
    for name, png in rep.images.items():
        p = os.path.join(directory, name)
        write_atomic(p, png)
        written.append(p)
    p = os.path.join(directory, "report.md")
    write_atomic(p, to_markdown(rep))
    written.append(p)
    if html_too:
        p = os.path.join(directory, "report.html")
        write_atomic(p, to_html(rep))
        written.append(p)
    return written


def report_sections(markdown: str) -> list[str]:
    """The section headings of a Markdown report, in order."""
    return [line[3:].strip() for line in markdown.splitlines() if line.startswith("## ")]
