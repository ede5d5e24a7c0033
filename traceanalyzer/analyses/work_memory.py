"""Work model of the memory-bound families: elementwise ops, reductions, normalisations (and
softmax), copies. Their arithmetic intensity is far below the ridge point of every GPU in the
peaks table, so they are judged against the memory roof only; FLOPs are a nominal one per
element, for the picture.

Bytes are the compulsory traffic: every tensor argument read once (a broadcast operand at its
own size) and every output written once:
- elementwise: the output has the broadcast shape of the tensor arguments and the dtype of the
  largest one (bool for comparisons); an in-place op (`add_`) writes its first argument, an
  `out=` variant (one tensor argument more than the functional form) its last;
- normalisations, softmax and their backward: one output (or input gradient) of the first
  tensor's size; batch norm in training reads its input twice in practice (statistics, then
  normalisation), so its share of the roof stays under about two thirds;
- reductions: the input read; the (smaller) output is left out, so bytes are a lower bound;
- copies: `copy_` reads the source and writes the destination, `clone` reads and writes its
  input, `fill_` / `zero_` write theirs.
"""

from __future__ import annotations

import math

from traceanalyzer.analyses.work_args import NOT_RECORDED, Args, Work, broadcast

UNARY_BINARY = (
    "abs add addcdiv addcmul bitwise_and bitwise_not bitwise_or ceil clamp clamp_max clamp_min cos div elu erf exp "
    "expm1 floor fmod gelu gelu_backward hardsigmoid hardswish hardtanh hardtanh_backward leaky_relu lerp log log1p "
    "log_sigmoid logical_and logical_not logical_or maximum minimum mish mul neg pow reciprocal relu remainder round "
    "rsqrt rsub sigmoid sigmoid_backward sign silu silu_backward sin softplus sqrt square sub tanh tanh_backward "
    "threshold threshold_backward where masked_fill nan_to_num"
).split()
COMPARISONS = "eq ne lt le gt ge isnan isinf".split()
ELEMENTWISE = frozenset(UNARY_BINARY + COMPARISONS) | frozenset(n + "_" for n in UNARY_BINARY + COMPARISONS)
# Arguments of the functional form: one more, a tensor, is the `out=` variant (`mul.out(self,
# other, out)`), whose output is written, not read.
ARITY = {
    **dict.fromkeys(
        "abs ceil cos erf exp expm1 floor hardsigmoid hardswish log log1p log_sigmoid logical_not bitwise_not mish neg "
        "reciprocal relu rsqrt sigmoid sign silu sin sqrt square tanh isnan isinf".split(),
        1,
    ),
    **dict.fromkeys(
        "mul div maximum minimum pow remainder fmod eq ne lt le gt ge logical_and logical_or bitwise_and bitwise_or "
        "silu_backward sigmoid_backward tanh_backward clamp_min clamp_max leaky_relu gelu".split(),
        2,
    ),
    **dict.fromkeys(
        "add sub rsub where masked_fill lerp threshold threshold_backward gelu_backward clamp hardtanh softplus".split(),
        3,
    ),
    **dict.fromkeys("addcmul addcdiv hardtanh_backward elu nan_to_num".split(), 4),
}
REDUCTIONS = frozenset(
    "sum mean amax amin max min prod norm linalg_vector_norm var std var_mean std_mean argmax argmin any all "
    "logsumexp".split()
)
NORMS = frozenset(
    "layer_norm native_layer_norm group_norm native_group_norm batch_norm native_batch_norm _batch_norm_impl_index "
    "cudnn_batch_norm miopen_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training instance_norm "
    "rms_norm _fused_rms_norm softmax _softmax log_softmax _log_softmax native_layer_norm_backward "
    "cudnn_batch_norm_backward miopen_batch_norm_backward native_batch_norm_backward native_group_norm_backward "
    "_softmax_backward_data _log_softmax_backward_data _fused_rms_norm_backward".split()
)
COPIES = frozenset("copy_ clone fill_ zero_".split())


def elementwise(name: str, args: Args) -> Work | str:
    """Elementwise ops: read every tensor argument, write the broadcast output."""
    ts = args.tensors()
    if not ts:
        return NOT_RECORDED
    if name in ("max", "min") and len(ts) != 2:
        return reduction(args)
    out = args.tensor(len(args) - 1) if len(args) == ARITY.get(name, -1) + 1 else None
    if out is not None and len(ts) > 1:  # the out= variant: written, not read
        ts = ts[:-1]
        return Work("elementwise", float(out.numel), sum(t.nbytes for t in ts) + out.nbytes, ts[0].dtype)
    shape = broadcast([t.shape for t in ts])
    if shape is None:
        return f"tensor shapes {[list(t.shape) for t in ts]} do not broadcast"
    numel = math.prod(shape)
    if name.endswith("_"):
        written = ts[0].nbytes
    elif name.rstrip("_") in COMPARISONS:
        written = numel
    else:
        widest = max((t for t in ts if t.dtype != "bool"), key=lambda t: t.numel, default=ts[0])
        written = numel * widest.itemsize
    return Work("elementwise", float(numel), sum(t.nbytes for t in ts) + written, ts[0].dtype)


def reduction(args: Args) -> Work | str:
    """Reductions: the input read once; the output left out (a lower bound)."""
    ts = args.tensors()
    if not ts:
        return NOT_RECORDED
    x = ts[0]
    return Work(
        "reduction", float(x.numel), sum(t.nbytes for t in ts), x.dtype, "output bytes left out (a lower bound)"
    )


def norm(args: Args) -> Work | str:
    """Normalisations and softmax, forward and backward: read the tensors, write one of the
    first tensor's size."""
    ts = args.tensors()
    if not ts:
        return NOT_RECORDED
    x = ts[0]
    return Work("norm", float(x.numel), sum(t.nbytes for t in ts) + x.nbytes, x.dtype)


def copy(name: str, args: Args) -> Work | str:
    """copy_(dst, src), clone(x), fill_(x, v), zero_(x)."""
    ts = args.tensors()
    if not ts:
        return NOT_RECORDED
    if name == "copy_":
        if len(ts) < 2:
            return NOT_RECORDED
        return Work("copy", 0.0, ts[0].nbytes + ts[1].nbytes, ts[1].dtype)
    if name == "clone":
        return Work("copy", 0.0, 2 * ts[0].nbytes, ts[0].dtype)
    return Work("copy", 0.0, ts[0].nbytes, ts[0].dtype)
