"""Pure functions from a Trace (and options) to polars DataFrames or small frozen dataclasses.
No printing, no file I/O."""
