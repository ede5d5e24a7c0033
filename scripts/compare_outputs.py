"""Compare every command's JSON output between a base commit and this working tree, on every
shared trace, against the list of intended changes: the check that a change moved no number it
does not say it moves.

    .venv/bin/python scripts/compare_outputs.py BASE_REV [--traces NAME ...] [--commands CMD ...]
        [--jobs N] [--listed docs/changes.md] [--save DIR | --load DIR]

The base is exported with `git archive` into a temporary folder (nothing is built: both sides run
`python -m traceanalyzer CMD INPUT --format json` with this tree's virtual environment, the base
from its own folder so its package comes first on the path, the cache off). Inputs are every
shared trace file, the rank directories for the commands that take one (`summary`, `gaps`), the
pairs of DIFF_PAIRS for `diff` (two traces of one program both ways, two ranks of one job, a trace
against itself, two traces without GPU work), none for `rules`, and for `annotate` the annotated
trace it writes; traces are named by absolute path, so `input` is the same on both sides.

Each pair of outputs is byte-identical, or its differences (`scripts/output_diff.py`: normalised
paths such as `findings[].saving_us`, kinds new / gone / order / digits / value) are matched
against the table "Fields that differ from ..." of docs/changes.md: LISTED when a row covers every
difference, UNLISTED otherwise (those paths are printed; both sides are run once more to say
whether the output is unstable). Exit 1 when any output is UNLISTED. `--save DIR` keeps every
output, `--load DIR` compares saved outputs again without running anything (after editing the list).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = (ROOT / ".." / "shared" / "traces").resolve()
COMMANDS = ("summary", "gaps", "copies", "syncs", "stages", "ops", "kernels", "memory", "diff", "rules", "annotate")
DIRECTORY_COMMANDS = ("summary", "gaps")  # the commands that also take a directory of ranks
DIFF_PAIRS = (  # before, after: paths under TRACES
    ("v100_resnet50_dataloader_workers0.pt.trace.json.gz", "v100_resnet50_dataloader_workers4.pt.trace.json.gz"),
    ("v100_resnet50_dataloader_workers4.pt.trace.json.gz", "v100_resnet50_dataloader_workers0.pt.trace.json.gz"),
    ("a100_simple_add_syncs.json.gz", "a100_multistream_syncs.json.gz"),
    ("dlrm_v100_8ranks/worker0_step_12.1694128201545.pt.trace.json.gz",
     "dlrm_v100_8ranks/worker1_step_12.1694128201556.pt.trace.json.gz"),
    ("mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz", "mi300x_ddp_resnet_4ranks/rank3_trace_0_20_3.json.gz"),
    ("h100_owlv2_inference.json.gz", "h100_owlv2_inference.json.gz"),
    ("edge_cpu_only.pt.trace.json.gz", "edge_gb10_no_gpu_events.pt.trace.json.gz"),
)  # fmt: skip

_spec = importlib.util.spec_from_file_location("output_diff", Path(__file__).with_name("output_diff.py"))
od = importlib.util.module_from_spec(_spec)
sys.modules["output_diff"] = od
_spec.loader.exec_module(od)

Job = tuple[str, tuple[Path, ...]]  # a command and its inputs
Result = tuple[int, bytes]  # exit status and stdout


def _jobs(commands: list[str], names: list[str] | None) -> list[Job]:
    def wanted(p: Path) -> bool:
        return not names or any(n in _shown(p) for n in names)

    files = sorted(p for p in TRACES.iterdir() if p.is_file() and ".json" in p.name)
    dirs = sorted(p for p in TRACES.iterdir() if p.is_dir())
    jobs: list[Job] = []
    for t in files + dirs:
        if wanted(t):
            jobs += [
                (c, (t,)) for c in commands if c not in ("diff", "rules") and (t.is_file() or c in DIRECTORY_COMMANDS)
            ]
    if "diff" in commands:
        jobs += [("diff", (TRACES / a, TRACES / b)) for a, b in DIFF_PAIRS if wanted(TRACES / a) or wanted(TRACES / b)]
    if "rules" in commands and not names:
        jobs.append(("rules", ()))
    return jobs


def _shown(p: Path) -> str:
    """A trace as the report names it: its path under TRACES."""
    return str(p.relative_to(TRACES)) if p.is_relative_to(TRACES) else str(p)


def _name(job: Job) -> str:
    c, inputs = job
    return " ".join([c, *map(_shown, inputs)])


def _stem(job: Job) -> str:
    return _name(job).replace(" ", "__").replace("/", "%")


def _export(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True)
    tar = into / "base.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    tar.unlink()


def _run(where: Path, job: Job, home: Path) -> Result:
    c, inputs = job
    written = None
    if c == "annotate":  # its JSON is the annotated trace it writes
        fd, name = tempfile.mkstemp(suffix=".json", dir=home)
        os.close(fd)
        written = Path(name)
    args = ["-o", str(written)] if written else ["--format", "json"]
    p = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", c, *map(str, inputs), *args],
        cwd=where,
        capture_output=True,
        env={
            "COLUMNS": "100",
            "PATH": "/usr/bin:/bin",
            "PYTHONHASHSEED": "0",
            "HOME": str(home),  # nothing written in the user's home (matplotlib, caches)
            "TRACEANALYZER_NO_CACHE": "1",  # each side computes; tests/jobs/test_cache.py checks the cache
        },
    )
    if written:
        out = written.read_bytes()
        written.unlink()
        return p.returncode, out
    return p.returncode, p.stdout


def compare(command: str, base: Result, here: Result) -> list[od.Difference]:
    """The differences between two results of `command` (exit status, then the JSON)."""
    out = [] if base[0] == here[0] else [od.Difference("(exit status)", "value", f"{base[0]} -> {here[0]}")]
    try:
        return out + od.differences(json.loads(base[1]), json.loads(here[1]))
    except ValueError:
        return [*out, od.Difference("(output)", "value", "not JSON on one side")] if base[1] != here[1] else out


def _save(folder: Path, job: Job, base: Result, here: Result | None) -> None:
    """Keep both outputs of `job` (`here` None: the same as the base, kept once)."""
    stem = _stem(job)
    for side, result in (("base", base), ("here", here)):
        (folder / side).mkdir(parents=True, exist_ok=True)
        if result is None:
            (folder / side / f"{stem}.same").write_text("")
            continue
        (folder / side / f"{stem}.json").write_bytes(result[1])
        (folder / side / f"{stem}.rc").write_text(f"{result[0]}\n")
    with (folder / "jobs.json").open("a") as f:
        f.write(json.dumps([job[0], [str(p) for p in job[1]]]) + "\n")


def _saved(folder: Path) -> list[tuple[Job, Result, Result]]:
    out = []
    for line in (folder / "jobs.json").read_text().splitlines():
        c, inputs = json.loads(line)
        job = (c, tuple(Path(p) for p in inputs))
        stem = _stem(job)
        base, here = ((folder / s / f"{stem}.rc", folder / s / f"{stem}.json") for s in ("base", "here"))
        result = (int(base[0].read_text()), base[1].read_bytes())
        same = (folder / "here" / f"{stem}.same").exists()
        out.append((job, result, result if same else (int(here[0].read_text()), here[1].read_bytes())))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("--traces", nargs="*", help="substrings of trace names (default: every shared trace)")
    ap.add_argument("--commands", nargs="*", default=list(COMMANDS))
    ap.add_argument("--jobs", type=int, default=2, help="commands run at once (at most 2 on a shared machine)")
    ap.add_argument("--listed", type=Path, default=ROOT / "docs" / "changes.md", help="where the table of changes is")
    ap.add_argument("--save", type=Path, help="keep every output in this folder")
    ap.add_argument("--load", type=Path, help="compare the outputs saved in this folder instead of running")
    args = ap.parse_args()
    listed = od.parse_listed(args.listed.read_text())
    counts = collections.Counter()
    unlisted_paths: dict[tuple[str, str, str], list[str]] = collections.defaultdict(list)
    used: set[int] = set()

    def report(job: Job, base: Result, here: Result, rerun) -> None:
        c, name = job[0], _name(job)
        if base == here:
            counts["same"] += 1
            print(f"same      {name}", flush=True)
            return
        diffs = compare(c, base, here)
        left, rows = od.unlisted(c, diffs, listed)
        used.update(rows)
        if not left:
            counts["listed"] += 1
            print(f"LISTED    {name} ({len(diffs)} differences, {len(rows)} rows)", flush=True)
            return
        counts["unlisted"] += 1
        note = rerun(job, base, here) if rerun else ""
        print(f"UNLISTED  {name}{note}", flush=True)
        shown = collections.Counter((d.path, d.kind) for d in left)
        examples = {(d.path, d.kind): d.detail for d in reversed(left)}
        for (path, kind), n in shown.most_common():
            print(f"    {path} [{kind}]{f' x{n}' if n > 1 else ''}: {examples[path, kind]}")
            unlisted_paths[c, path, kind].append(" ".join(map(_shown, job[1])) or "-")

    if args.load:
        for job, base, here in _saved(args.load):
            report(job, base, here, None)
    else:
        jobs = _jobs(args.commands, args.traces)
        with tempfile.TemporaryDirectory(prefix="compare-outputs-") as tmp:
            base_tree, home = Path(tmp) / "base", Path(tmp) / "home"
            base_tree.mkdir()
            home.mkdir()
            _export(args.base, base_tree)

            def one(job: Job) -> tuple[Job, Result, Result]:
                return job, _run(base_tree, job, home), _run(ROOT, job, home)

            def rerun(job: Job, base: Result, here: Result) -> str:
                # An output that changes from run to run is not a change of the code.
                moved = [
                    s
                    for s, where, r in (("base", base_tree, base), ("here", ROOT, here))
                    if _run(where, job, home) != r
                ]
                return f" (UNSTABLE {' and '.join(moved)}: differs between two runs)" if moved else ""

            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / "jobs.json").write_text("")
            with ThreadPoolExecutor(min(args.jobs, 2)) as pool:
                for job, base, here in pool.map(one, jobs):
                    if args.save:  # an output equal on both sides is kept once (annotated traces are large)
                        _save(args.save, job, base, None if base == here else here)
                    report(job, base, here, rerun)

    print(
        f"\n{counts['same']} byte-identical, {counts['listed']} differing only in listed fields, "
        f"{counts['unlisted']} with unlisted differences (base {args.base}, list {args.listed.name})"
    )
    for (c, path, kind), where in sorted(unlisted_paths.items()):
        print(f"  UNLISTED {c} {path} [{kind}] on {len(where)}: {', '.join(sorted(set(where))[:4])}")
    complete = not args.traces and set(args.commands) >= set(COMMANDS)
    if complete and (idle := [r for r in listed if r.line not in used]):
        print("Rows no output needed (stale, or an order unstable in the base that agreed this time):")
        for r in idle:
            print(
                f"  line {r.line}: {', '.join(r.commands) or '*'} {', '.join(r.patterns)} [{', '.join(sorted(r.kinds))}]"
            )
    return 1 if counts["unlisted"] else 0


if __name__ == "__main__":
    sys.exit(main())
