"""The layout the contributors' notes promise: data flows one way, no import cycle, renderers
never run an analysis, modules stay small, each basic notion is defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "traceanalyzer"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(path: Path, modules: set[str], type_checking: bool = False, functions: bool = False) -> set[str]:
    """Modules of the package that `path` imports: at module level by default; with
    `type_checking`, also those under `if TYPE_CHECKING:`; with `functions`, also those imported
    inside functions (deferred imports still tie one floor to another)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if type_checking:
                    visit(node.body)
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if functions:
                    visit(node.body)
                continue
            if isinstance(node, ast.ClassDef):
                visit(node.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules
                # `from pkg import submodule` imports the submodule; `from pkg import name`, pkg
                found.update(subs or {node.module})
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return {m for m in found if m in modules}


def _graph(type_checking: bool, functions: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    names = set(mods)
    graph = {m: _imports(p, names, type_checking, functions) - {m} for m, p in mods.items()}
    # A package's __init__ importing its own submodules is how packages work, not a cycle.
    for m in graph:
        graph[m] = {d for d in graph[m] if not (d.startswith(m + ".") and mods[m].name == "__init__.py")}
    return graph


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d) :] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                dfs(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m)


def test_no_import_cycle():
    _assert_acyclic(_graph(type_checking=False))


def test_no_import_cycle_under_type_checking():
    _assert_acyclic(_graph(type_checking=True))


# The floors, bottom up (CONTRIBUTING.md): a module imports its own floor and those below, never
# one above. `traceanalyzer` itself (the public API) sits on top of everything and nothing
# imports it. The vocabulary floor holds what every floor reads: the data model, options, name
# patterns, errors, the loader.
FLOORS = [
    (
        "vocabulary",
        (
            "errors",
            "trace",
            "patterns",
            "options",
            "redact",
            "links",
            "links_native",
            "version",
            "causes",
            "option_field",
            "job_options",
            "units",
            "wording",
            "reprs",
            "chain",
            "pool_thread",
            "keys",
            "load",
        ),
    ),
    ("analyses", ("analyses",)),
    ("session", ("session",)),
    ("findings and jobs", ("findings", "jobs", "registry")),
    ("render", ("report", "render")),
    ("cli", ("cli", "__main__")),
]


def _floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, (_, tops) in enumerate(FLOORS):
        if top in tops:
            return i
    raise AssertionError(f"{module} sits on no floor: add it to FLOORS and CONTRIBUTING.md")


def test_every_module_imports_only_its_floor_and_below():
    graph = _graph(type_checking=True, functions=True)
    wrong = []
    for m, deps in sorted(graph.items()):
        if m == "traceanalyzer":
            continue
        for d in sorted(deps):
            if d == "traceanalyzer" or _floor(d) > _floor(m):
                wrong.append(f"{m} imports {d}")
    assert not wrong, wrong


def test_renderers_receive_results_only():
    """A renderer never imports an analysis, the Session, the rules or the jobs (not even for
    types): it is handed plain results, Reports and tables."""
    graph = _graph(type_checking=True, functions=True)
    banned = ("traceanalyzer.analyses", "traceanalyzer.session", "traceanalyzer.findings", "traceanalyzer.jobs")
    wrong = {
        (m, d)
        for m, deps in sorted(graph.items())
        if m.startswith("traceanalyzer.render")
        for d in sorted(deps)
        if d.startswith(banned)
    }
    assert not wrong, sorted(wrong)


def test_click_lives_in_the_cli_floor_only():
    for p in PACKAGE.rglob("*.py"):
        if "cli" in p.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n == "click" or n.startswith("click.") for n in names), p


def test_the_loader_and_its_worker_pool_do_not_import_each_other():
    mods = _modules()
    names = set(mods)
    assert "traceanalyzer.load.loader" not in _imports(mods["traceanalyzer.load.parallel"], names)
    text = mods["traceanalyzer.load.parallel"].read_text()
    # no reach into private names of another module
    assert not re.search(r"\b(loader|source|tables)\._\w", text) and "._owns" not in text and "._fh" not in text


def test_renderers_never_run_an_analysis():
    for p in (PACKAGE / "render").rglob("*.py"):
        text = p.read_text()
        assert "analyse_" not in text, p
        assert "blocking_calls(" not in text and "op_context(" not in text and "classify_gaps(" not in text, p


def test_commands_read_a_session():
    for p in (PACKAGE / "cli").rglob("*.py"):
        assert not re.search(
            r"\banalyse_(gaps|syncs|copies|stages|steps|kernels|memory|ops|findings)\(", p.read_text()
        ), p


def test_modules_stay_small():
    big = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, big


def _code_strings(path: Path) -> list[str]:
    """String constants of a module's code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_patterns_are_defined_once():
    """The ProfilerStep, DataLoader, collective and sync-API patterns live in patterns.py only."""
    pieces = [
        "ProfilerStep#(",
        r"enumerate\(DataLoader",
        "nccl|rccl",
        "Synchronize$",
        "StreamWaitEvent$",
        "(?i)pageable",
    ]
    for p in PACKAGE.rglob("*.py"):
        if p.name == "patterns.py":
            continue
        for s in _code_strings(p):
            assert not any(piece in s for piece in pieces), (p, s)


def test_public_names_have_docstrings():
    missing = []
    for p in PACKAGE.rglob("*.py"):
        tree = ast.parse(p.read_text())

        def walk(node, where, prefix=""):
            for n in ast.iter_child_nodes(node):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    if not n.name.startswith("_") and ast.get_docstring(n) is None:
                        missing.append(f"{where}:{n.lineno} {prefix}{n.name}")
                    if isinstance(n, ast.ClassDef):
                        walk(n, where, prefix + n.name + ".")

        walk(tree, p.relative_to(PACKAGE))
    assert not missing, missing
