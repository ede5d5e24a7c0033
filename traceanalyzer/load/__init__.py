"""Reading traces: bytes from disk (source), events cut into decodable chunks (chunks),
typed columns per event kind (decode), normalised polars tables (normalize).

`load` is resolved on first use (PEP 562): a module that needs only `load.urls` or
`load.source` does not pull the decoder (polars, numpy, the native extension)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceanalyzer.load.loader import load

__all__ = ["load"]


def __getattr__(name: str) -> Any:
    if name == "load":
        from traceanalyzer.load.loader import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
