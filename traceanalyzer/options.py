"""Analysis options: one frozen dataclass per analysis, a documented default per field.

The CLI flags and the JSON `thresholds` are both generated from these fields (see
`traceanalyzer.cli_options`), so the two cannot drift apart. No click import here: the
library's import path stays free of the CLI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

DATA_LOADING_PATTERN = r"(?i)enumerate\(DataLoader\)|DataLoaderIter|DataLoader.*__next__|data[_ ]?load"
SYNC_API_PATTERN = (
    r"^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize$|^(cuda|hip)Memcpy(2D|3D)?$|^hipMemcpyWithStream$"
    r"|^cuCtxSynchronize$|^cuStreamSynchronize$|^cuEventSynchronize$|^cuMemcpy(DtoH|HtoD)?(_v2)?$"
)


def opt(default: Any, help: str, *, flag: str | None = None) -> Any:
    """A dataclass field carrying its CLI help text (and optionally its flag name)."""
    return field(default=default, metadata={"help": help, "flag": flag})


@dataclass(frozen=True)
class GapOptions:
    min_gap_us: float = opt(100.0, "list GPU idle gaps of at least this many µs", flag="--min-gap")
    launch_latency_us: float = opt(
        30.0,
        "a gap counts as launch latency when the next kernel started within this many µs of its "
        "launch call returning (queued before the gap) or was launched this soon after the gap began",
        flag="--launch-latency",
    )
    data_loading_pattern: str = opt(
        DATA_LOADING_PATTERN, "regular expression naming data-loading ranges (DataLoader __next__ ...)"
    )


def thresholds(options: Any) -> dict[str, Any]:
    """The options as the JSON `thresholds` object: field name -> value."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


def option_fields(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))
