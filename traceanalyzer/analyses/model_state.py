"""The what-if `Model` as plain tables, and back: what a cache keeps of it, so that the next
`whatif`, `path`, `syncs` or `summary` on a trace replays the model an earlier command built
rather than building it again (0.5 s at 311 MB, 2 s at 1 GB; a `whatif` that reads it back takes
0.4-0.5 s in all).

The state holds the graph's tables, the replay's flat arrays (`replay.Prepared`), each as a
one-column DataFrame (a cache writes frames as Arrow files, not inside its pickle), and the
model's small fields; not the trace, nor what is the trace's own (the nodes' names, the GPU
activities' device and stream, `DependencyGraph`): the model `restored` gives reads those from
the Trace it is given when asked (`DependencyGraph.trace_columns`), which must be the trace the
model was built on (its rows in the same order; the cache's Trace is, columns a command dropped
aside). The capture's replay (`Model.base`) is not kept: it is replayed again when asked
(milliseconds). Pure conversion: no I/O here."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import polars as pl

from traceanalyzer.analyses.graph_table import DependencyGraph
from traceanalyzer.analyses.replay import Prepared
from traceanalyzer.analyses.whatif import Model
from traceanalyzer.trace import Trace

# What the trace holds of the graph (`dependency_graph.build_graph` takes them from it), restored from it.
FROM_TRACE = ("runtime_names", "op_names", "gpu_names", "gpu_lanes", "names_from")
_KEPT = ("kernel_spacing_ns", "slow_launch_ns", "_gpu_launch", "_replayed", "_walked")  # the Model's own fields


def model_state(model: Model) -> dict[str, Any]:
    """`model` as tables and scalars (see the module docstring)."""
    g = model.graph
    graph = {f.name: getattr(g, f.name) for f in dataclasses.fields(g) if f.name not in FROM_TRACE}
    if graph["layer_of"] is not None:
        graph["layer_of"] = graph["layer_of"].to_frame()
    prepared = {f.name: _frame(getattr(model.prepared, f.name)) for f in dataclasses.fields(model.prepared)}
    return {"graph": graph, "prepared": prepared, **{k: getattr(model, k) for k in _KEPT}}


def restored(trace: Trace, state: dict[str, Any]) -> Model:
    """The Model `model_state` gave, on `trace` (the one it was built on)."""
    graph = dict(state["graph"])
    if graph["layer_of"] is not None:
        graph["layer_of"] = graph["layer_of"].to_series()
    # the names and lanes read from the trace when asked (`DependencyGraph.trace_columns`): not
    # the three tables a what-if never reads
    graph.update(dict.fromkeys(FROM_TRACE), names_from=trace)
    prepared = Prepared(**{k: _array(v) for k, v in state["prepared"].items()})
    model = object.__new__(Model)  # its fields as they were: no build (`Model.__post_init__`)
    model.trace, model.graph, model.prepared, model._base = trace, DependencyGraph(**graph), prepared, None
    for k in _KEPT:
        setattr(model, k, state[k])
    return model


def _frame(a: np.ndarray | None) -> pl.DataFrame | None:
    return None if a is None else pl.Series("a", a).to_frame()


def _array(df: pl.DataFrame | None) -> np.ndarray | None:
    # one chunk without nulls, as written: numpy reads it in place (read only; nothing writes it)
    return None if df is None else df.to_series().to_numpy()
