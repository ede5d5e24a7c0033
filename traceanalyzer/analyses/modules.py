"""Which nn.Module each op ran in, from the `nn.Module: Name_N` Python frames a trace captured
`with_modules=True` (or with_stack) holds.

An op's module is the innermost module frame open on its thread when it started; its module
path is the names of the module frames around it, outermost first, joined by "/" (`Owlv2ForObjectDetection_0/Owlv2Model_0/Owlv2VisionTransformer_0/...`).
Traces without module frames give every op a null module.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.analyses.op_tree import ancestors
from traceanalyzer.links import innermost_containing, nest
from traceanalyzer.patterns import NN_MODULE
from traceanalyzer.trace import Trace

MODULE_SCHEMA = {"op_id": pl.Int64, "module": pl.String, "module_path": pl.String}


def op_modules(trace: Trace) -> pl.DataFrame:
    """op_id, module (the innermost module's name), module_path: one row per op inside a module."""
    frames = trace.python.filter(pl.col("name").str.contains(NN_MODULE))
    if frames.is_empty() or trace.ops.is_empty():
        return pl.DataFrame(schema=MODULE_SCHEMA)
    frames = nest(frames.drop("depth", "parent_id"), "frame_id").with_columns(
        short=pl.col("name").str.replace(NN_MODULE + r"\s*", "")
    )
    ops = innermost_containing(
        trace.ops.select("op_id", "pid", "tid", "ts_ns", "end_ns"), frames, "frame_id", "_frame", point_end="ts_ns"
    )
    inside = ops.filter(pl.col("_frame").is_not_null())
    tree = frames.select(op_id="frame_id", parent_id="parent_id")
    paths = (
        ancestors(tree, inside["_frame"].unique())
        .join(frames.select(ancestor_id="frame_id", short="short"), on="ancestor_id")
        .sort(["op_id", "level"], descending=[False, True])
        .group_by("op_id", maintain_order=True)
        .agg(module_path=pl.col("short").str.join("/"), module=pl.col("short").last())
        .rename({"op_id": "_frame"})
    )
    return inside.join(paths, on="_frame", how="left").select(list(MODULE_SCHEMA)).cast(MODULE_SCHEMA)
