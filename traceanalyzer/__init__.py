"""traceanalyzer: offline post-mortem analysis of PyTorch profiler (Kineto) traces.

    import traceanalyzer as ta
    ses = ta.Session.open("trace.pt.trace.json.gz")   # or ta.Session(ta.load(path), ta.Options())
    ses.gaps.idle_by_cause, ses.syncs.sync_idle_us, [f.rule for f in ses.findings]
    ses.critical_path.by_kind, ses.whatif(ta.Scenario(without=("data_loading",))).predicted_median_step_us

Every analysis is also a pure function (`ta.analyse_gaps(trace, options)`); a Session computes
each once and hands the same result to everything that reads it.

Every public name loads its module on first use (PEP 562), so `import traceanalyzer` costs almost
nothing; neither click nor matplotlib is imported here: they load only with the CLI and the pictures.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first access
    from traceanalyzer.analyses.copies import CopiesResult, analyse_copies
    from traceanalyzer.analyses.critical_path import CriticalPath
    from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
    from traceanalyzer.analyses.kernels import KernelsResult, analyse_kernels
    from traceanalyzer.analyses.memory import MemoryResult, analyse_memory
    from traceanalyzer.analyses.ops import OpsResult, analyse_ops
    from traceanalyzer.analyses.roofline import RooflineResult, analyse_roofline
    from traceanalyzer.analyses.stages import StagesResult, analyse_stages
    from traceanalyzer.analyses.steps import StepsResult, analyse_steps
    from traceanalyzer.analyses.syncs import SyncsResult, analyse_syncs
    from traceanalyzer.analyses.whatif import Scenario, WhatIf
    from traceanalyzer.errors import NotATraceError, TraceAnalyzerError, TraceReadError
    from traceanalyzer.findings import Finding, analyse_findings
    from traceanalyzer.jobs.diff import DiffResult, analyse_diff
    from traceanalyzer.load import load
    from traceanalyzer.options import (
        CopyOptions,
        DiffOptions,
        FindingOptions,
        GapOptions,
        KernelOptions,
        MemoryOptions,
        OpsOptions,
        Options,
        PathOptions,
        PatternOptions,
        RankOptions,
        RooflineOptions,
        StageOptions,
        StepOptions,
        SyncOptions,
    )
    from traceanalyzer.registry import ANALYSES
    from traceanalyzer.session import Session
    from traceanalyzer.trace import Trace, TraceMeta
    from traceanalyzer.version import __version__

# Where each public name lives: `ta.NAME` imports that module the first time it is read.
_WHERE = {
    "CopiesResult": "traceanalyzer.analyses.copies",
    "analyse_copies": "traceanalyzer.analyses.copies",
    "CriticalPath": "traceanalyzer.analyses.critical_path",
    "GapsResult": "traceanalyzer.analyses.gaps",
    "analyse_gaps": "traceanalyzer.analyses.gaps",
    "KernelsResult": "traceanalyzer.analyses.kernels",
    "analyse_kernels": "traceanalyzer.analyses.kernels",
    "MemoryResult": "traceanalyzer.analyses.memory",
    "analyse_memory": "traceanalyzer.analyses.memory",
    "OpsResult": "traceanalyzer.analyses.ops",
    "analyse_ops": "traceanalyzer.analyses.ops",
    "RooflineResult": "traceanalyzer.analyses.roofline",
    "analyse_roofline": "traceanalyzer.analyses.roofline",
    "StagesResult": "traceanalyzer.analyses.stages",
    "analyse_stages": "traceanalyzer.analyses.stages",
    "StepsResult": "traceanalyzer.analyses.steps",
    "analyse_steps": "traceanalyzer.analyses.steps",
    "SyncsResult": "traceanalyzer.analyses.syncs",
    "analyse_syncs": "traceanalyzer.analyses.syncs",
    "Scenario": "traceanalyzer.analyses.whatif",
    "WhatIf": "traceanalyzer.analyses.whatif",
    "NotATraceError": "traceanalyzer.errors",
    "TraceAnalyzerError": "traceanalyzer.errors",
    "TraceReadError": "traceanalyzer.errors",
    "Finding": "traceanalyzer.findings",
    "analyse_findings": "traceanalyzer.findings",
    "DiffResult": "traceanalyzer.jobs.diff",
    "analyse_diff": "traceanalyzer.jobs.diff",
    "load": "traceanalyzer.load",
    "CopyOptions": "traceanalyzer.options",
    "DiffOptions": "traceanalyzer.options",
    "FindingOptions": "traceanalyzer.options",
    "GapOptions": "traceanalyzer.options",
    "KernelOptions": "traceanalyzer.options",
    "MemoryOptions": "traceanalyzer.options",
    "OpsOptions": "traceanalyzer.options",
    "Options": "traceanalyzer.options",
    "PathOptions": "traceanalyzer.options",
    "PatternOptions": "traceanalyzer.options",
    "RankOptions": "traceanalyzer.options",
    "RooflineOptions": "traceanalyzer.options",
    "StageOptions": "traceanalyzer.options",
    "StepOptions": "traceanalyzer.options",
    "SyncOptions": "traceanalyzer.options",
    "ANALYSES": "traceanalyzer.registry",
    "Session": "traceanalyzer.session",
    "Trace": "traceanalyzer.trace",
    "TraceMeta": "traceanalyzer.trace",
    "__version__": "traceanalyzer.version",
}

__all__ = [
    "__version__",
    "load",
    "Session",
    "Options",
    "PatternOptions",
    "RankOptions",
    "RooflineOptions",
    "Trace",
    "TraceMeta",
    "ANALYSES",
    "analyse_gaps",
    "GapsResult",
    "GapOptions",
    "analyse_copies",
    "CopiesResult",
    "CopyOptions",
    "analyse_syncs",
    "SyncsResult",
    "SyncOptions",
    "analyse_steps",
    "StepsResult",
    "StepOptions",
    "analyse_stages",
    "StagesResult",
    "StageOptions",
    "analyse_ops",
    "OpsResult",
    "OpsOptions",
    "analyse_kernels",
    "KernelsResult",
    "KernelOptions",
    "analyse_memory",
    "MemoryResult",
    "analyse_roofline",
    "RooflineResult",
    "MemoryOptions",
    "analyse_findings",
    "Finding",
    "FindingOptions",
    "analyse_diff",
    "DiffResult",
    "DiffOptions",
    "CriticalPath",
    "Scenario",
    "WhatIf",
    "PathOptions",
    "TraceAnalyzerError",
    "TraceReadError",
    "NotATraceError",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package module: importing the subpackage `traceanalyzer.load` would bind it here as
    `load`, where the public name is the function (`ta.load(path)`); the subpackage is left
    unbound, so `ta.load` still resolves to the function (and only when read)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "load" and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.load":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
