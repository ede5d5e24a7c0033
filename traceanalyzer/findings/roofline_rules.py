"""Rules over the `roofline` analysis: an op and shape that holds a good share of GPU time and
runs far below the roof of its bound. One finding per op/shape, with advice that fits the
bound (compute: precision and shapes; memory: fusion and batch)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import polars as pl

from traceanalyzer.findings.engine import Finding, Rule, severity

if TYPE_CHECKING:
    from traceanalyzer.session import Session

MAX_FINDINGS = 5


def _unaligned(dims: str | None, multiple: int) -> list[int]:
    """Tensor dimensions (of the GEMM's operands) that are not multiples of `multiple`."""
    try:
        shapes = json.loads(dims or "[]")
    except ValueError:
        return []
    sizes = {d for s in shapes if isinstance(s, list) for d in s[-2:] if isinstance(d, int) and d > 1}
    return sorted(d for d in sizes if d % multiple)


def advice(row: dict, peaks: dict) -> str:
    """What to try for one op/shape row, by its bound, family and dtype."""
    family, dtype, bound = row["family"], row["dtype"], row["bound"]
    if bound == "compute":
        if dtype == "fp32" and peaks.get("bf16"):
            ratio = peaks["bf16"] / (row["peak_tflops"] or peaks["bf16"])
            return (
                f"run it in bfloat16/float16 (torch.autocast): this device's 16-bit Tensor Core roof is {ratio:,.1f}x "
                "the one it meets in FP32"
                + ("; or allow TF32 (torch.set_float32_matmul_precision('high'))" if peaks.get("tf32") else "")
            )
        multiple = 16 if dtype in ("fp8", "int8") else 8
        odd = _unaligned(row["input_dims"], multiple)
        pad = f"pad {', '.join(map(str, odd[:6]))} to multiples of {multiple}" if odd else "shapes are aligned"
        return (
            f"{pad} so Tensor Core tiles fill; a bigger batch (or fewer, larger GEMMs) gives the GPU more to do per "
            "launch; check the kernels it runs (`kernels`) for a Tensor Core path"
        )
    if family in ("matmul", "conv"):
        return (
            "too little work per byte at this shape (a small inner dimension or a large output): fuse it with what "
            "consumes its output (attention scores: scaled_dot_product_attention), or give each GEMM more work "
            "(a bigger batch, bmm / grouped GEMMs over many small ones)"
        )
    if family == "attention":
        return "use a fused attention kernel (scaled_dot_product_attention with the flash or memory-efficient backend)"
    if "softmax" in row["op"]:
        return (
            "a softmax over attention scores: a fused attention kernel (scaled_dot_product_attention) never writes "
            "the scores to memory; otherwise fuse it with its neighbours (torch.compile)"
        )
    return (
        "fuse it with its neighbours (torch.compile, or fused kernels such as fused optimizers and norms) so the "
        "tensor crosses device memory once; tiny tensors want a bigger batch"
    )


def _far_from_roofline(ses: Session) -> list[Finding]:
    r = ses.roofline
    if not r.gpu_us or r.ops.is_empty():
        return []
    o = ses.options.roofline
    rows = r.ops.filter(
        pl.col("peak_share").is_not_null()
        & (pl.col("peak_share") < o.far_from_roofline_share)
        & (pl.col("gpu_us") >= o.roofline_min_gpu_share * r.gpu_us)
    ).head(MAX_FINDINGS)
    peaks = {d["device"]: d for d in r.devices.to_dicts()}
    out = []
    for row in rows.iter_rows(named=True):
        share = row["peak_share"]
        roof = (
            f"{row['peak_tflops']:,.0f} TFLOP/s ({row['roof']})"
            if row["bound"] == "compute"
            else f"{row['peak_gbps']:,.0f} GB/s"
        )
        achieved = (
            f"{row['achieved_tflops']:,.1f} TFLOP/s"
            if row["bound"] == "compute"
            else f"{row['achieved_gbps']:,.0f} GB/s"
        )
        out.append(
            Finding(
                "far_from_roofline",
                severity(share, o.far_from_roofline_share, below=True),
                f"{row['op']} {row['input_dims']} ({row['dtype']}, {row['calls']:,} calls) holds "
                f"{row['gpu_us'] / r.gpu_us:.1%} of GPU time at {share:.0%} of its {row['bound']} roof "
                f"({achieved} of {roof})",
                {
                    "op": row["op"],
                    "input_dims": row["input_dims"],
                    "dtype": row["dtype"],
                    "bound": row["bound"],
                    "peak_share": share,
                    "gpu_us": row["gpu_us"],
                    "gpu_share": row["gpu_us"] / r.gpu_us,
                    "headroom_us": row["headroom_us"],
                },
                advice(row, peaks.get(row["device"], {})),
                (
                    {
                        k: row[k]
                        for k in (
                            "op",
                            "input_dims",
                            "calls",
                            "gpu_us",
                            "achieved_tflops",
                            "achieved_gbps",
                            "intensity",
                        )
                    },
                ),
                # at stake: the GPU time the op would give back at its roof
                at_stake_us=row["headroom_us"],
            )
        )
    return out


RULES = (
    Rule(
        "far_from_roofline",
        "An op/shape holding much GPU time far below its roof (compute or memory)",
        ("far_from_roofline_share", "roofline_min_gpu_share", "peak_tflops", "peak_gbps"),
        "precision, shapes padded to multiples of 8/16, fused kernels, bigger batch (by the bound)",
        _far_from_roofline,
        ("roofline",),
    ),
)
