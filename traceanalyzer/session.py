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

import importlib
import os
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

import polars as pl

from traceanalyzer.analyses.cpu_activity import CpuActivity, main_thread
from traceanalyzer.analyses.gap_causes import ClassifiedGaps, classify_gaps
from traceanalyzer.analyses.gaps import GapsResult, analyse_gaps
from traceanalyzer.analyses.health import HealthCheck, analyse_health
from traceanalyzer.analyses.scenario import Scenario
from traceanalyzer.analyses.step_detection import with_steps
from traceanalyzer.analyses.steps import Caveat, StepsResult, analyse_steps, step_caveats
from traceanalyzer.analyses.verdict import Verdict, compiled_model, verdict
from traceanalyzer.analyses.windows import step_count
from traceanalyzer.options import Options
from traceanalyzer.trace import Trace

# What every command reads (steps, the CPU activity, the gap classification) is imported here; each
# other analysis loads in the property that computes it, so a command imports only what it asks for
# (the replay, with numpy and the dependency graph, only for a what-if or a critical path).
if TYPE_CHECKING:
    from traceanalyzer.analyses.communication import CommunicationResult
    from traceanalyzer.analyses.copies import CopiesResult
    from traceanalyzer.analyses.critical_path import CriticalPath
    from traceanalyzer.analyses.kernels import KernelsResult
    from traceanalyzer.analyses.memory import MemoryResult
    from traceanalyzer.analyses.ops import OpsResult
    from traceanalyzer.analyses.roofline import RooflineResult
    from traceanalyzer.analyses.stages import StagesResult
    from traceanalyzer.analyses.syncs import SyncsResult
    from traceanalyzer.analyses.whatif import Model, WhatIf


class ReleasedError(RuntimeError):
    """A result asked for after `Session.release` let it go: it is not computed twice."""


class _result(cached_property):
    """A `cached_property` that first asks the Session's `store` (a cache of earlier runs on
    the same trace and options: `get(name)` -> value or `store.MISSING`), and tells it before
    computing (`computing(name)`, for a progress display). Without a store it is a plain
    cached_property."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        d = instance.__dict__
        if self.attrname in d:
            return d[self.attrname]
        instance._not_released(self.attrname)
        store = d.get("store")
        if store is not None:
            value = store.get(self.attrname)
            if value is not store.MISSING:
                d[self.attrname] = value
                return value
            store.computing(self.attrname)
        return super().__get__(instance, owner)


class Session:
    """The analyses of one trace under one set of options, each computed once, lazily.

    `store`: where results of an earlier run on the same trace and options are kept (the CLI's
    single-file cache, `traceanalyzer.jobs.cache`); `save()` hands it every result computed.
    `comm_args`: the collectives' metadata read from the trace's raw JSON (`rank_io.comm_args`;
    None: none known), which `collective_kernels` joins to the kernels."""

    lean: ClassVar[bool] = False  # a rank's row (`jobs.rank_session`): tables it never reads left out
    _OWN = ("trace", "options", "step_source", "loaded", "_released", "comm_args")  # attributes, not results

    def __init__(
        self, trace: Trace, options: Any = None, store: Any = None, comm_args: pl.DataFrame | None = None
    ) -> None:
        self.options = Options.of(options)
        self.store = store
        self.comm_args = comm_args
        # Every analysis counts per step over the same steps: those the options ask for.
        self.trace, self.step_source = with_steps(trace, self.options)
        self.loaded = trace  # as read, its steps the ProfilerStep ranges
        if store is not None:
            store.share(trace=self.trace, loaded=self.loaded)

    @classmethod
    def results(cls) -> tuple[str, ...]:
        """The names of the results a Session computes once (and a store may keep)."""
        return tuple(k for k, v in vars(cls).items() if isinstance(v, _result))

    def computed(self) -> dict[str, Any]:
        """The results computed or read so far, by name."""
        return {k: self.__dict__[k] for k in self.results() if k in self.__dict__}

    def save(self) -> None:
        """Hand every result computed here (not read from the store) to the store."""
        if self.store is not None:
            for name, value in self.computed().items():
                self.store.put(name, value)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | BinaryIO, options: Any = None, **load_kwargs: Any) -> Session:
        """Load `path` (see `traceanalyzer.load` for `load_kwargs`) and open a session on it."""
        from traceanalyzer.load import load

        return cls(load(path, **load_kwargs), options)

    def __repr__(self) -> str:
        done = list(self.computed())
        return f"Session({self.trace.path!r}, computed={done})"

    def _repr_html_(self) -> str:
        from traceanalyzer.reprs import html_table

        done = [k for k in self.__dict__ if k not in self._OWN]
        return html_table("Session", [("trace", repr(self.trace)), ("computed", ", ".join(done) or "nothing yet")])

    path = property(lambda self: self.trace.path, doc="The trace's path.")

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the loader salvaged or repaired (see `Trace.warnings`)."""
        return self.trace.warnings

    # -- shared building blocks --------------------------------------------------------------

    @_result
    def activity(self) -> CpuActivity:
        """What each CPU thread was doing: blocked in syncs, loading data, busy."""
        return CpuActivity.of(self.trace, self.options.patterns.data_loading_pattern)

    @_result
    def main_thread(self) -> tuple[int, int] | None:
        """(pid, tid) of the thread that drives the program (see `cpu_activity.main_thread`)."""
        return main_thread(self.trace)

    @property
    def blocking_calls(self) -> pl.DataFrame:
        """Runtime calls that held a CPU thread until the GPU caught up."""
        return self.activity.blocking

    @_result
    def classified(self) -> ClassifiedGaps:
        """Every GPU idle piece with its cause: the one classification gaps, syncs and the rules
        read. Needs GPU work."""
        return classify_gaps(self.trace, self.options, self.activity)

    @cached_property  # building blocks of `communication` and a rank's result, not kept by the store
    def collective_kernels(self) -> pl.DataFrame:
        """The collective kernels in time order, with their metadata (`collectives.rank_collectives`)."""
        from traceanalyzer.analyses import collectives

        args = self.comm_args if self.comm_args is not None else pl.DataFrame(schema=collectives.COMM_ARGS_SCHEMA)
        return collectives.rank_collectives(self.trace.gpu, self.options.patterns.collective_pattern, args)

    @cached_property
    def exposed_collectives(self) -> pl.DataFrame:
        """cidx, start_ns, end_ns: the collective time no compute kernel hid (`collectives.exposed_segments`)."""
        from traceanalyzer.analyses import collectives

        return collectives.exposed_segments(self.trace.gpu, self.collective_kernels)

    def collectives_of(self, comm_args: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(collective kernels, exposed segments): the Session's, computed once, when `comm_args`
        is None or its own; else those of the kernels with that metadata."""
        if comm_args is None or comm_args is self.comm_args:
            return self.collective_kernels, self.exposed_collectives
        from traceanalyzer.analyses import collectives

        coll = collectives.rank_collectives(self.trace.gpu, self.options.patterns.collective_pattern, comm_args)
        return coll, collectives.exposed_segments(self.trace.gpu, coll)

    # -- analyses --------------------------------------------------------------------------

    @_result
    def gaps(self) -> GapsResult:
        """Every GPU idle gap, its cause and culprit (`analyse_gaps`)."""
        classified = self.classified if self.trace.has_gpu_work else None
        return analyse_gaps(self.trace, self.options, classified=classified)

    @_result
    def health(self) -> list[HealthCheck]:
        """The trace-health checks that fire, errors first (see `analyses.health`)."""
        return analyse_health(self.trace, self.options, self.step_caveats)

    @cached_property  # a part of `steps`, not kept by the store
    def step_caveats(self) -> tuple[Caveat, ...]:
        """The steps' capture caveats: those of `steps` when computed (or read from the store), else
        the same ones from the steps' durations alone (`gaps` prints no step's GPU busy time)."""
        if "steps" in self.__dict__:
            return self.steps.caveats
        return step_caveats(self.trace, self.options)

    @_result
    def verdict(self) -> Verdict:
        """The cause to lead with and the advice that fits, over the steady state."""
        exposed = self.communication.exposed_us
        return verdict(
            self.gaps, step_count(self.trace), self.trace.meta.with_stack, compiled_model(self.trace), exposed
        )

    @_result
    def communication(self) -> CommunicationResult:
        """Per step: collective kernel time and the part compute did not hide (`analyses.communication`)."""
        from traceanalyzer.analyses.communication import exposed_communication

        return exposed_communication(
            self.trace,
            self.options.patterns.collective_pattern,
            coll=self.collective_kernels,
            exposed=self.exposed_collectives,
        )

    @_result
    def syncs(self) -> SyncsResult:
        """Every sync, the bubble it left and its site (`analyse_syncs`)."""
        from traceanalyzer.analyses.syncs import analyse_syncs

        c = self.classified if self.trace.has_gpu_work else None
        return analyse_syncs(self.trace, self.options, classified=c, blocking=self.blocking_calls, lean=self.lean)

    @_result
    def copies(self) -> CopiesResult:
        """Every memcpy and memset (`analyse_copies`)."""
        from traceanalyzer.analyses.copies import analyse_copies

        return analyse_copies(self.trace, self.options, blocking=self.blocking_calls, lean=self.lean)

    @_result
    def steps(self) -> StepsResult:
        """The steps, their busy share and the capture caveats (`analyse_steps`)."""
        return analyse_steps(self.trace, self.options, source=self.step_source)

    @_result
    def stages(self) -> StagesResult:
        """The stage breakdown in the options' view and mapping (`analyse_stages`)."""
        from traceanalyzer.analyses.stages import analyse_stages

        return analyse_stages(self.trace, self.options, blocking=self.blocking_calls)

    @_result
    def pipeline_stages(self) -> StagesResult:
        """The pipeline view, whatever the options ask to show (the rules read this one)."""
        from traceanalyzer.analyses.stages import analyse_stages

        s = self.options.stages
        if s.stage_view == "pipeline" and not s.stage_mapping:
            return self.stages
        return analyse_stages(self.trace, self.options, view="pipeline", mapping=[], blocking=self.blocking_calls)

    @_result
    def ops(self) -> OpsResult:
        """Per-op CPU and GPU time, grouped by the options' `group_by` (`analyse_ops`)."""
        from traceanalyzer.analyses.ops import analyse_ops

        return analyse_ops(self.trace, self.options)

    @_result
    def kernels(self) -> KernelsResult:
        """Per-kernel time and the short-kernel census (`analyse_kernels`)."""
        from traceanalyzer.analyses.kernels import analyse_kernels

        return analyse_kernels(self.trace, self.options, lean=self.lean)

    @_result
    def memory(self) -> MemoryResult:
        """The memory peak, who holds it and growth per step (`analyse_memory`)."""
        from traceanalyzer.analyses.memory import analyse_memory

        return analyse_memory(self.trace, self.options)

    @_result  # a building block (`release`), kept by the store as tables (`analyses.model_state`)
    def dependency_model(self) -> Model:
        """The dependency graph of the trace, ordered, with its replay of the capture."""
        from traceanalyzer.analyses import dependency_graph, whatif

        o, build = self.options, dependency_graph.build_graph
        graph = build(self.trace, self.activity, o.patterns.collective_pattern, o.path.thread_wait_us)
        return whatif.Model(self.trace, graph, int(o.gaps.kernel_spacing_us * 1000), int(o.gaps.slow_launch_us * 1000))

    def kept(self, name: str) -> bool:
        """Whether the result `name` is at hand without computing it: computed already, or held
        by the store (then read from it now). A command that frees building blocks early asks
        this first, so that it never builds a block a cached result does not need."""
        if name in self.__dict__:
            return True
        if (store := self.store) is None or name in self.__dict__.get("_released", ()):
            return False
        value = store.get(name)
        if value is not store.MISSING:
            self.__dict__[name] = value
        return value is not store.MISSING

    def release(self, *names: str) -> None:
        """Let building blocks go (`dependency_model`, `activity`, `classified`, and `trace`: the
        Trace as read and with its steps) once what reads them is done: their memory serves what
        comes next. Asked for again, each raises `ReleasedError` rather than being built twice (a
        command releasing too early fails its tests). A result goes to the store (if any) as it goes."""
        results = self.results()
        if unknown := set(names) - {*results, "trace"}:
            raise ValueError(f"not a result of the Session: {sorted(unknown)}")
        released = self.__dict__.setdefault("_released", set())
        for name in (*names, "loaded") if "trace" in names else names:
            value = self.__dict__.pop(name, None)
            if value is not None and self.store is not None and name in results:
                self.store.put(name, value)  # still kept for the next command, as `save` would
            released.add(name)

    def __getattr__(self, name: str) -> Any:  # only for a name not set: `trace` / `loaded` once released
        self._not_released(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _not_released(self, name: str) -> None:
        if name in self.__dict__.get("_released", ()):
            raise ReleasedError(
                f"Session.{name} was released (Session.release) and is not computed twice: "
                "ask for what reads it before releasing it"
            )

    @_result
    def critical_path(self) -> CriticalPath:
        """The critical path of every step: segments that sum to the step time (`analyses.critical_path`)."""
        model = self.dependency_model
        if model.walked:  # stored, walked by a command whose path the store lacks: built again
            model = self.__dict__["dependency_model"] = Session.dependency_model.func(self)
        return model.critical_path()

    def whatif(self, scenario: Scenario | None = None, **changes: tuple) -> WhatIf:
        """The steps predicted under `scenario` (or `Scenario(**changes)`: without, speedup, drop)."""
        sc = scenario if scenario is not None else Scenario(**changes)
        cache = self.__dict__.setdefault("_whatifs", {})
        if sc not in cache:
            cache[sc] = self.dependency_model.what_if(sc)
        return cache[sc]

    @_result
    def roofline(self) -> RooflineResult:
        """Achieved FLOP/s and bandwidth per op and shape against the device's peaks (`analyse_roofline`)."""
        from traceanalyzer.analyses.roofline import analyse_roofline

        return analyse_roofline(self.trace, self.options, lean=self.lean)

    # -- findings --------------------------------------------------------------------------
    # The rules sit a floor above (`traceanalyzer.findings`) and read this Session; importing
    # that package registers its evaluator here, so a Session holds their result without
    # importing them. `import traceanalyzer` is lazy (its names load on first use), so the first
    # findings asked of a Session load the rules by name when nothing registered them yet.
    evaluator: ClassVar[Callable[[Session, Any], list[Any]] | None] = None

    @_result
    def findings(self) -> list[Any]:
        """Every finding of every rule, in registry order (`traceanalyzer.findings.Finding`)."""
        return self._evaluate(None)

    @property
    def findings_by_saving(self) -> list[Any]:
        """The findings by what fixing each would save per step (`Finding.saving_us`, from its
        rule's what-if scenario), largest first. A `low`-confidence estimate is an upper bound, so
        those come after the firm ones; findings without an estimate last, most severe first
        (the order of `findings`)."""
        return sorted(
            self.findings,
            key=lambda f: (f.saving_us is None, f.saving_confidence == "low", -(f.saving_us or 0.0)),
        )

    def findings_of(self, rules: tuple[Any, ...]) -> list[Any]:
        """The findings of some rules only, evaluating no more than they need (all of them come
        from the store when an earlier run kept them)."""
        if "findings" not in self.__dict__ and self.store is not None:
            kept = self.store.get("findings")
            if kept is not self.store.MISSING:
                self.__dict__["findings"] = kept
        if "findings" in self.__dict__:
            ids = {r.id for r in rules}
            return [f for f in self.findings if f.rule in ids]
        return self._evaluate(rules)

    def _evaluate(self, rules: tuple[Any, ...] | None) -> list[Any]:
        if Session.evaluator is None:
            importlib.import_module("traceanalyzer.findings")  # registers the evaluator (a plug-in, by name)
        if Session.evaluator is None:
            raise RuntimeError("no rules registered: import traceanalyzer.findings")
        return Session.evaluator(self, rules)
