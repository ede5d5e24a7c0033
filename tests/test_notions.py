"""Each notion is defined once (CONTRIBUTING.md, "One definition of each notion"), checked on the
syntax tree of every module, not on strings: a second definition fails here with its place.

PENDING lists what still spells a notion a second time while it is being moved (issue #21): a
module that must be handed the result a floor above. It only shrinks, and is empty now."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "traceanalyzer"

PENDING: set[tuple[str, str]] = set()  # (notion, module)


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def _where(notion: str, test, allowed: set[str]) -> list[str]:
    found = {name for name, tree in _trees().items() if any(test(n) for n in ast.walk(tree))}
    pending = {m for n, m in PENDING if n == notion}
    assert not (pending - found), f"{notion}: {sorted(pending - found)} is done: remove it from PENDING"
    return sorted(found - allowed - pending)


def _is_reach(node: ast.AST) -> bool:
    """`X.cum_max()` shifted one row down (`.shift(1)`): the furthest end of the earlier rows."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "shift"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Attribute)
        and node.func.value.func.attr == "cum_max"
        and [ast.unparse(a) for a in node.args] in (["1"], [])
    )


def test_the_interval_sweep_lives_in_intervals():
    """Merging intervals, outermost intervals and overlaps all rest on one sweep
    (`intervals.reach`): the timeline's bars and runs of calls (merged in `cli/pictures` and
    `cpu_activity.call_runs`), and the health check of CPU events that cross on their thread
    (once a count the loader made with its own sweep)."""
    assert _where("interval sweep", _is_reach, {"analyses/intervals.py"}) == []


def _compares_to(value: str):
    def test(node: ast.AST) -> bool:
        return isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value == value for c in [node.left, *node.comparators]
        )

    return test


def test_sync_stalls_are_defined_by_the_syncs_analysis():
    """`kind != "gpu_wait"` once: `SyncsResult.stalls`, `.waits`, `.stall_apis` for the rest.
    `gpu_wait` is also a gap cause, decided by the classifier."""
    # The critical path and the what-if replay name gpu_wait as a segment kind and a cause to
    # remove; they do not test whether a sync stalled.
    allowed = {"analyses/syncs.py", "analyses/gap_causes.py", "analyses/critical_path.py", "analyses/whatif.py"}
    assert _where("a cause spelled outside its home", _compares_to("gpu_wait"), allowed) == []


def _reads_data_pattern(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "contains"
        and any("data_loading_pattern" in ast.unparse(a) or "data_pattern" in ast.unparse(a) for a in node.args)
    )


def test_data_loading_ranges_are_found_in_one_place():
    """`cpu_activity.data_loading_ranges` (the Session's `activity.data_ranges`)."""
    assert _where("data-loading ranges", _reads_data_pattern, {"analyses/cpu_activity.py"}) == []


def _short_kernel_test(node: ast.AST) -> bool:
    return isinstance(node, ast.Compare) and any(
        isinstance(n, ast.Attribute) and n.attr in ("short_kernel_us", "threshold_us") for n in ast.walk(node)
    )


def test_short_kernels_are_counted_by_the_kernels_analysis():
    """`KernelsResult.short` and `.short_names`: the rules read them."""
    assert _where("short kernels", _short_kernel_test, {"analyses/kernels.py"}) == []


def _plural_test(node: ast.AST) -> bool:
    if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in ("plural", "nouns", "noun"):
        return True
    # `'s' if n != 1 else ''`
    return isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant) and node.body.value == "s"


def test_one_plural():
    assert _where("plural", _plural_test, {"wording.py"}) == []


def _health_line_test(node: ast.AST) -> bool:
    if not isinstance(node, ast.JoinedStr):
        return False
    attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return {"severity", "check", "message"} <= attrs


def test_one_health_line():
    """`HealthCheck.line()` words a check the same in every output."""
    assert _where("health line", _health_line_test, {"analyses/health.py"}) == []


def _analysis_functions() -> set[str]:
    names = set()
    for p in (PACKAGE / "analyses").glob("*.py"):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                names.add(node.name)
    return names


def test_renderers_call_no_analysis_function():
    """Not by name (`analyse_`): no render module calls any public function of `analyses/`
    (`step_windows(...)`, `blocking_calls(...)`), whatever it is called or imported as."""
    functions = _analysis_functions()

    def calls_one(node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        return name in functions

    found = [m for m in _where("an analysis called by a renderer", calls_one, set()) if m.startswith("render/")]
    assert found == []


def test_copies_and_syncs_are_handed_the_blocking_calls():
    """`blocking_calls` is built once (the Session's `activity`); an analysis that needs it
    takes it as a keyword and computes it only when called alone."""
    wrong = []
    for name, tree in _trees().items():
        if not name.startswith("analyses/") or name == "analyses/cpu_activity.py":
            continue
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            calls = [
                n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("blocking_calls")
            ]
            params = {a.arg for a in (*fn.args.args, *fn.args.kwonlyargs)}
            if calls and "blocking" not in params:
                wrong.append(f"{name}:{fn.name}")
    assert wrong == []


def _from_origin(node: ast.AST) -> bool:
    """`(x - origin) / 1000` (or `/ 1e6`): a time made relative to the trace start by hand."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    scale = isinstance(node.right, ast.Constant) and node.right.value in (1000, 1e3, 1e6)
    return scale and any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) and "origin" in ast.unparse(n.right)
        for n in ast.walk(node.left)
    )


def test_times_from_the_trace_start_are_made_in_units():
    """Results keep ns on the trace clock; `units` turns them into µs or ms from the trace start
    for display (`display_us`, `point_us`, `point_ms`)."""
    assert _where("time from the trace start", _from_origin, {"units.py"}) == []


def test_no_round_trip_from_microseconds_back_to_nanoseconds():
    """`round(r["start_us"] * 1000)` rebuilt a ns time from a result's µs column; the ns are in
    the results. (Thresholds given in µs, `o.min_gap_us * 1000`, are options, not results.)"""

    def is_us_column(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and not (node.args and ast.unparse(node.func).endswith("col")):
            return False
        key = node.slice if isinstance(node, ast.Subscript) else node.args[0]
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.endswith("_us")

    def back_to_ns(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mult)
            and isinstance(node.right, ast.Constant)
            and node.right.value == 1000
            and any(is_us_column(n) for n in ast.walk(node.left) if isinstance(n, (ast.Subscript, ast.Call)))
        )

    assert _where("µs back to ns", back_to_ns, set()) == []
