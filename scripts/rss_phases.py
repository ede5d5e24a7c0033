"""RSS by phase of one command, run in this process: the load, each Session result as it is
computed (nested under the one that asked for it), and the output, with the RSS before and
after each, the highest a sampler thread saw meanwhile (every 2 ms, `/proc/self/statm`) and
how far that is above both (its transient), where the command's code stood when it was seen
(the innermost package frames, `at`), and the highest of the whole run so far.

    python scripts/rss_phases.py gaps /tmp/big/t300.json --no-cache --format json -o /tmp/x.json
    _RJEM_MALLOC_CONF=narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0 python scripts/rss_phases.py ...

With polars' allocator purging at once (the second line), RSS is the live bytes: what a phase
keeps and what its transients add on top of the Trace (docs/performance.md). Without it, the
command's own allocator setting applies (`narenas:1,muzzy_decay_ms:0`, as `traceanalyzer` sets:
`cli.main.ALLOCATOR_CONF`, checked once polars is loaded). Linux only.
"""

from __future__ import annotations

import os
import sys
import threading
import time

CLI_CONF = "narenas:1,muzzy_decay_ms:0"  # cli.main.ALLOCATOR_CONF: set before polars loads, as the console script does
os.environ.setdefault("_RJEM_MALLOC_CONF", CLI_CONF)
PAGE = os.sysconf("SC_PAGE_SIZE")
MAIN = threading.get_ident()
PEAK = [0.0, "start"]
STACK: list[str] = []
OWN: list[list] = []  # per open phase: its highest RSS and the main thread's frames when seen


def rss_mb() -> float:
    """This process's resident set, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def _sample() -> None:
    while True:
        r = rss_mb()
        if r > PEAK[0]:
            PEAK[0], PEAK[1] = r, "/".join(STACK) or "start"
        for own in list(OWN):
            if r > own[0]:
                own[0], own[1] = r, _where()
        time.sleep(0.002)


def _where() -> str:
    """The innermost frames of the package in the main thread, innermost first."""
    f, out = sys._current_frames().get(MAIN), []
    while f is not None and len(out) < 4:
        if f"{os.sep}traceanalyzer{os.sep}" in f.f_code.co_filename:
            out.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}")
        f = f.f_back
    return " < ".join(out)


def _phase(name: str, fn):
    """Run fn() as the phase `name`; print its RSS in and out, its own peak (how far above both,
    and where), and the peak so far."""
    STACK.append(name)
    r0, t0 = rss_mb(), time.perf_counter()
    OWN.append([r0, ""])
    try:
        return fn()
    finally:
        line = f"{'  ' * (len(STACK) - 1)}{name:24s} {r0:7.0f} -> {rss_mb():7.0f} MB"
        own, at = OWN.pop()
        line += f"  own peak {own:7.0f} (+{own - max(r0, rss_mb()):4.0f})  peak so far {PEAK[0]:.0f} ({PEAK[1]})"
        print(f"{line}  {time.perf_counter() - t0:.2f} s  at {at}", file=sys.stderr)
        STACK.pop()


def main() -> int:
    threading.Thread(target=_sample, daemon=True).start()
    import traceanalyzer.cli.commands.common as common
    import traceanalyzer.session as session
    from traceanalyzer.cli.main import ALLOCATOR_CONF
    from traceanalyzer.cli.main import main as cli

    assert CLI_CONF == ALLOCATOR_CONF, f"rss_phases.CLI_CONF is not the command's setting {ALLOCATOR_CONF!r}"

    get = session._result.__get__

    def result(self, inst, owner=None):
        if inst is None or self.attrname in inst.__dict__:
            return get(self, inst, owner)
        return _phase(self.attrname, lambda: get(self, inst, owner))

    session._result.__get__ = result
    opened, emit = common._open, common.emit
    common._open = lambda *a, **k: _phase("load", lambda: opened(*a, **k))
    common.emit = lambda *a, **k: _phase("output", lambda: emit(*a, **k))
    t0 = time.perf_counter()
    try:
        return cli(sys.argv[1:])
    finally:
        print(f"peak {PEAK[0]:.0f} MB ({PEAK[1]}), {time.perf_counter() - t0:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
