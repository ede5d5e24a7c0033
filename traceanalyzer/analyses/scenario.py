"""A what-if `Scenario`: the change to replay, as plain data (causes removed, name patterns sped
up, ops dropped, blocking calls unsynced). The replay itself is `analyses.whatif`; the rules and
the Session build scenarios without loading it (it pulls numpy and the dependency graph)."""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyzer.errors import UsageError

# Cause -> the CPU layers (t_<layer> of the graph's slices) whose time it removes.
CPU_CAUSES = {
    "data_loading": ("data_loading",),
    "sync": ("sync",),
    "runtime_call": ("runtime_call",),
    "launch_latency": ("launch",),
    "cpu_bound": ("cpu_op", "python"),
    "untraced": ("untraced",),
}
GPU_CAUSES = ("gpu_wait", "kernel_spacing", "peer_wait", "slow_launch")
SCENARIO_CAUSES = tuple(CPU_CAUSES) + GPU_CAUSES


@dataclass(frozen=True)
class Scenario:
    """A change to replay: causes removed, name patterns sped up (pattern, factor), ops dropped."""

    without: tuple[str, ...] = ()
    speedup: tuple[tuple[str, float], ...] = ()
    drop: tuple[str, ...] = ()
    unsync: tuple[int, ...] = ()  # blocking calls (runtime ids) that stop waiting for the GPU
    label: str = ""  # the scenario in words, when its parts are too long to read (many kernel names)

    @classmethod
    def parse(
        cls, without: tuple[str, ...] = (), speedup: tuple[str, ...] = (), drop: tuple[str, ...] = ()
    ) -> Scenario:
        """From command-line strings: `--speedup 'gemm=1.3'` (FACTOR > 0; `inf` removes the work)."""
        bad = [c for c in without if c not in SCENARIO_CAUSES]
        if bad:
            raise UsageError(None, f"--without {bad[0]}: not a cause; one of {', '.join(SCENARIO_CAUSES)}")
        pairs = []
        for s in speedup:
            pattern, sep, factor = s.rpartition("=")
            try:
                f = float(factor)
            except ValueError:
                f = -1.0
            if not sep or not pattern or not f > 0:
                raise UsageError(None, f"--speedup {s!r}: expected PATTERN=FACTOR with FACTOR > 0 (1.3 = 30% faster)")
            pairs.append((pattern, f))
        return cls(tuple(without), tuple(pairs), tuple(drop))

    def describe(self) -> str:
        """The scenario in words."""
        if self.label:
            return self.label
        parts = [f"without {c}" for c in self.without]
        parts += [f"{p} {f:g}x faster" for p, f in self.speedup]
        parts += [f"dropping {d}" for d in self.drop]
        parts += [f"{len(self.unsync)} blocking calls not waiting"] if self.unsync else []
        return ", ".join(parts) or "nothing changed"
