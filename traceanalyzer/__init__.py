"""traceanalyzer: offline post-mortem analysis of PyTorch profiler (Kineto) traces.

    import traceanalyzer as ta
    trace = ta.load("trace.pt.trace.json.gz")
    result = ta.analyse_gaps(trace)
"""

__version__ = "0.1.0"

from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
from traceanalyzer.errors import NotATraceError, TraceAnalyzerError, TraceReadError
from traceanalyzer.load import load
from traceanalyzer.options import GapOptions
from traceanalyzer.trace import Trace

__all__ = [
    "__version__",
    "load",
    "Trace",
    "analyse_gaps",
    "GapsResult",
    "GapOptions",
    "TraceAnalyzerError",
    "TraceReadError",
    "NotATraceError",
]
