"""matplotlib figures of the pictures: a figure of a size in pixels (Agg, imported lazily, so
`import traceanalyzer` never loads matplotlib) and its bytes in PNG, SVG or PDF, the same bytes
for the same inputs."""

from __future__ import annotations

import io


def new_figure(width_px: int, height_px: int, dpi: int):
    """A matplotlib Figure of the given size in pixels (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)


def png_bytes(fig, dpi: int) -> bytes:
    """The figure as PNG bytes."""
    return figure_bytes(fig, dpi, "png")


def figure_bytes(fig, dpi: int, fmt: str = "png") -> bytes:
    """The figure as png, svg or pdf bytes (fonts as paths in SVG, so it looks the same
    everywhere; no creation date in PDF/SVG, so equal inputs give equal bytes)."""
    import matplotlib

    buf = io.BytesIO()
    meta = {"Date": None} if fmt in ("svg", "pdf") else None
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "traceanalyzer"}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=meta)
    return buf.getvalue()
