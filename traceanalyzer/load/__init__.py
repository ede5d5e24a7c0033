"""Reading traces: bytes from disk (source), events cut into decodable chunks (chunks),
typed columns per event kind (decode), normalised polars tables (normalize)."""

from traceanalyzer.load.loader import load

__all__ = ["load"]
