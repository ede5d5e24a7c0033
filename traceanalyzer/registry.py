"""Every single-trace analysis under one signature: `analysis(trace, options=None) -> result`.

The registry lets one test run all of them on degenerate traces, and lets notebooks and
tools iterate over them without knowing each module. `options` is an `Options` bundle or the
options of that one analysis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceanalyzer.analyses.copies import analyse_copies
from traceanalyzer.analyses.gaps import analyse_gaps
from traceanalyzer.analyses.kernels import analyse_kernels
from traceanalyzer.analyses.memory import analyse_memory
from traceanalyzer.analyses.ops import analyse_ops
from traceanalyzer.analyses.stages import analyse_stages
from traceanalyzer.analyses.steps import analyse_steps
from traceanalyzer.analyses.syncs import analyse_syncs
from traceanalyzer.findings import analyse_findings
from traceanalyzer.trace import Trace

ANALYSES: dict[str, Callable[[Trace, Any], Any]] = {
    "gaps": analyse_gaps,
    "copies": analyse_copies,
    "syncs": analyse_syncs,
    "steps": analyse_steps,
    "stages": analyse_stages,
    "ops": analyse_ops,
    "kernels": analyse_kernels,
    "memory": analyse_memory,
    "findings": analyse_findings,
}
