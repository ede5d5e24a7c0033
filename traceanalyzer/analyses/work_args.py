"""An op's recorded arguments, as the work model reads them: `Input Dims`, `Input type` and
`Concrete Inputs` (the JSON texts `Trace.ops` keeps), one parse per distinct combination.

A tensor argument has a shape (a list of ints) and a dtype the table below knows; a scalar
argument has a type such as `Scalar`, `ScalarList`, `Int` and, where the trace recorded it
(PyTorch 2.x, record_shapes=True), its value as text in `Concrete Inputs` ("[2, 2]", "True").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# Input type -> (dtype name, bytes per element).
DTYPES: dict[str, tuple[str, float]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "short": ("int16", 2),
    "short int": ("int16", 2),
    "int": ("int32", 4),
    "long": ("int64", 8),
    "long int": ("int64", 8),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}


@dataclass(frozen=True)
class Tensor:
    """One tensor argument: its shape, dtype name and element size."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: float

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> float:
        """Size in bytes."""
        return self.numel * self.itemsize


class Args:
    """The arguments of one call, by position."""

    def __init__(self, dims: Any, types: Any, concrete: Any) -> None:
        self.dims = dims if isinstance(dims, list) else []
        self.types = types if isinstance(types, list) else []
        self.concrete = concrete if isinstance(concrete, list) else None

    @classmethod
    def parse(cls, dims: str | None, types: str | None, concrete: str | None) -> Args:
        """From the JSON texts of `Trace.ops` (None where the trace has none)."""
        return cls(_load(dims), _load(types), _load(concrete))

    def __len__(self) -> int:
        return len(self.dims)

    def tensor(self, i: int) -> Tensor | None:
        """Argument `i` as a tensor, or None (absent, a scalar, a tensor list, unknown dtype)."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        shape, t = self.dims[i], self.types[i]
        if not isinstance(shape, list) or not all(isinstance(x, int) for x in shape) or t not in DTYPES:
            return None
        name, size = DTYPES[t]
        return Tensor(tuple(shape), name, size)

    def tensors(self) -> list[Tensor]:
        """Every tensor argument, in order."""
        return [t for t in (self.tensor(i) for i in range(len(self.dims))) if t is not None]

    def value(self, i: int) -> Any:
        """The recorded value of scalar argument `i` (a list, bool, int, float or str), or None
        when the trace did not record it."""
        if self.concrete is None or i >= len(self.concrete):
            return None
        text = self.concrete[i]
        if not isinstance(text, str) or text == "":
            return None
        if text in ("True", "False"):
            return text == "True"
        try:  # Python's repr of a list of bools: "[True, True, False]"
            return json.loads(text.replace("True", "true").replace("False", "false"))
        except ValueError:
            return text.strip("'\"")

    def flag(self, i: int) -> bool | None:
        """Boolean argument `i`, or None when not recorded."""
        v = self.value(i)
        return v if isinstance(v, bool) else None

    def ints(self, i: int, n: int) -> list[int] | None:
        """Integer-list argument `i` broadcast to `n` entries (`[2]` -> `[2, 2]`), or None."""
        v = self.value(i)
        if isinstance(v, int) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list) or not v or not all(isinstance(x, int) for x in v):
            return None
        if len(v) == 1:
            return v * n
        return v if len(v) == n else None


def _load(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The broadcast shape of `shapes` (NumPy rules), or None when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(1, ndim + 1):
        sizes = {s[-k] for s in shapes if len(s) >= k} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(reversed(out))


@dataclass(frozen=True)
class Work:
    """What one call does: FLOPs, bytes of compulsory memory traffic (every input read once,
    every output written once), the dtype it computes in, its family, and what the model
    assumed (`note`)."""

    family: str  # matmul | conv | attention | elementwise | reduction | norm | copy
    flops: float
    bytes: float
    dtype: str
    note: str = ""


NOT_RECORDED = "shapes not recorded (profile with record_shapes=True)"
