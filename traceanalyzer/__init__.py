"""traceanalyzer: offline post-mortem analysis of PyTorch profiler (Kineto) traces.

    import traceanalyzer as ta
    ses = ta.Session.open("trace.pt.trace.json.gz")   # or ta.Session(ta.load(path), ta.Options())
    ses.gaps.idle_by_cause, ses.syncs.sync_idle_us, [f.rule for f in ses.findings]
    ses.critical_path.by_kind, ses.whatif(ta.Scenario(without=("data_loading",))).predicted_median_step_us

Every analysis is also a pure function (`ta.analyse_gaps(trace, options)`); a Session computes
each once and hands the same result to everything that reads it.

Neither click nor matplotlib is imported here: they load only with the CLI and the pictures.
"""

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
