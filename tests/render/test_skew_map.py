"""The skew map's colour scale is logarithmic: on dlrm_v100_8ranks the first collective's
lateness reaches 7.6 ms while the others are 0-900 µs; on a linear scale they were all black."""

from __future__ import annotations

import io

import polars as pl
from PIL import Image

from traceanalyzer.render.skew_map import skew_map_png, skew_norm


def test_log_scale_keeps_small_lateness_visible():
    norm = skew_norm(7600.0)
    assert norm(0.0) == 0.0 and abs(norm(7600.0) - 1.0) < 1e-9
    # 100 µs against 7.6 ms: 1.3 % of the way on a linear scale, more than half on this one.
    assert norm(100.0) > 0.5 and norm(1.0) > 0.05 and norm(1.0) < norm(10.0) < norm(100.0)


def test_png_with_job_name():
    arrivals = pl.DataFrame({"rank": [0, 1, 0, 1], "instance": [0, 0, 1, 1], "lateness_us": [0.0, 7600.0, 100.0, 0.0]})
    png = skew_map_png(arrivals, job="dlrm_v100_8ranks")
    assert Image.open(io.BytesIO(png)).size[0] > 800
    assert skew_map_png(arrivals.head(0)) is None
