"""Work model of the matmul family and of attention: FLOPs from the recorded shapes.

A GEMM of (M x K) by (K x N) does 2·M·N·K FLOPs (a multiply and an add per term); bias and
alpha/beta epilogues (M·N operations, under 1/K of the rest) are left out. Bytes: both operands
and the bias read once, the M x N result written once, at the operands' element size.

Attention (scaled_dot_product_attention and its flash / efficient / cuDNN kernels): Q·Kᵀ and
P·V are two GEMMs, 2·Lq·Lk·E + 2·Lq·Lk·Ev FLOPs per batch and head; a causal mask keeps only
the unmasked (query, key) pairs (top-left aligned, as PyTorch's `is_causal`); the softmax is
left out. The backward pass recomputes Q·Kᵀ and does four more GEMMs: 2.5 times the forward
(the FlashAttention papers' count).
"""

from __future__ import annotations

import math

from traceanalyzer.analyses.work_args import NOT_RECORDED, Args, Tensor, Work, broadcast

MIXED = "operands of different dtypes (the op it calls is modelled instead)"


def _same_dtype(*ts: Tensor) -> bool:
    return len({t.dtype for t in ts}) == 1


def _gemm(a: Tensor, b: Tensor, batch: int, m: int, k: int, n: int, extra: list[Tensor], note: str = "") -> Work:
    out_bytes = batch * m * n * a.itemsize
    nbytes = a.nbytes + b.nbytes + sum(t.nbytes for t in extra) + out_bytes
    return Work("matmul", 2.0 * batch * m * n * k, nbytes, a.dtype, note)


def mm(args: Args, first: int = 0) -> Work | str:
    """aten::mm / addmm (bias first) / _scaled_mm: (M x K) @ (K x N)."""
    a, b = args.tensor(first), args.tensor(first + 1)
    if a is None or b is None:
        return NOT_RECORDED
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return f"operand shapes {list(a.shape)} x {list(b.shape)} are not a matrix product"
    extra = [t for t in [args.tensor(0)] if first == 1 and t is not None]
    if not _same_dtype(a, b, *extra):
        return MIXED
    return _gemm(a, b, 1, a.shape[0], a.shape[1], b.shape[1], extra)


def scaled_mm(args: Args) -> Work | str:
    """aten::_scaled_mm(a, b, scale_a, scale_b, bias, ...): an FP8 GEMM; the output's dtype is
    not recorded, so its bytes are counted at the inputs' width (a lower bound)."""
    a, b = args.tensor(0), args.tensor(1)
    if a is None or b is None:
        return NOT_RECORDED
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return f"operand shapes {list(a.shape)} x {list(b.shape)} are not a matrix product"
    return _gemm(a, b, 1, a.shape[0], a.shape[1], b.shape[1], [], "output bytes at the input width (a lower bound)")


def bmm(args: Args, first: int = 0) -> Work | str:
    """aten::bmm / baddbmm (bias first): (B x M x K) @ (B x K x N)."""
    a, b = args.tensor(first), args.tensor(first + 1)
    if a is None or b is None:
        return NOT_RECORDED
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return f"operand shapes {list(a.shape)} x {list(b.shape)} are not a batched matrix product"
    extra = [t for t in [args.tensor(0)] if first == 1 and t is not None]
    if not _same_dtype(a, b, *extra):
        return MIXED
    return _gemm(a, b, a.shape[0], a.shape[1], a.shape[2], b.shape[2], extra)


def matmul(args: Args) -> Work | str:
    """aten::matmul: torch.matmul's broadcasting rules (1-D operands are vectors)."""
    a, b = args.tensor(0), args.tensor(1)
    if a is None or b is None:
        return NOT_RECORDED
    if not a.shape or not b.shape:
        return "a 0-d operand is not a matrix product"
    if not _same_dtype(a, b):
        return MIXED
    sa = a.shape if len(a.shape) > 1 else (1, a.shape[0])
    sb = b.shape if len(b.shape) > 1 else (b.shape[0], 1)
    if sa[-1] != sb[-2]:
        return f"operand shapes {list(a.shape)} x {list(b.shape)} are not a matrix product"
    if len(sb) == 2:  # (..., M, K) @ (K, N): the batch folds into M
        return _gemm(a, b, 1, math.prod(sa[:-1]), sa[-1], sb[-1], [])
    batch = broadcast([sa[:-2], sb[:-2]])
    if batch is None:
        return f"batch dimensions of {list(a.shape)} and {list(b.shape)} do not broadcast"
    return _gemm(a, b, math.prod(batch), sa[-2], sa[-1], sb[-1], [])


def linear(args: Args) -> Work | str:
    """aten::linear(x, weight, bias): x (..., K) @ weightᵀ (K x N)."""
    x, w, bias = args.tensor(0), args.tensor(1), args.tensor(2)
    if x is None or w is None:
        return NOT_RECORDED
    if not x.shape or len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        return f"input {list(x.shape)} and weight {list(w.shape)} do not match"
    extra = [bias] if bias is not None else []
    if not _same_dtype(x, w, *extra):
        return MIXED
    return _gemm(x, w, 1, math.prod(x.shape[:-1]), w.shape[1], w.shape[0], extra)


def grouped_mm(args: Args) -> Work | str:
    """aten::_grouped_mm / _scaled_grouped_mm(mat_a, mat_b, ...): G GEMMs in one call. 3-D x 3-D
    is a batch; with a 2-D operand the groups split its rows (or K) by the offsets, and the sum
    over groups is the whole 2-D extent."""
    a, b = args.tensor(0), args.tensor(1)
    if a is None or b is None:
        return NOT_RECORDED
    sa, sb = a.shape, b.shape
    if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and sa[2] == sb[1]:
        g, m, k, n = sa[0], sa[1], sa[2], sb[2]
    elif len(sa) == 2 and len(sb) == 3 and sa[1] == sb[1]:  # rows of a split into groups
        g, m, k, n = 1, sa[0], sa[1], sb[2]
    elif len(sa) == 3 and len(sb) == 2 and sa[2] == sb[0]:  # columns of b split into groups
        g, m, k, n = 1, sa[1], sa[2], sb[1]
    elif len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0]:  # K split into groups, G outputs
        return "grouped over K: the number of groups (the output) is not in the shapes"
    else:
        return f"operand shapes {list(sa)} x {list(sb)} are not a grouped matrix product"
    width = a.itemsize
    nbytes = a.nbytes + b.nbytes + g * m * n * width
    note = "output bytes at the input width (a lower bound)" if a.dtype == "fp8" else ""
    return Work("matmul", 2.0 * g * m * n * k, nbytes, a.dtype, note)


# Attention: where is_causal sits in each op's signature (native_functions.yaml), and whether
# the tensors are (B, H, L, E) ("bhle", the sdpa layout) or (B, L, H, E) (the kernels' own).
CAUSAL_ARG: dict[str, tuple[int, str, bool]] = {
    # name: (is_causal position, layout, backward)
    "scaled_dot_product_attention": (5, "bhle", False),
    "_scaled_dot_product_flash_attention": (4, "bhle", False),
    "_scaled_dot_product_flash_attention_for_cpu": (4, "bhle", False),
    "_scaled_dot_product_efficient_attention": (6, "bhle", False),
    "_scaled_dot_product_cudnn_attention": (6, "bhle", False),
    "_flash_attention_forward": (8, "blhe", False),
    "_scaled_dot_product_flash_attention_backward": (11, "bhle", True),
    "_scaled_dot_product_efficient_attention_backward": (11, "bhle", True),
    "_scaled_dot_product_cudnn_attention_backward": (14, "bhle", True),
    "_flash_attention_backward": (11, "blhe", True),
}


def causal_pairs(lq: int, lk: int) -> int:
    """Unmasked (query, key) pairs under a top-left causal mask: row i sees min(i + 1, Lk) keys."""
    if lq <= lk:
        return lq * (lq + 1) // 2
    return lk * (lk + 1) // 2 + (lq - lk) * lk


def attention(name: str, args: Args) -> Work | str:
    """The scaled-dot-product attention ops of CAUSAL_ARG."""
    pos, layout, backward = CAUSAL_ARG[name]
    first = 1 if backward else 0  # the backward's first argument is grad_out
    q, k, v = args.tensor(first), args.tensor(first + 1), args.tensor(first + 2)
    if q is None or k is None or v is None:
        return NOT_RECORDED
    if len(q.shape) < 3 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        return f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)} are not attention inputs"
    if not _same_dtype(q, k, v):
        return MIXED
    causal = args.flag(pos)
    if causal is None:
        return "is_causal not recorded (no Concrete Inputs)"
    if layout == "bhle":
        batch, lq, e = math.prod(q.shape[:-2]), q.shape[-2], q.shape[-1]
        lk, ev = k.shape[-2], v.shape[-1]
    else:  # (B, L, H, E)
        batch, lq, e = q.shape[0] * q.shape[2], q.shape[1], q.shape[3]
        lk, ev = k.shape[1], v.shape[3]
    pairs = causal_pairs(lq, lk) if causal else lq * lk
    flops = 2.0 * batch * pairs * (e + ev)
    out_bytes = batch * lq * ev * q.itemsize
    read = q.nbytes + k.nbytes + v.nbytes
    mask = args.tensor(3) if name == "scaled_dot_product_attention" else None
    note = "causal" if causal else ""
    if backward:
        # read grad_out, q, k, v, out; write grad_q, grad_k, grad_v
        flops *= 2.5
        nbytes = 2 * out_bytes + 2 * read
    else:
        nbytes = read + out_bytes + (mask.nbytes if mask is not None else 0)
        if mask is not None:
            note = "masked (all pairs counted)"
    return Work("attention", flops, nbytes, q.dtype, note)
