"""Kernel names for display: demangled by a maintained demangler (`cpp_demangle`, the Rust
`cpp_demangle` crate of gimli-rs behind a small binding; names it cannot read stay as they are),
the `void ` and argument list dropped, and template arguments folded to `<…>` below the depth
that tells two kernels of the table apart:

    void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, ...>(int, ...)
    -> at::native::vectorized_elementwise_kernel<…>              (the only one of its name)
    -> at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<…>, at::detail::Array<…>>
                                                                  (beside a FillFunctor one)

The full name stays in JSON and CSV; this is for tables a person reads. Display-time string work
over a table's distinct names, never over events."""

from __future__ import annotations

from functools import lru_cache

MAX_DEPTH = 8  # deeper than any real kernel name needs to be told apart
KEEP_WHOLE = 60  # a name this short keeps its template arguments: they are what tells it apart


@lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """The demangled name of an Itanium-mangled symbol (`_Z…`), else `name` unchanged."""
    if not name.startswith("_Z"):
        return name
    try:
        import cpp_demangle
    except ImportError:  # the binding is a dependency; a broken install still shows the name
        return name
    try:
        return cpp_demangle.demangle(name)
    except Exception:  # noqa: BLE001 - a name the demangler cannot read is shown as recorded
        return name


def strip_signature(text: str) -> str:
    """A C++ function name without `void ` and its argument list: what is left names it."""
    t = text.removeprefix("void ")
    if t.endswith(")") and "(" in t:
        depth = 0
        for k in range(len(t) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(t[k], 0)
            if depth == 0:
                return t[:k] if k > 0 else t
    return t


def fold_templates(text: str, depth: int) -> str:
    """`text` with template arguments nested deeper than `depth` replaced by `…` (depth 0:
    `name<…>`); `>>` closes written without the space C++03 needed."""
    out: list[str] = []
    level = 0
    for ch in text:
        if ch == "<":
            level += 1
            if level == depth + 1:
                out.append("<…")
                continue
        elif ch == ">" and level > 0:
            level -= 1
            if level == depth:
                out.append(">")
                continue
        if level <= depth:
            out.append(ch)
    return "".join(out).replace("> >", ">>").replace("> >", ">>")


def is_cpp(text: str) -> bool:
    """Whether a name reads as C++ (a namespace, a template, a mangled symbol), not a Python frame."""
    return text.startswith(("_Z", "void ")) or ("::" in text and ".py(" not in text)


def short_names(names: list[str]) -> dict[str, str]:
    """Each distinct name -> its display label: demangled, signature dropped, and, when longer
    than `KEEP_WHOLE`, templates folded to the least depth at which no two distinct names of
    `names` share a label."""
    full = {n: strip_signature(demangle(n)) if is_cpp(n) else n for n in dict.fromkeys(names) if n is not None}
    labels: dict[str, str] = {}
    pending = list(full)
    for n in pending:
        if len(full[n]) <= KEEP_WHOLE:
            labels[n] = full[n]
    pending = [n for n in pending if n not in labels]
    for depth in range(MAX_DEPTH + 1):
        if not pending:
            break
        trial = {n: fold_templates(full[n], depth) for n in pending}
        everyone = {**{n: labels[n] for n in labels}, **trial}
        seen: dict[str, set[str]] = {}
        for n, label in everyone.items():
            seen.setdefault(label, set()).add(full[n])
        pending_next = []
        for n in pending:
            if len(seen[trial[n]]) == 1 or depth == MAX_DEPTH:
                labels[n] = trial[n]
            else:
                pending_next.append(n)
        pending = pending_next
    for n in pending:
        labels[n] = full[n]
    return labels
