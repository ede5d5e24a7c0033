"""The work model, family by family, against FLOPs and bytes worked out by hand from the raw
JSON of real traces (the event's `Input Dims`, `Input type` and `Concrete Inputs` quoted in
each test), or from shapes chosen here where no shared trace has the op."""

from __future__ import annotations

import functools
import gzip
import json
import math

import pytest

from traceanalyzer.analyses.work_args import Work
from traceanalyzer.analyses.work_matmul import causal_pairs
from traceanalyzer.analyses.work_model import model_call

H100 = "h100_owlv2_inference.json.gz"
MI300X = "mi300x_ddp_resnet_4ranks/rank0_trace_0_20_0.json.gz"
V100 = "v100_resnet50_dataloader_workers0.pt.trace.json.gz"
A100 = "a100_multistream_syncs.json.gz"


@functools.lru_cache(maxsize=4)
def _events(path) -> list:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _first_event(path, name, dims=None) -> dict:
    """The first CPU op called `name` (with these Input Dims) in the raw JSON."""
    for e in _events(path):
        a = e.get("args") or {}
        if e.get("name") == name and (dims is None or a.get("Input Dims") == dims):
            return a
    raise AssertionError(f"no {name} in {path}")


def _model(name: str, args: dict) -> Work | str:
    text = {
        k: (json.dumps(args[k]) if args.get(k) is not None else None)
        for k in ("Input Dims", "Input type", "Concrete Inputs")
    }
    return model_call(name, text["Input Dims"], text["Input type"], text["Concrete Inputs"])


def test_addmm_from_the_raw_json(SHARED_TRACES):
    # h100_owlv2's first aten::addmm: Input Dims [[1024], [5185, 1024], [1024, 1024], [], []],
    # BFloat16: a (5185 x 1024) @ (1024 x 1024) GEMM plus a bias of 1024.
    a = _first_event(SHARED_TRACES / H100, "aten::addmm")
    assert a["Input Dims"][:3] == [[1024], [5185, 1024], [1024, 1024]]
    w = _model("aten::addmm", a)
    assert w.family == "matmul" and w.dtype == "bf16"
    assert w.flops == 2 * 5185 * 1024 * 1024  # 10,873,733,120
    # bias, a, b read and the 5185 x 1024 result written, 2 bytes each
    assert w.bytes == 2 * (1024 + 5185 * 1024 + 1024 * 1024 + 5185 * 1024)


def test_linear_bmm_mm_from_the_raw_json(SHARED_TRACES):
    lin = _first_event(SHARED_TRACES / H100, "aten::linear", [[1, 5185, 1024], [1024, 1024], [1024]])
    assert _model("aten::linear", lin).flops == 2 * (1 * 5185) * 1024 * 1024
    bmm = _first_event(SHARED_TRACES / H100, "aten::bmm", [[16, 5185, 64], [16, 64, 5185]])
    w = _model("aten::bmm", bmm)
    assert w.flops == 2 * 16 * 5185 * 64 * 5185
    assert w.bytes == 2 * (16 * 5185 * 64 * 2 + 16 * 5185 * 5185)
    mm = _first_event(SHARED_TRACES / H100, "aten::matmul", [[1, 768], [768, 768]])
    assert _model("aten::matmul", mm).flops == 2 * 1 * 768 * 768


def test_linear_of_mixed_dtypes_leaves_it_to_the_op_inside(SHARED_TRACES):
    # mi300x's aten::linear under autocast: Input type [c10::Half, float, float]; its addmm is all Half.
    a = _first_event(SHARED_TRACES / MI300X, "aten::linear")
    assert a["Input type"] == ["c10::Half", "float", "float"]
    assert "different dtypes" in _model("aten::linear", a)


def test_convolution_from_the_raw_json(SHARED_TRACES):
    # h100_owlv2's patch embedding: input [1, 3, 1008, 1008], weight [1024, 3, 14, 14],
    # Concrete Inputs stride [14, 14], padding [0, 0], dilation [1, 1], groups 1: output 72 x 72
    # ((1008 - 13 - 1) // 14 + 1 = 72), each a dot product over 3 x 14 x 14 inputs.
    for name in ("aten::conv2d", "aten::convolution", "aten::cudnn_convolution"):
        a = _first_event(SHARED_TRACES / H100, name)
        w = _model(name, a)
        assert w.flops == 2 * 1 * 1024 * 72 * 72 * 3 * 14 * 14, name
    conv = _model("aten::conv2d", _first_event(SHARED_TRACES / H100, "aten::conv2d"))
    # input, weight and the [1, 1024, 72, 72] output, 2 bytes each (no bias: Input Dims [] there)
    assert conv.bytes == 2 * (3 * 1008 * 1008 + 1024 * 3 * 14 * 14 + 1024 * 72 * 72)


def test_miopen_convolution_puts_padding_before_stride(SHARED_TRACES):
    # mi300x's stem: input [256, 3, 32, 32], weight [64, 3, 7, 7]; conv2d says stride [2, 2],
    # padding [3, 3]; miopen_convolution records ["", "", "", "[3, 3]", "[2, 2]", ...]: padding
    # first. Output (32 + 6 - 6 - 1) // 2 + 1 = 16 per side.
    for name in ("aten::conv2d", "aten::miopen_convolution"):
        a = _first_event(
            SHARED_TRACES / MI300X,
            name,
            [[256, 3, 32, 32], [64, 3, 7, 7]] + [[]] * (5 if name == "aten::conv2d" else 7),
        )
        assert _model(name, a).flops == 2 * 256 * 64 * 16 * 16 * 3 * 7 * 7, name


def test_convolution_backward_from_the_raw_json(SHARED_TRACES):
    # mi300x: grad_output [256, 2048, 1, 1], input [256, 512, 1, 1], weight [2048, 512, 1, 1],
    # output_mask [True, True, False]: the input and weight gradients, each the forward's
    # 2 * 256 * 2048 * 1 * 512 * 1 FLOPs.
    a = _first_event(
        SHARED_TRACES / MI300X,
        "aten::convolution_backward",
        [[256, 2048, 1, 1], [256, 512, 1, 1], [2048, 512, 1, 1]] + [[]] * 8,
    )
    assert a["Concrete Inputs"][10] == "[True, True, False]"
    w = _model("aten::convolution_backward", a)
    assert w.flops == 2 * (2 * 256 * 2048 * 512)
    # read grad_output, input, weight; write grad_input and grad_weight (Half: 2 bytes)
    assert w.bytes == 2 * (256 * 2048 + 256 * 512 + 2048 * 512 + 256 * 512 + 2048 * 512)


def test_2021_conv_backward_input_and_what_it_cannot_know(SHARED_TRACES):
    # v100 (2021 schema, no Concrete Inputs): cudnn_convolution_backward_input with grad_output
    # [32, 2048, 7, 7] and weight [2048, 512, 1, 1]: 2 * 32 * 2048 * 49 * 512 FLOPs.
    a = _first_event(
        SHARED_TRACES / V100,
        "aten::cudnn_convolution_backward_input",
        [[], [32, 2048, 7, 7], [2048, 512, 1, 1]] + [[]] * 7,
    )
    assert _model("aten::cudnn_convolution_backward_input", a).flops == 2 * 32 * 2048 * 49 * 512
    fwd = _first_event(SHARED_TRACES / V100, "aten::conv2d")
    assert "not recorded" in _model("aten::conv2d", fwd)
    assert "not recorded" in _model(
        "aten::cudnn_convolution_backward", _first_event(SHARED_TRACES / V100, "aten::cudnn_convolution_backward")
    )


def test_elementwise_bytes_from_the_raw_json(SHARED_TRACES):
    # h100 residual add: two [1, 5185, 1024] BFloat16 tensors read, one written.
    a = _first_event(SHARED_TRACES / H100, "aten::add", [[1, 5185, 1024], [1, 5185, 1024], []])
    w = _model("aten::add", a)
    assert w.family == "elementwise" and w.bytes == 3 * 5185 * 1024 * 2
    # a100: aten::mul [[11192, 8192], [], [11192, 8192]] (float, double, float) is mul.out(self,
    # other, out) with `other` a 0-d double tensor (8 bytes): self and other read, out written;
    # the out tensor is not read.
    m = _first_event(SHARED_TRACES / A100, "aten::mul", [[11192, 8192], [], [11192, 8192]])
    assert m["Input type"] == ["float", "double", "float"]
    assert _model("aten::mul", m).bytes == 2 * 11192 * 8192 * 4 + 8
    # v100 in-place add_ of two [256, 256, 3, 3] float tensors: both read, the first written.
    add_ = _first_event(SHARED_TRACES / V100, "aten::add_", [[256, 256, 3, 3], [256, 256, 3, 3], []])
    assert _model("aten::add_", add_).bytes == 3 * 256 * 256 * 9 * 4


def test_norm_and_copy_bytes_from_the_raw_json(SHARED_TRACES):
    # h100 layer_norm of [1, 5185, 1024] BFloat16 with weight and bias [1024]: x, weight, bias
    # read, y written.
    a = _first_event(SHARED_TRACES / H100, "aten::layer_norm", [[1, 5185, 1024], [], [1024], [1024], [], []])
    assert _model("aten::layer_norm", a).bytes == 2 * (2 * 5185 * 1024 + 2 * 1024)
    c = _first_event(SHARED_TRACES / H100, "aten::copy_")
    dims, types = c["Input Dims"], c["Input type"]
    size = {"c10::BFloat16": 2, "float": 4, "c10::Half": 2, "long int": 8, "int": 4, "bool": 1, "unsigned char": 1}
    n = [math.prod(dims[0]), math.prod(dims[1])]
    assert _model("aten::copy_", c).bytes == n[0] * size[types[0]] + n[1] * size[types[1]]


def _args(dims, types, concrete=None) -> tuple[str, str, str | None]:
    return json.dumps(dims), json.dumps(types), json.dumps(concrete) if concrete is not None else None


def test_attention_forward_backward_causal():
    # q, k, v [2, 8, 1024, 64] bfloat16: Q·Kᵀ and P·V, 2·(2·8)·1024·1024·(64 + 64) FLOPs; causal
    # keeps 1024·1025/2 of the 1024² pairs.
    q = [2, 8, 1024, 64]
    bf = "c10::BFloat16"
    full = 2 * 16 * 1024 * 1024 * 128
    causal = 2 * 16 * (1024 * 1025 // 2) * 128
    dims, types, conc = _args(
        [q, q, q, [], [], [], [], []],
        [bf, bf, bf, "", "Scalar", "Scalar", "", "Scalar"],
        ["", "", "", "", "0.", "True", "", "False"],
    )
    assert model_call("aten::scaled_dot_product_attention", dims, types, conc).flops == causal
    conc_off = json.dumps(["", "", "", "", "0.", "False", "", "False"])
    w = model_call("aten::scaled_dot_product_attention", dims, types, conc_off)
    assert w.flops == full and w.bytes == 4 * (2 * 8 * 1024 * 64) * 2
    # flash forward: (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    d2, t2, c2 = _args(
        [q, q, q, [], [], [], []],
        [bf, bf, bf, "Scalar", "Scalar", "Scalar", ""],
        ["", "", "", "0.", "True", "False", ""],
    )
    assert model_call("aten::_scaled_dot_product_flash_attention", d2, t2, c2).flops == causal
    # flash backward: grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    # dropout_p, is_causal, ...: 2.5 times the forward
    lse = [2, 8, 1024]
    d3, t3, c3 = _args(
        [q, q, q, q, q, lse, [], [], [], [], [], [], [], []],
        [bf] * 5 + ["float", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "", ""],
        [""] * 8 + ["1024", "1024", "0.", "True", "", ""],
    )
    assert model_call("aten::_scaled_dot_product_flash_attention_backward", d3, t3, c3).flops == 2.5 * causal
    # no Concrete Inputs: no way to know the mask
    assert "not recorded" in model_call("aten::scaled_dot_product_attention", dims, types, None)


def test_causal_pairs_by_hand():
    assert causal_pairs(4, 4) == 4 + 3 + 2 + 1
    assert causal_pairs(2, 5) == 1 + 2  # top-left: row i sees i + 1 keys
    assert causal_pairs(5, 2) == 1 + 2 + 2 + 2 + 2


def test_scaled_and_grouped_gemms():
    e4 = "c10::Float8_e4m3fn"
    d, t, c = _args(
        [[128, 256], [256, 512], [], [], [], [], [], []], [e4, e4, "float", "float", "", "", "", ""], [""] * 8
    )
    w = model_call("aten::_scaled_mm", d, t, c)
    assert w.dtype == "fp8" and w.flops == 2 * 128 * 256 * 512
    # 2-D x 3-D grouped: 96 rows split over 4 experts of [4, 256, 512]
    bf = "c10::BFloat16"
    d, t, c = _args([[96, 256], [4, 256, 512], [4]], [bf, bf, "int"], ["", "", ""])
    assert model_call("aten::_grouped_mm", d, t, c).flops == 2 * 96 * 256 * 512
    d, t, c = _args([[4, 32, 256], [4, 256, 512]], [bf, bf], ["", ""])
    assert model_call("aten::_grouped_mm", d, t, c).flops == 2 * 4 * 32 * 256 * 512


@pytest.mark.parametrize(
    "name, dims, types",
    [
        ("vllm::unified_attention_with_output", [[888, 8, 64]], ["c10::BFloat16"]),
        ("aten::embedding", [[1000, 64], [32]], ["float", "long int"]),
        ("aten::mm", None, None),
    ],
)
def test_unmodelled_ops_say_why(name, dims, types):
    why = model_call(name, json.dumps(dims) if dims else None, json.dumps(types) if types else None, None)
    assert isinstance(why, str) and why
