"""One screen: devices, steps, GPU busy share, stage breakdown, idle by cause with the top
culprits, the two sync figures side by side, top ops and kernels, the ops furthest below the
roofline, and every finding.
`--fail-on RULE` (repeatable, any rule id of `traceanalyzer rules`) exits 1 when that finding
fires (for CI); 0 otherwise; 2 for bad input. A DIRECTORY of per-rank files gives the
cross-rank summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click
import polars as pl

from traceanalyzer.analyses import windows
from traceanalyzer.cli import opening
from traceanalyzer.cli.commands.common import (
    emit,
    findings_payload,
    findings_table,
    findings_text,
    open_session,
    with_health,
)
from traceanalyzer.cli.options import build_options, fail_on_option, option_flags, output_options
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.findings import Finding
from traceanalyzer.patterns import PROFILER_STEP
from traceanalyzer.report import Report, Section
from traceanalyzer.reprs import Unread
from traceanalyzer.session import Session
from traceanalyzer.wording import plural, span

GROUPS = (
    "patterns",
    "gaps",
    "syncs",
    "copies",
    "steps",
    "stages",
    "kernels",
    "memory",
    "roofline",
    "findings",
    "materiality",
    "health",
    "path",
    "ranks",
)
SCREEN_ROWS = 5
# Columns of the Trace that nothing read after the roofline, the kernel table and the health
# checks reads (the dependency model, the gap analyses, the rules, stages and ops): the
# argument types and values (the work model's), the external ids (the health checks'), the
# launch grid and block (the kernel table's) and the CUDA graph ids. Dropped before the model is
# built (311 MB: 15 MB under the peak; 20 MB after `gaps` with the cache), through `gaps._narrow`.
UNREAD = {
    "ops": ("input_type", "concrete_inputs", "external_id"),
    "runtime": ("external_id",),
    "gpu": ("grid", "block", "graph_id"),
}

# What the syncs, the rules and the report read of the gap results once the gaps are computed:
# of every gap, its duration, cause, phase and call (`GapsResult.idle_ns`, the allocator-churn
# rule); of the classified pieces, their device, step, bounds and sync call (the syncs' bubbles,
# `syncs.charged_gaps`; the copy rule's idle while a copy blocked, `gpu_time.idle_within`).
# 311 MB: 12 + 14 MB of 85 k rows -> 3 + 3, held beside the dependency model while the syncs are
# built and the rules replay on it (`_narrow_gap_results`).
GAPS_READ = ("duration_ns", "cause", "phase", "call_api")
PIECES_READ = ("device", "step", "start_ns", "end_ns", "sync_call")


def _narrow_gap_results(ses: Session) -> None:
    """The Session's gaps and classified pieces with only the columns the syncs, the rules and
    the report read (`GAPS_READ`, `PIECES_READ`), and its CPU activity without the layer unions
    once nothing is left to read them. The gaps first: the classified pieces, when the cache
    holds them and the syncs or the rules will read them, are read from it only then. A result
    neither computed nor read from the cache is not made for this. With a cache, the store is
    handed the whole results first (a later `gaps` prints every column): a result read from it
    stays as it is there."""
    d, gpu = ses.__dict__, ses.trace.has_gpu_work
    if "gaps" in d and gpu:
        _replace(ses, "gaps", lambda g: dataclasses.replace(g, all_gaps_ns=g.all_gaps_ns.select(GAPS_READ)))
    if gpu and not (ses.kept("syncs") and ses.kept("findings")):
        ses.classified  # noqa: B018 - what the syncs and the copy rule read
    if "classified" in d:
        _replace(ses, "classified", lambda c: dataclasses.replace(c, pieces=c.pieces.select(PIECES_READ)))
    # The CPU activity's layer unions serve the model's build and the classification only: once
    # both are done, the blocking calls and the data-loading ranges are all that is read of it.
    if "activity" in d and "dependency_model" in d and ("classified" in d or not gpu):
        gone = Unread("CpuActivity's layer unions (summary let them go once the model and the gaps were built)")
        _replace(ses, "activity", lambda a: dataclasses.replace(a, blocked=gone, unions=gone, runtime_other=gone))


def _replace(ses: Session, name: str, narrow: Callable[[Any], Any]) -> None:
    """`narrow(result)` as the Session's result `name` from now on (no Session API replaces a
    result: this is the command's own memory), the whole one handed to the store first. No
    local name holds the whole one past this call: it goes before the next is read."""
    if ses.store is not None:
        ses.store.put(name, ses.__dict__[name])
    ses.__dict__[name] = narrow(ses.__dict__[name])


def _devices(ses: Session) -> pl.DataFrame:
    meta = pl.DataFrame(
        [
            {
                "device": d.id,
                "name": d.name,
                "sms": d.sm_count,
                "memory_gib": (d.total_memory_bytes or 0) / 2**30 or None,
                "memory_bytes": d.total_memory_bytes,
            }
            for d in ses.trace.meta.devices
        ],
        schema={
            "device": pl.Int64,
            "name": pl.String,
            "sms": pl.Int64,
            "memory_gib": pl.Float64,
            "memory_bytes": pl.Int64,
        },
    )
    g = ses.gaps
    if g.has_gpu_work and g.devices.height:
        busy = g.devices.select("device", "window_us", "busy_us", "busy_share")
        return busy.join(meta, on="device", how="left").select(
            "device", "name", "sms", "memory_gib", "memory_bytes", "window_us", "busy_us", "busy_share"
        )
    return meta


def _sync_figures(ses: Session) -> pl.DataFrame:
    """The two sync quantities, side by side: they differ, and both matter. Only the GPU idle is
    a share of the GPU window; the blocked time is CPU time summed over threads, which can
    exceed any one window (two threads blocked at once), so it gets no share."""
    s = ses.syncs
    window = ses.gaps.window_us
    return pl.DataFrame(
        {
            "quantity": ["sync_idle_us", "blocked_us"],
            "meaning": [
                "GPU idle caused by syncs (gaps of cause sync: bubbles + idle while blocked)",
                "CPU time blocked in synchronising calls, summed over threads (no share: not one window's time)",
            ],
            "us": [s.sync_idle_us, s.blocked_us],
            "share_of_gpu_window": [s.sync_idle_us / window if window else None, None],
        },
        schema_overrides={"share_of_gpu_window": pl.Float64},
    )


def _headline(ses: Session, findings: list[Finding]) -> str:
    names = {d.id: d.name for d in ses.trace.meta.devices}
    used = windows.devices(ses.trace)
    label = sorted({names.get(d, f"device {d}") for d in used})
    parts = (
        [
            plural(len(used), "GPU")
            + " with work"
            + (f" ({', '.join(label)})" if label else "")
            + f" of {len(names)} listed"
        ]
        if used
        else ["no GPU event read (the file is cut short)" if ses.trace.gpu_cut_off else "CPU-only trace"]
    )
    st = ses.steps
    if st.window_kind == "steps":
        parts.append(f"{plural(st.count, 'step')}, mean {st.mean_us:,.0f} µs, median {st.median_us:,.0f} µs")
    else:
        parts.append("no ProfilerStep (the trace counts as one step)")
    g = ses.gaps
    busy = g.busy_share
    where = "the profiled steps" if g.window_kind == "steps" else "the GPU span"
    if busy is None:
        parts.append("GPU time unknown" if ses.trace.gpu_cut_off else "no GPU work")
    else:
        parts.append(f"GPU busy {busy:.1%} of {g.window_us / 1000:,.1f} ms ({where})")
        if g.startup_window_us and g.steady_busy_share is not None:
            parts.append(
                f"{g.steady_busy_share:.1%} of the {span(g.steady_window_us)} steady state after "
                f"{span(g.startup_window_us)} of start-up"
            )
    parts.append("findings: " + (", ".join(dict.fromkeys(f.rule for f in findings)) if findings else "none"))
    return "; ".join(parts)


def summary_report(ses: Session, top: int, th: dict, lean: bool = False) -> Report:
    """The `summary` Report of one trace. `lean` (the command, whose Session ends with it): the
    building blocks go as soon as nothing the report prints reads them (`Session.release`), so
    the Session cannot answer for the critical path's segments, the CPU activity or the
    classified pieces afterwards."""
    # Here, not at the top: `summary DIR` never reads them, and the critical path's modules load
    # numpy (~0.1 CPU-s of a directory summary's start-up).
    from traceanalyzer.cli.commands.path import headline as path_headline
    from traceanalyzer.cli.commands.path import shares
    from traceanalyzer.cli.commands.stages import average_table, stages_payload
    from traceanalyzer.render.roofline_plot import roofline_headline, roofline_table

    rows = top if top and top < SCREEN_ROWS else SCREEN_ROWS
    # Memory, in order (measured at 311 MB, docs/summary.md): first what the rules read besides
    # the gap results, while only the Trace is held: the roofline's shapes (+38 MB of transient),
    # the kernel table and the health checks, after which the columns only they read go
    # (`UNREAD`); then the critical path, as the dependency model under it is the
    # largest thing a summary builds (+100 MB of transient, 65 held) and built while little else
    # is held it raises the peak least; its shares read, its segments go (28 MB); then the
    # gaps, narrowed to what the rest reads, and the findings, their savings replayed on it. The
    # model goes once they are read; the stage breakdown and the op table (small results, their
    # transients far under that peak) come after, on what is left.
    ses.roofline, ses.kernels, ses.health  # noqa: B018 - computed here for the peak memory
    if lean and not (ses.kept("critical_path") and ses.kept("findings")):
        # With a cache too, where a Trace read from it is read in full first: the model and the
        # rules read nearly every table anyway. Not when both are cached (nothing below would).
        from traceanalyzer.cli.commands.gaps import _narrow

        _narrow(ses, UNREAD, cached=True)
    cp = ses.critical_path
    path_text, path_kinds, path_names = path_headline(cp), shares(cp.by_kind), shares(cp.by_name)
    if lean:  # the path's segments (28 MB): the shares above are all the summary prints of them
        del cp
        ses.release("critical_path")
    if lean:
        # The gaps (the report prints them) before the syncs and the rules, which read a few
        # columns of the gaps and of the classified pieces: the rest goes before the syncs are
        # built and the rules replay their what-ifs on the model (311 MB, live: the gaps +40
        # held on the model's 274, +16 once narrowed).
        ses.gaps  # noqa: B018
        _narrow_gap_results(ses)
    findings = ses.findings_by_saving  # what fixing each would save per step, largest first
    ses.release("dependency_model")  # the path and the savings are read: nothing below replays
    ses.stages, ses.ops  # noqa: B018 - computed here for the peak memory
    if lean:
        # Of what the report prints, only the gaps, syncs and stages read the CPU activity or the
        # classified pieces: at hand now (the findings read the first two, unless they came from
        # the cache), nothing below reads those blocks.
        ses.gaps, ses.syncs  # noqa: B018
        ses.release("activity", "classified")
    g = ses.gaps
    ops = ses.ops.table.filter(~pl.col("name").str.contains(PROFILER_STEP))
    kern = ses.kernels.table.select("kernel", "calls", "total_us", "share", "tensor_cores", "launched_by")
    stages = average_table(ses.stages)
    if not g.has_gpu_work and "stage" in stages.columns:  # no GPU, so no GPU idle stage
        stages = stages.filter(pl.col("stage") != "gpu_idle")
    idle = g.idle_by_cause if g.has_gpu_work else pl.DataFrame()
    culprits = g.culprits if g.has_gpu_work else pl.DataFrame()
    per = "step" if ses.stages.window_kind == "steps" else "trace"
    roof = ses.roofline
    sections = [
        Section("Devices", _devices(ses).drop("memory_bytes"), export=_devices(ses).drop("memory_gib"))
        if g.has_gpu_work
        else Section(
            "Devices",
            text="none read: the file is cut short before any GPU event (see the trace health)"
            if ses.trace.gpu_cut_off
            else "none: a CPU-only trace (no GPU activity recorded)",
        ),
        Section(
            f"Steps ({ses.step_source})",
            ses.steps.table.select("step", "kind", "duration_us", "busy_share", "kernel_share", "outlier", "warmup"),
        ),
        Section(f"Stages ({ses.stages.view} view, µs per {per})", stages, whole=True),
        Section("Critical path: share of step time by kind", path_kinds.head(rows), text=path_text),
    ]
    if g.has_gpu_work:
        sections += [
            Section("GPU idle by cause", idle, whole=True),
            Section("Top idle culprits", culprits.head(rows)),
            Section("Syncs: GPU idle they caused and CPU time they blocked", _sync_figures(ses)),
        ]
    sections += [
        Section(
            "Top ops by total GPU time",
            ops.select("name", "calls", "total_cpu_us", "self_gpu_us", "total_gpu_us").head(rows),
        ),
        Section("Top kernels", kern.head(rows)),
        Section(
            "Roofline: ops by GPU time left below the roof (`roofline` for all)",
            roofline_table(roof.ops.head(rows)),
            text=roofline_headline(roof),
            export=roof.ops,
        ),
        Section("Findings", findings_table(findings), text=findings_text(findings), main=True, show_table=False),
    ]
    payload = {
        "devices": _devices(ses).drop("memory_gib"),
        "gpu_busy_share": g.busy_share,
        "window": g.window_kind,
        "steps": {
            "step_source": ses.step_source,
            "count": ses.steps.count,
            "by_kind": ses.steps.by_kind,
            "profiler_steps": ses.trace.steps.height,
            "mean_us": ses.steps.mean_us,
            "median_us": ses.steps.median_us,
            "table": ses.steps.table,
            "caveats": [{"kind": c.kind, "message": c.message, "evidence": c.evidence} for c in ses.steps.caveats],
        },
        "stages": stages_payload(ses.stages),
        "idle_by_cause": idle,
        "culprits": culprits.head(top) if top else culprits,
        "syncs": {"sync_idle_us": ses.syncs.sync_idle_us, "blocked_us": ses.syncs.blocked_us},
        "communication": lambda: ses.communication.per_step,  # JSON only: not computed for a table
        "top_ops": ops.head(top) if top else ops,
        "top_kernels": kern.head(top) if top else kern,
        "critical_path": {"by_kind": path_kinds, "by_name": path_names.head(top) if top else path_names},
        "roofline": {
            "modelled_share": roof.modelled_share,
            "device": roof.devices,
            "ops": roof.ops.head(top) if top else roof.ops,
        },
        "findings": findings_payload(findings),
    }
    report = Report(
        "summary", ses.path, th, tuple(sections), payload, headline=_headline(ses, findings), warnings=ses.warnings
    )
    return with_health(report, ses, "busy_share", "gap_causes", "kernel_time", "steps")


@click.command("summary")
@click.argument("trace", type=click.Path())
@option_flags(*GROUPS)
@fail_on_option()
@output_options
def command(trace: str, fail_on: tuple[str, ...], fmt: str | None, top: int, output: str | None, **kwargs) -> None:
    """One screen: devices, steps, GPU busy, stages, idle causes, syncs, top ops and kernels, findings."""
    options = build_options(kwargs, *GROUPS)
    if opening.is_directory(trace):  # a directory of per-rank files: the cross-rank report
        from traceanalyzer.cli.commands import directory as rank_dir

        rep = rank_dir.dir_report("summary", trace, options, top, GROUPS, fail_on=fail_on)
        emit(rep, fmt, output)
        rank_dir.check_fail_on(rep, fail_on)  # any rank, or the job
        return
    ses = open_session(trace, options)
    th = {**options.thresholds(GROUPS), "fail_on": list(fail_on)}
    emit(summary_report(ses, top, th, lean=True), fmt, output)
    failed = sorted({f.rule for f in ses.findings} & set(fail_on))
    if failed:
        # A check the user asked for failed: exit 1 through cli.main, without an 'error:' prefix.
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {', '.join(failed)}")
