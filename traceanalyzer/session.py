"""One trace, one story: a `Session` holds a Trace and one `Options` bundle and computes each
analysis at most once, when first asked, for every command, renderer, report and diff.

    import traceanalyzer as ta
    ses = ta.Session.open("trace.pt.trace.json.gz")      # or ta.Session(ta.load(path), options)
    ses.gaps.idle_by_cause                                 # polars DataFrame
    ses.syncs.sync_idle_us == ses.gaps.idle_us("sync")     # one classification of the gaps
    [f.rule for f in ses.findings]

Analyses that build on another get its result from here (syncs, gaps and the rules share one
gap classification; copies, syncs and stages one table of blocking calls), so a number that two
outputs print under one name is the same number.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property
from typing import Any, BinaryIO, ClassVar

import polars as pl

from traceanalyzer.analyses.communication import exposed_communication
from traceanalyzer.analyses.copies import CopiesResult, analyse_copies
from traceanalyzer.analyses.cpu_activity import CpuActivity, main_thread
from traceanalyzer.analyses.gap_causes import ClassifiedGaps, classify_gaps
from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
from traceanalyzer.analyses.health import HealthCheck, analyse_health
from traceanalyzer.analyses.kernels import KernelsResult, analyse_kernels
from traceanalyzer.analyses.memory import MemoryResult, analyse_memory
from traceanalyzer.analyses.ops import analyse_ops
from traceanalyzer.analyses.stages import StagesResult, analyse_stages
from traceanalyzer.analyses.step_detection import with_steps
from traceanalyzer.analyses.steps import StepsResult, analyse_steps
from traceanalyzer.analyses.syncs import SyncsResult, analyse_syncs
from traceanalyzer.analyses.verdict import Verdict, verdict
from traceanalyzer.analyses.windows import step_count
from traceanalyzer.options import Options
from traceanalyzer.trace import Trace


class Session:
    """The analyses of one trace under one set of options, each computed once, lazily."""

    def __init__(self, trace: Trace, options: Any = None) -> None:
        self.options = Options.of(options)
        # Every analysis counts per step over the same steps: those the options ask for.
        self.trace, self.step_source = with_steps(trace, self.options)
        self.loaded = trace  # as read, its steps the ProfilerStep ranges

    @classmethod
    def open(cls, path: str | os.PathLike[str] | BinaryIO, options: Any = None, **load_kwargs: Any) -> Session:
        """Load `path` (see `traceanalyzer.load` for `load_kwargs`) and open a session on it."""
        from traceanalyzer.load import load

        return cls(load(path, **load_kwargs), options)

    def __repr__(self) -> str:
        done = [k for k in self.__dict__ if k not in ("trace", "options", "step_source", "loaded")]
        return f"Session({self.trace.path!r}, computed={done})"

    @property
    def path(self) -> str:
        """The trace's path."""
        return self.trace.path

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the loader salvaged or repaired (see `Trace.warnings`)."""
        return self.trace.warnings

    # -- shared building blocks --------------------------------------------------------------

    @cached_property
    def activity(self) -> CpuActivity:
        """What each CPU thread was doing: blocked in syncs, loading data, busy."""
        return CpuActivity.of(self.trace, self.options.patterns.data_loading_pattern)

    @cached_property
    def main_thread(self) -> tuple[int, int] | None:
        """(pid, tid) of the thread that drives the program (see `cpu_activity.main_thread`)."""
        return main_thread(self.trace)

    @property
    def blocking_calls(self) -> pl.DataFrame:
        """Runtime calls that held a CPU thread until the GPU caught up."""
        return self.activity.blocking

    @cached_property
    def classified(self) -> ClassifiedGaps:
        """Every GPU idle piece with its cause: the one classification gaps, syncs and the rules
        read. Needs GPU work."""
        return classify_gaps(self.trace, self.options, self.activity)

    # -- analyses --------------------------------------------------------------------------

    @cached_property
    def gaps(self) -> GapsResult:
        """Every GPU idle gap, its cause and culprit (`analyse_gaps`)."""
        classified = self.classified if self.trace.has_gpu_work else None
        return analyse_gaps(self.trace, self.options, classified=classified)

    @cached_property
    def health(self) -> list[HealthCheck]:
        """The trace-health checks that fire, errors first (see `analyses.health`)."""
        return analyse_health(self.trace, self.options, self.steps)

    @cached_property
    def verdict(self) -> Verdict:
        """The cause to lead with and the advice that fits, over the steady state."""
        return verdict(self.gaps, step_count(self.trace), self.trace.meta.with_stack)

    @cached_property
    def communication(self) -> pl.DataFrame:
        """Per step: collective kernel time and the part compute did not hide (`analyses.communication`)."""
        return exposed_communication(self.trace, self.options.patterns.collective_pattern)

    @cached_property
    def syncs(self) -> SyncsResult:
        """Every sync, the bubble it left and its site (`analyse_syncs`)."""
        classified = self.classified if self.trace.has_gpu_work else None
        return analyse_syncs(self.trace, self.options, classified=classified)

    @cached_property
    def copies(self) -> CopiesResult:
        """Every memcpy and memset (`analyse_copies`)."""
        return analyse_copies(self.trace, self.options)

    @cached_property
    def steps(self) -> StepsResult:
        """The steps, their busy share and the capture caveats (`analyse_steps`)."""
        return analyse_steps(self.trace, self.options, source=self.step_source)

    @cached_property
    def stages(self) -> StagesResult:
        """The stage breakdown in the options' view and mapping (`analyse_stages`)."""
        return analyse_stages(self.trace, self.options, blocking=self.blocking_calls)

    @cached_property
    def pipeline_stages(self) -> StagesResult:
        """The pipeline view, whatever the options ask to show (the rules read this one)."""
        s = self.options.stages
        if s.stage_view == "pipeline" and not s.stage_mapping:
            return self.stages
        return analyse_stages(self.trace, self.options, view="pipeline", mapping=[], blocking=self.blocking_calls)

    @cached_property
    def ops(self) -> pl.DataFrame:
        """Per-op CPU and GPU time, grouped by the options' `group_by` (`analyse_ops`)."""
        return analyse_ops(self.trace, self.options)

    @cached_property
    def kernels(self) -> KernelsResult:
        """Per-kernel time and the short-kernel census (`analyse_kernels`)."""
        return analyse_kernels(self.trace, self.options)

    @cached_property
    def memory(self) -> MemoryResult:
        """The memory peak, who holds it and growth per step (`analyse_memory`)."""
        return analyse_memory(self.trace, self.options)

    # -- findings --------------------------------------------------------------------------
    # The rules sit a floor above (`traceanalyzer.findings`) and read this Session; importing
    # that package registers its evaluator here, so a Session holds their result without
    # importing them (`import traceanalyzer` always does).
    evaluator: ClassVar[Callable[[Session, Any], list[Any]] | None] = None

    @cached_property
    def findings(self) -> list[Any]:
        """Every finding of every rule, in registry order (`traceanalyzer.findings.Finding`)."""
        return self._evaluate(None)

    def findings_of(self, rules: tuple[Any, ...]) -> list[Any]:
        """The findings of some rules only, evaluating no more than they need."""
        if "findings" in self.__dict__:
            ids = {r.id for r in rules}
            return [f for f in self.findings if f.rule in ids]
        return self._evaluate(rules)

    def _evaluate(self, rules: tuple[Any, ...] | None) -> list[Any]:
        if Session.evaluator is None:
            raise RuntimeError("no rules registered: import traceanalyzer.findings")
        return Session.evaluator(self, rules)
