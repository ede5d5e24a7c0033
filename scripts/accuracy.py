"""Accuracy benchmark: run `gaps` and the findings of `summary` on every scenario trace of
sample_traces/manifest.json and compare with what the scenario injected on purpose.

    python scripts/accuracy.py [--manifest sample_traces/manifest.json] [--markdown]

Per scenario: the largest idle cause found (`none` where the GPU is busy over 95 % of the
steps, `n/a` for a trace without GPU work) against `expected_top_cause`, and the findings that
fired against `expected_findings`. Exit status 1 when any scenario is named wrongly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from traceanalyzer import analyse_gaps, load
from traceanalyzer.findings import analyse_findings

BUSY_ENOUGH = 0.95


def top_cause(trace) -> str:
    result = analyse_gaps(trace)
    if not result.has_gpu_work:
        return "n/a"
    busy = result.devices["busy_us"].sum() / result.devices["window_us"].sum()
    if busy > BUSY_ENOUGH or result.idle_by_cause.is_empty():
        return "none"
    return result.idle_by_cause.row(0, named=True)["cause"]


def evaluate(entry: dict, folder: Path) -> dict:
    trace = load(folder / entry["file"])
    found_cause = top_cause(trace)
    fired = sorted({f.rule for f in analyse_findings(trace)})
    expected_cause = entry.get("expected_top_cause") or "n/a"
    expected = sorted(entry.get("expected_findings") or [])
    return {
        "scenario": entry["scenario"],
        "device": entry.get("device"),
        "expected_cause": expected_cause,
        "found_cause": found_cause,
        "cause_ok": found_cause == expected_cause,
        "expected_findings": expected,
        "fired_findings": fired,
        "findings_ok": set(expected) <= set(fired),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=str(Path(__file__).resolve().parents[1] / "sample_traces" / "manifest.json"))
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    manifest = Path(args.manifest)
    rows = [evaluate(e, manifest.parent) for e in json.loads(manifest.read_text())]
    if args.markdown:
        print("| scenario | device | expected cause | found | expected findings | fired | ok |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            ok = "yes" if r["cause_ok"] and r["findings_ok"] else "**no**"
            print(
                f"| {r['scenario']} | {r['device']} | {r['expected_cause']} | {r['found_cause']} | "
                f"{', '.join(r['expected_findings']) or '-'} | {', '.join(r['fired_findings']) or '-'} | {ok} |"
            )
    else:
        print(json.dumps(rows, indent=2))
    return 0 if all(r["cause_ok"] and r["findings_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
