"""The command's start-up and the garbage collector.

Importing polars, click and the package allocates some 300,000 objects that live until the
process ends; the cyclic collector runs ~90 times over them during the imports (~0.01 CPU-s of a
0.35 s `gaps` on a 10 MB trace). The console entry point (`cli.main.run`) turns the collector off
(`begin`); once the modules every working command needs are imported (`cli.commands.common`
calls `done`) it is on again, with what the imports made frozen out of every later collection.
Only the entry point does this: a notebook's or a test's process keeps its collector as it is.
"""

from __future__ import annotations

import gc

_PAUSED = False


def begin() -> None:
    """Pause the collector for the imports (the console entry point only)."""
    global _PAUSED
    if gc.isenabled():
        gc.disable()
        _PAUSED = True


def done() -> None:
    """The imports are done: freeze what they made and collect again, if `begin` paused it."""
    global _PAUSED
    if _PAUSED:
        _PAUSED = False
        gc.freeze()
        gc.enable()
