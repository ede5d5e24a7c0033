"""Re-run the example commands of README.md and docs/*.md and put their real output back.

A fenced block whose first line starts with `$ ` is an example: each `$ ` line is run from the
repository root (at 100 columns, `COLUMNS=100`) and followed by what it printed (stdout; stderr
too for commands that only report what they wrote). `$ echo $?` prints the previous exit status.
Run: `.venv/bin/python scripts/refresh_docs.py` (needs ../shared/traces).

The cause tables of README.md and docs/causes.md are written from the registry
(`traceanalyzer.causes`) between their markers; `--causes` rewrites only those (no trace needed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOISE = "pid/tid values were written as strings"


def run_block(commands: list[str]) -> list[str]:
    out: list[str] = []
    rc = 0
    env = dict(os.environ, COLUMNS="100")
    for cmd in commands:
        out.append(f"$ {cmd}")
        if cmd == "echo $?":
            out.append(str(rc))
            continue
        p = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True, env=env)
        rc = p.returncode
        err = [line for line in p.stderr.splitlines() if NOISE not in line]
        out += (err if not p.stdout.strip() or rc else []) + p.stdout.rstrip("\n").splitlines()
        if p.stdout.strip() and rc == 0:
            out[len(out) - len(p.stdout.rstrip("\n").splitlines()) : len(out)] = [
                *(e for e in err if e.startswith("traceanalyzer: warning")),
                *p.stdout.rstrip("\n").splitlines(),
            ]
    return out


def refresh(path: Path) -> None:
    text = path.read_text()

    def replace(m: re.Match) -> str:
        body = m.group(2).splitlines()
        commands = [line[2:] for line in body if line.startswith("$ ")]
        return m.group(1) + "\n".join(run_block(commands)) + "\n```"

    new = re.sub(r"(```text\n)(\$ .*?)\n```", replace, text, flags=re.S)
    if new != text:
        path.write_text(new)
        print(f"refreshed {path.relative_to(ROOT)}", file=sys.stderr)


def refresh_cause_tables() -> None:
    """Write the registry's cause tables between the markers of README.md and docs/causes.md."""
    from traceanalyzer.causes import markdown_table, table_marker

    for name, long in (("README.md", False), ("docs/causes.md", True)):
        path = ROOT / name
        text = path.read_text()
        begin, end = table_marker(long)
        block = f"{begin}\n{markdown_table(long)}\n{end}"
        new = re.sub(re.escape(begin) + r"\n.*?\n" + re.escape(end), lambda _m, b=block: b, text, flags=re.S)
        if new != text:
            path.write_text(new)
            print(f"refreshed the cause table of {name}", file=sys.stderr)


if __name__ == "__main__":
    refresh_cause_tables()
    if "--causes" not in sys.argv[1:]:
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            refresh(page)
