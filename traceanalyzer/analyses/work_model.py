"""The work model: FLOPs and bytes of one op call from its recorded arguments, per op family
(`work_matmul`, `work_conv`, `work_memory`), and the table of it for every distinct
(name, Input Dims, Input type, Concrete Inputs) combination of a trace.

Only `aten::` ops are modelled; any other op, and an aten op whose arguments do not say enough,
gets a reason instead of numbers: nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import polars as pl

from traceanalyzer.analyses import work_conv, work_matmul, work_memory
from traceanalyzer.analyses.work_args import Args, Work

NO_MODEL = "no work model for this op"

MODELS: dict[str, Callable[[Args], Work | str]] = {
    "mm": work_matmul.mm,
    "addmm": lambda a: work_matmul.mm(a, first=1),
    "bmm": work_matmul.bmm,
    "baddbmm": lambda a: work_matmul.bmm(a, first=1),
    "matmul": work_matmul.matmul,
    "linear": work_matmul.linear,
    "_scaled_mm": work_matmul.scaled_mm,
    "_grouped_mm": work_matmul.grouped_mm,
    "_scaled_grouped_mm": work_matmul.grouped_mm,
    "convolution_backward": work_conv.convolution_backward,
    "cudnn_convolution_backward_input": work_conv.cudnn_backward_input,
    # 2021 traces: which gradients were computed, and the weight's size, went unrecorded.
    "cudnn_convolution_backward": lambda a: "output_mask not recorded (no Concrete Inputs)",
    "cudnn_convolution_backward_weight": lambda a: "the weight's size was not recorded (no Concrete Inputs)",
}
for _name in work_conv.CONV_ARGS:
    MODELS[_name] = lambda a, n=_name: work_conv.conv(n, a)
for _name in work_matmul.CAUSAL_ARG:
    MODELS[_name] = lambda a, n=_name: work_matmul.attention(n, a)
for _name in work_memory.ELEMENTWISE:
    MODELS[_name] = lambda a, n=_name: work_memory.elementwise(n, a)
for _name in work_memory.REDUCTIONS:
    MODELS.setdefault(_name, work_memory.reduction)
for _name in work_memory.NORMS:
    MODELS[_name] = work_memory.norm_work
for _name in work_memory.COPIES:
    MODELS[_name] = lambda a, n=_name: work_memory.copy(n, a)
MODELS["max"] = lambda a: work_memory.elementwise("max", a)  # max(a, b) is elementwise, max(a) a reduction
MODELS["min"] = lambda a: work_memory.elementwise("min", a)

MODELLED_NAMES = tuple(sorted("aten::" + n for n in MODELS))

WORK_SCHEMA = {
    "name": pl.String,
    "input_dims": pl.String,
    "input_type": pl.String,
    "concrete_inputs": pl.String,
    "family": pl.String,
    "flops": pl.Float64,
    "bytes": pl.Float64,
    "dtype": pl.String,
    "note": pl.String,
    "reason": pl.String,
}
KEYS = ["name", "input_dims", "input_type", "concrete_inputs"]


def model_call(name: str, dims: str | None, types: str | None, concrete: str | None) -> Work | str:
    """The work of one call of op `name` with these argument texts, or why there is none."""
    base = name.removeprefix("aten::")
    fn = MODELS.get(base) if name.startswith("aten::") else None
    if fn is None:
        return NO_MODEL
    return fn(Args.parse(dims, types, concrete))


# The model is a pure function of the argument texts, and the ranks of one job (the files one
# worker analyses in turn) share their shapes: a DLRM rank's 187 combinations cost ~5 ms of its
# ~120 ms CPU each time. Bounded: a few thousand combinations a trace, each a few hundred bytes.
_model_memo = lru_cache(maxsize=1 << 14)(model_call)


def work_rows(distinct: pl.DataFrame) -> pl.DataFrame:
    """WORK_SCHEMA: the work of each row of `distinct` (KEYS, each combination once), in its
    order. The Python model runs once per combination (shapes repeat: tens of thousands of calls
    share a few hundred), and remembers the last 16k combinations' work across traces
    (`_model_memo`)."""
    rows = []
    for name, dims, types, concrete in zip(*(distinct.get_column(k).to_list() for k in KEYS), strict=True):
        w = _model_memo(name, dims, types, concrete)
        if isinstance(w, Work):
            rows.append((name, dims, types, concrete, w.family, w.flops, w.bytes, w.dtype, w.note, None))
        else:
            rows.append((name, dims, types, concrete, None, None, None, None, None, w))
    return pl.DataFrame(rows, schema=WORK_SCHEMA, orient="row")
