"""Work model of convolutions, forward and backward, from the recorded shapes and the stride,
padding, dilation, transposition and groups the trace recorded in `Concrete Inputs`.

Forward: every output element is a dot product over (Cin / groups) x prod(kernel) inputs:
FLOPs = 2 · N · Cout · prod(output spatial) · (Cin / groups) · prod(kernel), where the weight
is (Cout, Cin / groups, k...) and the output size is floor((in + 2·pad − dil·(k − 1) − 1) /
stride) + 1. A transposed convolution scatters every input element: 2 · N · Cin · prod(input
spatial) · (Cout / groups) · prod(kernel), its weight (Cin, Cout / groups, k...). The bias add
is left out of the FLOPs (its bytes are counted).

Backward: the input gradient and the weight gradient each cost the forward's FLOPs, and
`output_mask` says which were computed. The gradient of the output gives the output's spatial
size, so the backward needs no stride.
"""

from __future__ import annotations

import math

from traceanalyzer.analyses.work_args import NOT_RECORDED, Args, Tensor, Work

NO_ARGS = "stride/padding not recorded (no Concrete Inputs: PyTorch before 2.0, or record_shapes off)"

# name: positions of (input, weight, bias, stride, padding, dilation, transposed, output_padding,
# groups); None: not an argument of that op (bias absent, never transposed). From
# native_functions.yaml; cudnn/miopen put padding before stride.
CONV_ARGS: dict[str, tuple[int | None, ...]] = {
    "conv1d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "conv2d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "conv3d": (0, 1, 2, 3, 4, 5, None, None, 6),
    "convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "cudnn_convolution": (0, 1, None, 3, 2, 4, None, None, 5),
    "miopen_convolution": (0, 1, 2, 4, 3, 5, None, None, 6),
    "conv_transpose1d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose2d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose3d": (0, 1, 2, 3, 4, 7, True, 5, 6),
}


def _out_size(size: int, k: int, stride: int, pad: int, dil: int, transposed: bool, out_pad: int) -> int:
    if transposed:
        return (size - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _padding(args: Args, i: int, n: int, kernel: tuple[int, ...], dil: list[int]) -> list[int] | None:
    v = args.value(i)
    if v == "valid":
        return [0] * n
    if v == "same":  # stride 1 only: total padding dil·(k − 1), an odd total pads one side more
        return (
            None
            if any(d * (k - 1) % 2 for d, k in zip(dil, kernel))
            else [d * (k - 1) // 2 for d, k in zip(dil, kernel)]
        )
    return args.ints(i, n)


def conv(name: str, args: Args) -> Work | str:
    """A forward convolution op of CONV_ARGS."""
    xi, wi, bi, si, pi, di, ti, opi, gi = CONV_ARGS[name]
    x, w = args.tensor(xi), args.tensor(wi)
    if x is None or w is None:
        return NOT_RECORDED
    nsp = len(w.shape) - 2
    if nsp < 1:
        return f"weight {list(w.shape)} is not a convolution kernel"
    shape = x.shape if len(x.shape) == nsp + 2 else (1, *x.shape) if len(x.shape) == nsp + 1 else None
    if shape is None:
        return f"input {list(x.shape)} does not match weight {list(w.shape)}"
    if args.concrete is None:
        return NO_ARGS
    kernel = w.shape[2:]
    transposed = ti if isinstance(ti, bool) else (args.flag(ti) if ti is not None else False)
    stride, dil = args.ints(si, nsp), args.ints(di, nsp)
    groups = args.value(gi)
    out_pad = args.ints(opi, nsp) if opi is not None else [0] * nsp
    pad = _padding(args, pi, nsp, kernel, dil) if dil is not None else None
    if None in (transposed, stride, dil, pad, out_pad) or not isinstance(groups, int) or groups < 1:
        return NO_ARGS
    n, cin, spatial = shape[0], shape[1], shape[2:]
    per_group = w.shape[1]
    if (w.shape[0] if transposed else per_group * groups) != cin:
        return f"input {list(x.shape)}, weight {list(w.shape)} and groups {groups} do not match"
    out = [
        _out_size(s, k, st, p, d, transposed, op)
        for s, k, st, p, d, op in zip(spatial, kernel, stride, pad, dil, out_pad)
    ]
    if min(out) < 1:
        return f"no output for input {list(x.shape)} and weight {list(w.shape)}"
    cout = per_group * groups if transposed else w.shape[0]
    if transposed:
        flops = 2.0 * n * cin * math.prod(spatial) * per_group * math.prod(kernel)
    else:
        flops = 2.0 * n * cout * math.prod(out) * per_group * math.prod(kernel)
    bias = args.tensor(bi) if bi is not None else None
    nbytes = x.nbytes + w.nbytes + (bias.nbytes if bias is not None else 0) + n * cout * math.prod(out) * x.itemsize
    note = f"stride {stride}, padding {pad}" + (f", dilation {dil}" if any(d != 1 for d in dil) else "")
    note += f", groups {groups}" if groups != 1 else ""
    note += ", transposed" if transposed else ""
    return Work("conv", flops, nbytes, x.dtype, note)


def _forward_flops(go: Tensor, x_or_none: Tensor | None, w: Tensor, transposed: bool) -> float | None:
    kernel = math.prod(w.shape[2:])
    if transposed:  # the forward scattered every input element
        if x_or_none is None:
            return None
        return 2.0 * x_or_none.shape[0] * x_or_none.shape[1] * math.prod(x_or_none.shape[2:]) * w.shape[1] * kernel
    return 2.0 * go.shape[0] * go.shape[1] * math.prod(go.shape[2:]) * w.shape[1] * kernel


def convolution_backward(args: Args) -> Work | str:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)."""
    go, x, w = args.tensor(0), args.tensor(1), args.tensor(2)
    if go is None or x is None or w is None:
        return NOT_RECORDED
    if len(go.shape) != len(w.shape) or len(x.shape) != len(w.shape) or len(w.shape) < 3:
        return f"grad_output {list(go.shape)}, input {list(x.shape)}, weight {list(w.shape)} do not match"
    mask, transposed = args.value(10), args.flag(7)
    if not isinstance(mask, list) or len(mask) != 3 or transposed is None:
        return "output_mask not recorded (no Concrete Inputs)"
    flops = _forward_flops(go, x, w, transposed)
    grads = int(bool(mask[0])) + int(bool(mask[1]))
    written = (
        (x.nbytes if mask[0] else 0) + (w.nbytes if mask[1] else 0) + (go.shape[1] * go.itemsize if mask[2] else 0)
    )
    which = ", ".join(g for g, m in zip(("input", "weight", "bias"), mask) if m)
    return Work("conv", grads * flops, go.nbytes + x.nbytes + w.nbytes + written, go.dtype, f"gradients of {which}")


def cudnn_backward_input(args: Args) -> Work | str:
    """aten::cudnn_convolution_backward_input(self_size, grad_output, weight, ...), as 2021
    traces record it: the input's size is a list the trace left out, so bytes miss the
    gradient written (a lower bound)."""
    go, w = args.tensor(1), args.tensor(2)
    if go is None or w is None:
        return NOT_RECORDED
    if len(go.shape) != len(w.shape) or len(w.shape) < 3 or go.shape[1] != w.shape[0]:
        return f"grad_output {list(go.shape)} and weight {list(w.shape)} do not match"
    flops = _forward_flops(go, None, w, False)
    return Work(
        "conv", flops, go.nbytes + w.nbytes, go.dtype, "gradient of input; its bytes not recorded (a lower bound)"
    )
