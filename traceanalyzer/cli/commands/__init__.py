"""One module per subcommand: parse options, open a Session, hand a Report to a renderer.
Each module exposes a click command named `command`, and is named after it.

`COMMANDS` registers them: command name -> the one-line summary `traceanalyzer --help` lists (the
first paragraph of the command's help, kept here so that listing the commands imports none of them).
The group in `cli.main` imports a command's module only when that command runs or shows its help;
tests/cli/test_lazy_commands.py checks that every module exists and that its help starts with the
summary given here."""

COMMANDS: dict[str, str] = {
    "gaps": "Every GPU idle gap, what the CPU was doing, and which op and Python line caused it.",
    "memory": "Device memory from profile_memory traces: the peak, who holds it, top allocating ops, growth per "
    "step, allocator cache, and allocations never freed.",
    "diff": "Compare two traces (before and after one change): step time with a noise-aware verdict, GPU busy, "
    "idle by cause, stage times, copies and syncs per step, ops and kernels by name.",
    "copies": "Every GPU memcpy and memset, the op and Python line that issued it, and what it cost.",
    "syncs": "Every point where the CPU waited for the GPU, the bubble it left, and the op and line behind it.",
    "timeline": "Draw a timeline (PNG, SVG or PDF) of one step: CPU threads, GPU streams, idle gaps shaded by cause.",
    "report": "Write report.md (+ pictures, + --html) for an incident ticket.",
    "annotate": "Write the trace plus tracks marking gaps, sync stalls and exposed copies (for Perfetto).",
    "stages": "Per step, each moment given to exactly one stage by priority (data loading, copies, forward, "
    "backward, optimizer, sync wait, other CPU, GPU idle).",
    "ops": "Per op name: calls, self/total CPU time and self/total GPU time (key_averages from the trace).",
    "kernels": "Per kernel name: calls, time, share, grid/block, Tensor Cores, launching ops; short-kernel census.",
    "roofline": "Per op and shape: achieved TFLOP/s and GB/s, intensity, bound and share of the device's peak.",
    "rules": "List every finding rule with its thresholds, the commands that show it, and its advice.",
    "summary": "One screen: devices, steps, GPU busy, stages, idle causes, syncs, top ops and kernels, findings.",
    "path": "Critical path of each step: segments summing to the step time, shares by kind and by op/kernel.",
    "whatif": "Predicted step time with a cause removed, kernels/ops sped up or ops dropped (replay of the trace).",
}

# The commands whose output `cli.replay` keeps and prints again for the same command line on the
# same trace, with the flags that make a run do more than print its report (never replayed).
# A command is here only when everything it prints goes through `common.emit` and `common._open`.
REPLAYABLE: dict[str, tuple[str, ...]] = {
    "gaps": ("--plot", "--fail-on"),
    "summary": ("--fail-on",),
    "syncs": (),
    "copies": (),
    "kernels": (),
    "ops": (),
    "stages": (),
    "memory": (),
    "roofline": ("--plot",),
    "path": (),
    "whatif": (),
}
