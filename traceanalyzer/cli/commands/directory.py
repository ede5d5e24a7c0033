"""A DIRECTORY of per-rank trace files given to `gaps`, `summary` or `report`: the cross-rank Report.

The files are analysed by the library (`traceanalyzer.jobs.executors`: one pure function per file,
mapped on a local process pool or Dask, `--jobs`, `--executor`, `--cache-dir`), compared by
`multirank.cross_rank`, and `dir_report` builds the Report: a row per rank (with its own
findings, and `damaged` when the loader salvaged its file), the job's findings, the collectives
matched across ranks, the straggler and its cause, the ranks that waited, and exposed
communication per rank and step. Files that are not traces are skipped with a warning; every
warning is in the JSON `warnings`, in the per-rank table, and on stderr.

For another command to accept a directory:

    if opening.is_directory(path):  # light: this module (process pools, ...) is imported only then
        from traceanalyzer.cli.commands import directory as rank_dir
        rep = rank_dir.dir_report("summary", path, options, top, GROUPS)
        emit(rep, fmt, output); rank_dir.check_fail_on(rep, fail_on)
        return
"""

from __future__ import annotations

import dataclasses
import os
import re

import click
import polars as pl

from traceanalyzer.cli.commands.common import findings_payload
from traceanalyzer.errors import RegressionDetected
from traceanalyzer.findings.job_rules import job_findings
from traceanalyzer.jobs.executors import analyse_dir, is_rank_dir
from traceanalyzer.jobs.multirank import MultiRankResult, RankResult, SkippedFile
from traceanalyzer.jobs.rank_health import rank_health
from traceanalyzer.options import EXECUTION_FIELDS, Options
from traceanalyzer.report import FindingRow, Findings, Image, Report, Section
from traceanalyzer.units import display_us

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
    top: int | None = None,
    groups: tuple[str, ...] = (),
    jobs: int | None = None,
    fail_on: tuple[str, ...] = (),
) -> Report:
    """The cross-rank Report for `command` (gaps, summary) over a directory of rank files."""
    return _build(command, path, options, top, groups, jobs, fail_on)[0]


def write_dir_report(
    path: str,
    directory: str,
    options: Options,
    top: int,
    groups: tuple[str, ...],
    fail_on: tuple[str, ...] = (),
    html_too: bool = False,
) -> list[str]:
    """`report DIR -o FOLDER [--html]`: report.md (the cross-rank Report) with skew_map.png
    beside it, and report.html with the picture inline, each written atomically by its
    renderer; returns the paths written. Then `--fail-on` as for `summary DIR`."""
    from traceanalyzer.cli.commands.report import write_documents
    from traceanalyzer.render.skew_map import skew_map_png

    rep, mr = _build("report", path, options, top, groups, None, fail_on)
    job = os.path.basename(os.path.normpath(path))
    png = skew_map_png(mr.matched.arrivals, job=job) if mr.matched is not None else None
    if png is not None:
        caption = "ranks x collectives: µs after the first rank"
        skew = Section("Arrival skew across ranks", blocks=(Image("skew_map.png", png, caption),))
        rep = dataclasses.replace(rep, sections=(*rep.sections, skew))
    rep = dataclasses.replace(rep, title=f"traceanalyzer report: {job} ({mr.ranks.height} ranks)")
    written = write_documents(rep, directory, html_too)
    check_fail_on(rep, fail_on)
    return written


def check_fail_on(rep: Report, fail_on: tuple[str, ...]) -> None:
    """Exit 1 (through cli.main) when a rule of `fail_on` fired on any rank or on the job."""
    failed = sorted(set(rep.payload.get("fired_rules", ())) & set(fail_on))
    if failed:
        job = {(f["rule"], f["evidence"].get("rank")) for f in rep.payload.get("findings", ())}
        where = {
            r: sorted(
                {p["rank"] for p in rep.payload["per_rank"] if r in p["findings"]["rule"].to_list()}
                | {k for rule, k in job if rule == r and isinstance(k, int)}
            )
            for r in failed
        }
        said = ", ".join(f"{r} (ranks {where[r]})" if where[r] else f"{r} (job)" for r in failed)
        raise RegressionDetected(None, f"--fail-on: finding(s) fired: {said}")


RANK = re.compile(r"^rank \d+: ")
GAPS_PER_RANK = 20  # `gaps DIR` without --top: each rank's 20 longest gaps
ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def findings_section(title: str, findings: list) -> Section:
    """The findings of a job: one row per rule with the ranks it fired on and the worst rank's
    evidence (the highest severity, then the largest `share`), not one row per rank. The table
    (rule, severity, ranks, worst_rank) is exported; the screen shows the findings block."""
    groups: dict[str, list] = {}
    for f in findings:
        groups.setdefault(f.rule, []).append(f)
    rows, blocks = [], []
    for rule, fs in groups.items():
        worst = max(fs, key=lambda f: (-ORDER.get(f.severity, 9), float(f.evidence.get("share") or 0)))
        ranks = tuple(sorted({f.evidence["rank"] for f in fs if isinstance(f.evidence.get("rank"), int)}))
        shown = ranks if len(ranks) > 1 else ()
        message = worst.message if not shown else f"worst rank {worst.evidence['rank']}: " + RANK.sub("", worst.message)
        rows.append((rule, worst.severity, ", ".join(map(str, ranks)) or "job", worst.evidence.get("rank")))
        blocks.append(FindingRow(worst.severity, rule, message, worst.recommendation, shown))
    table = pl.DataFrame(
        rows,
        schema={"rule": pl.String, "severity": pl.String, "ranks": pl.String, "worst_rank": pl.Int64},
        orient="row",
    )
    body = Findings(tuple(blocks), empty="none fired (`traceanalyzer rules` lists the rules and thresholds)")
    return Section(title, table, show_table=False, whole=True, blocks=(body,))


def _name(p: str) -> str:
    return os.path.basename(p.replace("\\", "/"))


def _held(results: list[RankResult]) -> str:
    """How many of the job's ranks the directory holds: "2 of 128 ranks" when the files'
    distributedInfo says world_size, else "2 ranks"."""
    n = len(results)
    sizes = {r.world_size for r in results if r.world_size}
    if len(sizes) == 1 and (w := sizes.pop()) != n:
        return f"{n} of {w} ranks (world_size {w}: the others are not in this directory)"
    return f"{n} ranks"


def _health_line(health: pl.DataFrame) -> str:
    """The headline's caveat: the ranks whose health checks are errors, and what they spoil."""
    err = health.filter(pl.col("severity") == "error")
    if not err.height:
        return ""
    ranks = sorted(set(err["rank"].to_list()))
    checks = ", ".join(dict.fromkeys(err["check"].to_list()))
    spoilt = ", ".join(dict.fromkeys(m for u in err["unreliable"].to_list() for m in u.split(", ") if m))
    return (
        f"; health errors on rank(s) {', '.join(map(str, ranks))} ({checks}): their {spoilt or 'numbers'} "
        "are unreliable, and so are the stragglers and exposed time built on them"
    )


def _headline(mr: MultiRankResult, n_skipped: int, results: list[RankResult], health: pl.DataFrame) -> str:
    headline = _held(results) + (f" ({n_skipped} non-trace file(s) skipped)" if n_skipped else "")
    headline += _health_line(health)
    if mr.longest_rank is not None:
        row = mr.ranks.filter(pl.col("rank") == mr.longest_rank).row(0, named=True)
        top_cause = mr.longest_idle_by_cause.row(0, named=True) if mr.longest_idle_by_cause.height else None
        headline += (
            f"; longest step on rank {mr.longest_rank} ({row['step_time_us'] / 1000:,.2f} ms per step on average; "
            f"GPU idle {row['idle_us'] / 1000:,.2f} ms over its {row['steps']} step{'' if row['steps'] == 1 else 's'}"
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
    top: int | None,
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
    health = rank_health(results)
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
        Section(
            "Health of each rank, worst first (errors make that rank's numbers unreliable)",
            health.select("rank", "check", "severity", "unreliable", "message") if health.height else None,
            text=None if health.height else "every rank's trace passed its health checks",
        ),
        findings_section("Findings across ranks", jf),
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
    headline = _headline(mr, len(skipped), results, health)
    payload = {
        "headline": headline,
        "ranks": ranks,
        "fired_rules": fired,
        "health": health,
        "ranks_held": len(results),
        "world_size": next((r.world_size for r in results if r.world_size), None),
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
                "health": r.health,
                "findings": r.findings,
                "devices": r.devices,
                "idle_by_cause": r.idle_by_cause,
                "culprits": head(r.culprits),
            }
            for r in sorted(results, key=lambda r: (r.rank is None, r.rank or 0))
        ],
    }
    if command == "gaps":  # the gaps themselves, per rank, before the job's tables
        # Listed per rank, so its own default: 20 a rank (the other tables are cut by the renderer).
        n = GAPS_PER_RANK if top is None else top
        per_rank = gaps_per_rank(results, float(th.get("min_gap_us", 100.0)), n)
        title = f"Gaps of at least {th.get('min_gap_us', 100.0):g} µs per rank, longest first ({n or 'all'} per rank)"
        sections = (Section(title, per_rank, main=True, whole=True), *(replace_main(x) for x in sections))
        payload = {"gaps_per_rank": per_rank, **payload}
    return Report(command, path, th, sections, payload, headline=headline, warnings=warnings)


def replace_main(section: Section) -> Section:
    """The section, no longer the main table (CSV's first file)."""
    return dataclasses.replace(section, main=False)


def gaps_per_rank(results: list[RankResult], min_gap_us: float, top: int) -> pl.DataFrame:
    """rank, start_us (from that rank's trace start), duration_us, cause, op, python_frame: each
    rank's gaps of at least `min_gap_us`, longest first, `top` per rank (0: all)."""
    parts = [
        display_us(  # each rank's times from its own trace start
            r.idle_gaps.select(
                rank=pl.lit(r.rank, pl.Int64),
                start_ns="start_ns",
                duration_ns=pl.col("end_ns") - pl.col("start_ns"),
                cause="cause",
                op="op",
                python_frame="python_frame",
            ).filter(pl.col("duration_ns") >= min_gap_us * 1000),  # as `gaps` lists them
            r.origin_ns,
        )
        for r in results
        if r.idle_gaps.height
    ]
    if not parts:
        return pl.DataFrame(
            schema={"rank": pl.Int64, "start_us": pl.Float64, "duration_us": pl.Float64, "cause": pl.String}
        )
    g = pl.concat(parts)
    g = g.sort(["rank", "duration_us", "start_us"], descending=[False, True, False], nulls_last=True)
    return g.group_by("rank", maintain_order=True).head(top) if top else g
