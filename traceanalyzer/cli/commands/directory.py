"""A DIRECTORY of per-rank trace files given to `gaps`, `summary` or `report`: the cross-rank Report.

The files are analysed by the library (`traceanalyzer.jobs.executors`: one pure function per file,
mapped on a local process pool or Dask, `--jobs`, `--executor`, `--cache-dir`), compared by
`multirank.cross_rank`, and `dir_report` builds the Report: a row per rank (with its own
findings, and `damaged` when the loader salvaged its file), the job's findings, the collectives
matched across ranks, the straggler and its cause, the ranks that waited, and exposed
communication per rank and step. Files that are not traces are skipped with a warning; every
warning is in the JSON `warnings`, in the per-rank table, and on stderr.

For another command to accept a directory:

    from traceanalyzer.cli.commands import directory as rank_dir
    if rank_dir.is_rank_dir(path):
        rep = rank_dir.dir_report("summary", path, options, top, GROUPS)
        emit(rep, fmt, output); rank_dir.check_fail_on(rep, fail_on)
        return
"""

from __future__ import annotations

import os

import click
import polars as pl

from traceanalyzer.cli.commands.common import findings_payload, findings_table, findings_text
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.findings.job_rules import job_findings
from traceanalyzer.jobs.executors import analyse_dir, is_rank_dir
from traceanalyzer.jobs.multirank import MultiRankResult, RankResult, SkippedFile
from traceanalyzer.options import EXECUTION_FIELDS, Options
from traceanalyzer.report import Report, Section

__all__ = ["check_fail_on", "dir_report", "is_rank_dir", "multirank_report"]


def _build(command, path, options, top, groups, jobs, fail_on) -> tuple[Report, MultiRankResult]:
    opts = Options.of(options)
    results, mr, skipped = analyse_dir(path, opts, jobs)
    th = {
        k: v for k, v in opts.thresholds(groups or ("patterns", "gaps", "ranks")).items() if k not in EXECUTION_FIELDS
    }
    if fail_on:
        th["fail_on"] = list(fail_on)
    rep = multirank_report(command, path, results, mr, th, top, skipped)
    for w in rep.warnings:
        click.echo(f"traceanalyzer: warning: {w}", err=True)
    return rep, mr


def dir_report(
    command: str,
    path: str,
    options: Options | None = None,
    top: int = 20,
    groups: tuple[str, ...] = (),
    jobs: int | None = None,
    fail_on: tuple[str, ...] = (),
) -> Report:
    """The cross-rank Report for `command` (gaps, summary) over a directory of rank files."""
    return _build(command, path, options, top, groups, jobs, fail_on)[0]


def write_dir_report(
    path: str, directory: str, options: Options, top: int, groups: tuple[str, ...], fail_on: tuple[str, ...] = ()
) -> list[str]:
    """`report DIR -o FOLDER`: report.md (the cross-rank Report in Markdown) and skew_map.png,
    each written atomically; returns the paths written. Then `--fail-on` as for `summary DIR`."""
    from traceanalyzer.render import RENDERERS
    from traceanalyzer.render.output import write_atomic
    from traceanalyzer.render.skew_map import skew_map_png

    rep, mr = _build("report", path, options, top, groups, None, fail_on)
    md = RENDERERS["markdown"].render(rep)
    png = skew_map_png(mr.matched.arrivals) if mr.matched is not None else None
    out = []
    if png is not None:
        p = os.path.join(directory, "skew_map.png")
        write_atomic(p, png)
        out.append(p)
        md += "\n## Arrival skew across ranks\n\n![ranks x collectives: µs after the first rank](skew_map.png)\n"
    p = os.path.join(directory, "report.md")
    write_atomic(p, md)
    for written in (p, *out):
        click.echo(f"wrote {written}", err=True)
    check_fail_on(rep, fail_on)
    return [p, *out]


def check_fail_on(rep: Report, fail_on: tuple[str, ...]) -> None:
    """Exit 1 (through cli.main) when a rule of `fail_on` fired on any rank or on the job."""
    failed = sorted(set(rep.payload.get("fired_rules", ())) & set(fail_on))
    if failed:
        where = {
            r: sorted(p["rank"] for p in rep.payload["per_rank"] if r in p["findings"]["rule"].to_list())
            for r in failed
        }
        said = ", ".join(f"{r} (ranks {where[r]})" if where[r] else f"{r} (job)" for r in failed)
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {said}")


def _name(p: str) -> str:
    return os.path.basename(p.replace("\\", "/"))


def _headline(mr: MultiRankResult, n_skipped: int) -> str:
    n = mr.ranks.height
    headline = f"{n} ranks" + (f" ({n_skipped} non-trace file(s) skipped)" if n_skipped else "")
    if mr.longest_rank is not None:
        row = mr.ranks.filter(pl.col("rank") == mr.longest_rank).row(0, named=True)
        top_cause = mr.longest_idle_by_cause.row(0, named=True) if mr.longest_idle_by_cause.height else None
        headline += (
            f"; longest step on rank {mr.longest_rank} ({row['step_time_us'] / 1000:,.2f} ms, GPU idle {row['idle_us'] / 1000:,.2f} ms"
            + (f", mostly {top_cause['cause']}" if top_cause else "")
            + ")"
        )
    m = mr.matched
    if m is not None and m.stragglers.height:
        s = m.stragglers.row(0, named=True)
        cause = m.straggler_cause.row(0, named=True) if m.straggler_cause.height else None
        headline += (
            f"; last to arrive: rank {s['rank']} at {s['times_last']} of {m.instances.height} collectives, "
            f"{s['mean_late_by_us']:,.0f} µs after the median rank on average"
            + (f" ({cause['cause']} {cause['share']:.0%} of the time peers waited)" if cause else "")
        )
    elif mr.stragglers.height:
        s = mr.stragglers.row(0, named=True)
        headline += (
            f"; straggler: rank {s['rank']}, {s['what']} late by {s['late_by_us'] / 1000:,.2f} ms ({s['cause']})"
        )
    else:
        headline += f"; no straggler (no rank late by {mr.options.straggler_min_us:g} µs or more)"
    return headline + f". {mr.alignment_note}"


def multirank_report(
    command: str,
    path: str,
    results: list[RankResult],
    mr: MultiRankResult,
    th: dict,
    top: int,
    skipped: list[SkippedFile] = (),
) -> Report:
    """The Report of a whole job: per rank, the job's findings, collectives, stragglers, exposed time."""
    warnings = tuple(f"{_name(s.path)}: skipped, not a trace ({s.reason})" for s in skipped) + tuple(
        f"{_name(r.path)}: {w}" for r in results for w in r.warnings
    )
    first_warning = {_name(r.path): r.warnings[0] for r in results if r.warnings}
    ranks = mr.ranks.with_columns(
        warning=pl.col("file").replace_strict(first_warning, default=None, return_dtype=pl.String)
    )
    jf = job_findings(mr)
    m = mr.matched
    fired = sorted({f.rule for f in jf} | {x for r in results for x in r.findings["rule"].to_list()})

    def head(df: pl.DataFrame | None) -> pl.DataFrame | None:
        return df if df is None or not top else df.head(top)

    inst = m.instances if m is not None else pl.DataFrame()
    inst_cols = [
        c
        for c in (
            "instance", "pg_name", "coll", "name", "ranks", "first_rank", "last_rank", "skew_us", "last_late_us",
            "transfer_us", "bytes", "dtype", "group_size", "algbw_gbps", "busbw_gbps",
        )
        if c in inst.columns
    ]  # fmt: skip
    sections = (
        Section("Per rank: step time, GPU busy, idle by cause (µs), its findings, damaged files", ranks, main=True),
        Section("Findings across ranks", findings_table(jf).select("rule", "severity"), text=findings_text(jf)),
        Section(f"Rank {mr.longest_rank}, the longest step: idle by cause", mr.longest_idle_by_cause),
        Section(
            "Collectives matched across ranks: arrival, skew, transfer time, bandwidth",
            head(inst.select(inst_cols).sort("skew_us", descending=True)) if inst.height else None,
            text=m.match_note if m is not None else None,
        ),
        Section("Per process group and collective type", m.by_group if m is not None else None),
        Section("Last to arrive: ranks by collectives they arrived last at", m.stragglers if m is not None else None),
        Section(
            "The straggler's own trace while peers waited for it (GPU idle by cause, else busy)",
            m.straggler_cause if m is not None else None,
        ),
        Section("Ranks that waited for peers inside collectives", m.victims if m is not None else None),
        Section(
            "Exposed communication per rank and step (µs; wait = for peers, transfer = the data)",
            head(m.exposed) if m is not None else None,
        ),
        Section("Ranks late to a step or their latest collective, and why", mr.stragglers, text=mr.alignment_note),
    )
    payload = {
        "ranks": ranks,
        "fired_rules": fired,
        "findings": findings_payload(jf),
        "skipped_files": [{"file": s.path, "reason": s.reason} for s in skipped],
        "longest_rank": mr.longest_rank,
        "longest_rank_idle_by_cause": mr.longest_idle_by_cause,
        "stragglers": mr.stragglers,
        "collectives": mr.collectives,
        "collective_match": m.match_note if m is not None else None,
        "collective_instances": inst,
        "collectives_by_group": m.by_group if m is not None else None,
        "last_arrivals": m.stragglers if m is not None else None,
        "straggler_cause": m.straggler_cause if m is not None else None,
        "victims": m.victims if m is not None else None,
        "exposed_communication": m.exposed if m is not None else None,
        "clocks_aligned": mr.clocks_aligned,
        "alignment_note": mr.alignment_note,
        "per_rank": [
            {
                "rank": r.rank,
                "rank_from": r.rank_source,
                "file": r.path,
                "damaged": r.damaged,
                "warnings": list(r.warnings),
                "findings": r.findings,
                "devices": r.devices,
                "idle_by_cause": r.idle_by_cause,
                "culprits": head(r.culprits),
            }
            for r in sorted(results, key=lambda r: (r.rank is None, r.rank or 0))
        ],
    }
    return Report(command, path, th, sections, payload, headline=_headline(mr, len(skipped)), warnings=warnings)
