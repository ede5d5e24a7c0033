"""One screen: devices, steps, GPU busy share, stage breakdown, idle by cause with the top
culprits, top ops and kernels, and findings. `--fail-on RULE` (repeatable) exits 1 when that
finding fires (for CI); 0 otherwise; 2 for bad input.
"""

from __future__ import annotations

import click
import polars as pl

from traceanalyzer.analyses.findings import RULE_IDS, Finding, Overview, evaluate
from traceanalyzer.analyses.ops import analyse_ops
from traceanalyzer.analyses.stages import read_mapping
from traceanalyzer.cli_options import build, dataclass_options, output_options
from traceanalyzer.commands import ranks
from traceanalyzer.commands.common import emit, load_trace
from traceanalyzer.commands.stages import average_table, stages_payload
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.options import FindingOptions, GapOptions, KernelOptions, StepOptions, thresholds
from traceanalyzer.report import Report, Section

SCREEN_ROWS = 5


def _devices(ov: Overview) -> pl.DataFrame:
    meta = pl.DataFrame(
        [
            {
                "device": d.id,
                "name": d.name,
                "sms": d.sm_count,
                "memory_gib": (d.total_memory_bytes or 0) / 2**30 or None,
            }
            for d in ov.trace.meta.devices
        ],
        schema={"device": pl.Int64, "name": pl.String, "sms": pl.Int64, "memory_gib": pl.Float64},
    )
    g = ov.gaps
    if g.has_gpu_work and g.devices.height:
        busy = g.devices.select("device", "window_us", "busy_us", "busy_share")
        return busy.join(meta, on="device", how="left").select(
            "device", "name", "sms", "memory_gib", "window_us", "busy_us", "busy_share"
        )
    return meta


def findings_table(findings: list[Finding]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rule": [f.rule for f in findings],
            "severity": [f.severity for f in findings],
            "message": [f.message for f in findings],
            "recommendation": [f.recommendation for f in findings],
        },
        schema={"rule": pl.String, "severity": pl.String, "message": pl.String, "recommendation": pl.String},
    )


def _findings_text(findings: list[Finding]) -> str:
    if not findings:
        return "none fired (`traceanalyzer rules` lists the rules and thresholds)"
    return "\n".join(f"[{f.severity}] {f.rule}: {f.message}\n    -> {f.recommendation}" for f in findings)


def _headline(ov: Overview, findings: list[Finding]) -> str:
    names = {d.id: d.name for d in ov.trace.meta.devices}
    used = sorted(ov.trace.gpu["device"].drop_nulls().unique().to_list())
    label = sorted({names.get(d, f"device {d}") for d in used})
    parts = (
        [f"{len(used)} GPU(s) with work" + (f" ({', '.join(label)})" if label else "") + f" of {len(names)} listed"]
        if used
        else ["CPU-only trace"]
    )
    st = ov.steps
    if st.count:
        parts.append(f"{st.count} steps, mean {st.mean_us:,.0f} µs, median {st.median_us:,.0f} µs")
    else:
        parts.append("no ProfilerStep")
    busy = ov.busy_share
    parts.append(f"GPU busy {busy:.1%}" if busy is not None else "no GPU work")
    parts.append("findings: " + (", ".join(f.rule for f in findings) if findings else "none"))
    return "; ".join(parts)


def summary_report(ov: Overview, findings: list[Finding], top: int, th: dict) -> Report:
    rows = top if top and top < SCREEN_ROWS else SCREEN_ROWS
    g = ov.gaps
    ops = analyse_ops(ov.trace)
    ops = ops.filter(~pl.col("name").str.starts_with("ProfilerStep#"))
    kern = ov.kernels.table.select("kernel", "calls", "total_us", "share", "tensor_cores", "launched_by")
    stages = average_table(ov.stages)
    idle = g.idle_by_cause if g.has_gpu_work else pl.DataFrame()
    culprits = g.culprits if g.has_gpu_work else pl.DataFrame()
    sections = [
        Section("Devices", _devices(ov)),
        Section(
            "Steps",
            ov.steps.table.select("step", "duration_us", "busy_share", "kernel_share", "outlier")
            if ov.steps.count
            else None,
            text=None if ov.steps.count else "no ProfilerStep in this trace",
        ),
        Section(
            f"Stages ({ov.stages.view} view, µs per {'step' if ov.stages.window_kind == 'steps' else 'trace'})", stages
        ),
    ]
    if g.has_gpu_work:
        sections += [Section("GPU idle by cause", idle), Section("Top idle culprits", culprits.head(rows))]
    sections += [
        Section(
            "Top ops by total GPU time",
            ops.select("name", "calls", "total_cpu_us", "self_gpu_us", "total_gpu_us").head(rows),
        ),
        Section("Top kernels", kern.head(rows)),
        Section(
            "Findings", findings_table(findings).select("rule", "severity"), text=_findings_text(findings), main=True
        ),
    ]
    payload = {
        "devices": _devices(ov),
        "gpu_busy_share": ov.busy_share,
        "steps": {
            "count": ov.steps.count,
            "mean_us": ov.steps.mean_us,
            "median_us": ov.steps.median_us,
            "table": ov.steps.table,
            "caveats": [{"kind": c.kind, "message": c.message, "evidence": c.evidence} for c in ov.steps.caveats],
        },
        "stages": stages_payload(ov.stages),
        "idle_by_cause": idle,
        "culprits": culprits.head(top) if top else culprits,
        "top_ops": ops.head(top) if top else ops,
        "top_kernels": kern.head(top) if top else kern,
        "findings": [
            {
                "rule": f.rule,
                "severity": f.severity,
                "message": f.message,
                "evidence": f.evidence,
                "recommendation": f.recommendation,
                "events": list(f.events),
            }
            for f in findings
        ],
    }
    return Report(
        "summary",
        ov.trace.path,
        th,
        tuple(sections),
        payload,
        headline=_headline(ov, findings),
        warnings=ov.trace.warnings,
    )


@click.command("summary")
@click.argument("trace", type=click.Path())
@dataclass_options(StepOptions)
@dataclass_options(KernelOptions)
@dataclass_options(FindingOptions)
@click.option(
    "--stages",
    "stages_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML stage mapping for the stage breakdown (see `traceanalyzer stages`)",
)
@click.option(
    "--fail-on",
    "fail_on",
    multiple=True,
    type=click.Choice(RULE_IDS),
    help="exit with status 1 when this finding fires (repeatable)",
)
@output_options
def command(
    trace: str,
    stages_file: str | None,
    fail_on: tuple[str, ...],
    fmt: str | None,
    top: int,
    output: str | None,
    **kwargs,
) -> None:
    """One screen: devices, steps, GPU busy, stages, idle causes, top ops and kernels, findings."""
    step_opts = build(StepOptions, kwargs)
    kernel_opts = build(KernelOptions, kwargs)
    finding_opts = build(FindingOptions, kwargs)
    mapping = read_mapping(stages_file) if stages_file else None
    if ranks.is_rank_dir(trace):
        emit(ranks.dir_report("summary", trace, GapOptions(), top), fmt, output)
        return
    t = load_trace(trace)
    ov = Overview(t, finding_opts, step_opts, kernel_opts, mapping)
    findings = evaluate(ov)
    th = {
        **thresholds(step_opts),
        **thresholds(kernel_opts),
        **thresholds(finding_opts),
        "stages_file": stages_file,
        "fail_on": list(fail_on),
    }
    emit(summary_report(ov, findings, top, th), fmt, output)
    failed = sorted({f.rule for f in findings} & set(fail_on))
    if failed:
        # A check the user asked for failed: exit 1 through cli.main, without an 'error:' prefix.
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {', '.join(failed)}")
