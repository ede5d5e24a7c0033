"""The roofline analysis: the level ops are reported at, their GPU time, the roof they meet,
the peaks table, and no op above its device's peak on any shared trace."""

from __future__ import annotations

import glob

import polars as pl
import pytest

import traceanalyzer as ta
from tests.synthetic import TraceBuilder
from traceanalyzer.analyses.peaks import PEAKS, find_peaks
from traceanalyzer.analyses.roofline import analyse_roofline
from traceanalyzer.options import Options, RooflineOptions
from traceanalyzer.patterns import FEWER_FLOPS_KERNEL
from traceanalyzer.trace import Device

BF = "c10::BFloat16"


def _shapes(dims, types, concrete=None) -> dict:
    args = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return args


def _h100(b: TraceBuilder) -> TraceBuilder:
    b.metadata["deviceProperties"][0].update(name="NVIDIA H100 80GB HBM3", numSms=132, computeMajor=9)
    return b


def test_linear_is_reported_once_with_its_childs_kernel(tmp_path):
    # aten::linear (4096 x 4096 bf16, bias) calls aten::addmm, whose launch runs one 200 µs
    # Tensor Core kernel. Both are modelled; the outer one is reported, with the child's kernel.
    b = _h100(TraceBuilder())
    x, w, bias = [4096, 4096], [4096, 4096], [4096]
    b.op("aten::linear", 0, 100, **_shapes([x, w, bias], [BF] * 3, ["", "", ""]))
    b.op("aten::addmm", 10, 80, **_shapes([bias, x, w, [], []], [BF] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"]))
    b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", 20, 200, launch_ts=20)
    r = analyse_roofline(ta.load(b.write(tmp_path)))
    assert r.ops["op"].to_list() == ["aten::linear"]
    row = r.ops.row(0, named=True)
    flops = 2 * 4096 * 4096 * 4096
    assert row["flops_per_call"] == flops and row["gpu_us"] == 200.0 and row["calls"] == 1
    assert row["achieved_tflops"] == pytest.approx(flops / 200e-6 / 1e12)  # 687.2 TFLOP/s
    # bytes: x, w, bias read, the 4096 x 4096 result written, 2 bytes each; intensity 1,365 FLOPs
    # per byte is past H100's ridge (989.4 TFLOP/s / 3,350 GB/s = 295): compute-bound, BF16 roof.
    assert row["bytes_per_call"] == 2 * (3 * 4096 * 4096 + 4096)
    assert (row["roof"], row["bound"], row["tensor_cores"]) == ("bf16", "compute", True)
    assert row["peak_share"] == pytest.approx(flops / 200e-6 / 1e12 / 989.4)
    assert r.modelled_gpu_us == r.gpu_us == 200.0
    # underneath, integer ns: the kernel's 200 µs; and the µs left below the BF16 roof
    assert (r.gpu_ns, r.modelled_gpu_ns, r.ops_ns["gpu_ns"].to_list()) == (200_000, 200_000, [200_000])
    assert row["headroom_us"] == pytest.approx(200 * (1 - flops / 200e-6 / 1e12 / 989.4))


def test_attention_on_a_synthetic_trace(tmp_path):
    # sdpa over q, k, v [2, 8, 1024, 64] bf16, causal, one 500 µs flash kernel: 2·16·524,800·128
    # FLOPs (1024·1025/2 unmasked pairs), i.e. 4.30 TFLOP/s.
    b = _h100(TraceBuilder())
    q = [2, 8, 1024, 64]
    conc = ["", "", "", "", "0.", "True", "", "False"]
    b.op(
        "aten::scaled_dot_product_attention",
        0,
        100,
        **_shapes([q, q, q, [], [], [], [], []], [BF] * 3 + [""] * 5, conc),
    )
    b.op(
        "aten::_scaled_dot_product_flash_attention",
        5,
        90,
        **_shapes([q, q, q, [], [], [], []], [BF] * 3 + ["Scalar"] * 3 + [""], ["", "", "", "0.", "True", "False", ""]),
    )
    b.kernel("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", 10, 500, launch_ts=10)
    r = analyse_roofline(ta.load(b.write(tmp_path)))
    row = r.ops.row(0, named=True)
    assert r.ops.height == 1 and row["op"] == "aten::scaled_dot_product_attention" and row["note"] == "causal"
    flops = 2 * 16 * (1024 * 1025 // 2) * 128
    assert row["flops_per_call"] == flops
    assert row["achieved_tflops"] == pytest.approx(flops / 500e-6 / 1e12)


def test_unknown_device_gets_no_peak_unless_the_flags_give_one(tmp_path):
    b = TraceBuilder()  # "Synthetic GPU": in no table
    b.op("aten::mm", 0, 100, **_shapes([[1024, 1024], [1024, 1024]], ["float", "float"], ["", ""]))
    b.kernel("volta_sgemm_128x64_nn", 20, 100, launch_ts=20)
    trace = ta.load(b.write(tmp_path))
    r = analyse_roofline(trace)
    assert r.ops["peak_share"].to_list() == [None] and r.devices["part"].to_list() == [None]
    assert "no peaks known" in r.devices["found"][0]
    flags = analyse_roofline(trace, RooflineOptions(peak_tflops=100.0, peak_gbps=1000.0))
    row = flags.ops.row(0, named=True)
    # 2·1024³ FLOPs in 100 µs = 21.47 TFLOP/s; intensity 2·1024³ / (3·1024²·4) = 170.7 > ridge 100
    assert row["bound"] == "compute" and row["peak_share"] == pytest.approx(2 * 1024**3 / 100e-6 / 1e12 / 100.0)
    assert flags.devices["found"][0] == "from the flags"


@pytest.mark.parametrize(
    "name, mem_gib, cc, cus, part",
    [
        ("NVIDIA H100 80GB HBM3", 79, "9.0", 132, "H100 SXM5"),
        ("NVIDIA H100 PCIe", 80, "9.0", 114, "H100 PCIe"),
        ("NVIDIA H100 NVL", 94, "9.0", 132, "H100 NVL"),
        ("Tesla V100-DGXS-32GB", 32, "7.0", 80, "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", 32, "7.0", 80, "V100 SXM2"),
        ("NVIDIA A100-SXM4-80GB", 80, "8.0", 108, "A100 SXM4 80GB"),
        ("NVIDIA A100-PG509-200", 39.4, "8.0", 108, "A100 SXM4 40GB"),  # the shared trace: 42,297,524,224 bytes
        ("NVIDIA A100 80GB PCIe", 80, "8.0", 108, "A100 PCIe 80GB"),
        ("NVIDIA B200", 179, "10.0", 148, "B200"),
        ("NVIDIA GB10", 119, "12.1", 48, "GB10"),
        ("NVIDIA H200", 140, "9.0", 132, "H200 SXM"),
        ("NVIDIA GH200 480GB", 95, "9.0", 132, "GH200 96GB HBM3"),
        ("Tesla T4", 15, "7.5", 40, "T4"),
        ("NVIDIA GeForce RTX 2080 Ti", 11, "7.5", 68, "RTX 2080 Ti"),
        ("AMD Radeon Graphics", 64, "9.0", 104, "MI250 (one GCD)"),  # mi250_rocm_minitoy's name
        ("AMD Instinct MI300X", 192, "9.4", 304, "MI300X"),
        ("AMD Radeon Graphics", 192, "9.4", 304, "MI300X"),
    ],
)
def test_peaks_by_device_name(name, mem_gib, cc, cus, part):
    peaks, _ = find_peaks(Device(0, name, int(mem_gib * 2**30), cus, cc))
    assert peaks is not None and peaks.part == part


def test_peaks_table_is_dense_and_sourced():
    # Datasheet figures: H100 SXM BF16 1,979 TFLOP/s with sparsity -> 989.4 dense; A100 312.
    assert PEAKS["H100 SXM5"].bf16 == 989.4 and PEAKS["A100 SXM4 80GB"].bf16 == 312.0
    assert PEAKS["V100 SXM2"].fp32 == 15.7 and PEAKS["V100 SXM2"].bf16 is None
    for p in PEAKS.values():
        assert p.source and p.memory_gbps
    assert find_peaks(Device(0, "Some New GPU", None, None, None))[0] is None


def test_gpu_time_agrees_with_the_ops_table(SHARED_TRACES):
    # The roofline's GPU time of an op is the ops table's total GPU time (its kernels and its
    # children's): on h100_owlv2 every aten::linear is reported at its own level.
    ses = ta.Session.open(SHARED_TRACES / "h100_owlv2_inference.json.gz")
    lin = ses.roofline.ops_ns.filter(pl.col("op") == "aten::linear")
    ops = ses.ops.table_ns.filter(pl.col("name") == "aten::linear").row(0, named=True)
    assert lin["gpu_ns"].sum() == ops["total_gpu_ns"]  # the same integer ns, exactly
    assert lin["calls"].sum() == ops["calls"]
    assert ses.roofline.ops.filter(pl.col("op") == "aten::addmm").is_empty()  # every addmm sits in a linear


def _shared_traces(root) -> list[str]:
    one_rank = [sorted(glob.glob(str(root / d / "*.gz")))[0] for d in ("dlrm_v100_8ranks", "mi300x_ddp_resnet_4ranks")]
    return sorted(glob.glob(str(root / "*.gz"))) + sorted(glob.glob(str(root / "*.json"))) + one_rank


def test_no_op_above_its_peak_on_any_shared_trace(SHARED_TRACES):
    """Every share is at most 1. Past a roof the model's assumption broke, never silently: a
    memory-bound row faster than device memory is `cache` (its bytes came from cache), a conv
    faster than the peak ran Winograd/FFT kernels (`fewer_flops`); either has no share."""
    checked = 0
    for path in _shared_traces(SHARED_TRACES):
        r = ta.Session.open(path).roofline
        judged = r.ops.filter(pl.col("peak_share").is_not_null())
        over = judged.filter(pl.col("peak_share") > 1.0)
        assert over.is_empty(), (path, over.select("op", "input_dims", "peak_share").to_dicts())
        compute = r.ops.filter(pl.col("bound") == "compute")
        assert (compute["achieved_tflops"] <= compute["peak_tflops"]).all(), path
        memory = r.ops.filter(pl.col("bound") == "memory")
        assert (memory["achieved_gbps"] <= memory["peak_gbps"]).all(), path
        fewer = r.ops.filter(pl.col("bound") == "fewer_flops")
        assert (fewer["family"] == "conv").all() and fewer["note"].str.contains("Winograd").all(), path
        checked += judged.height
    assert checked > 500


def test_winograd_kernels_are_the_reason_past_the_fp32_peak(SHARED_TRACES):
    # v100 workers4: cudnn_convolution_backward_input of grad [32, 64, 56, 56], weight
    # [64, 64, 3, 3] counts 2·32·64·3136·64·9 direct FLOPs per call and runs Winograd kernels
    # (volta_scudnn_winograd_128x128...): counted that way it passes V100's 15.7 TFLOP/s.
    ses = ta.Session.open(SHARED_TRACES / "v100_resnet50_dataloader_workers4.pt.trace.json.gz")
    rows = ses.roofline.ops.filter(
        (pl.col("op") == "aten::cudnn_convolution_backward_input")
        & (pl.col("input_dims") == "[[],[32,64,56,56],[64,64,3,3],[],[],[],[],[],[],[]]")
    )
    assert rows.height == 1
    row = rows.row(0, named=True)
    assert row["flops_per_call"] == 2 * 32 * 64 * 56 * 56 * 64 * 9
    assert row["achieved_tflops"] > 15.7 and row["bound"] == "fewer_flops" and row["peak_share"] is None
    t = ses.trace
    ids = t.ops.filter(
        (pl.col("name") == "aten::cudnn_convolution_backward_input") & (pl.col("input_dims") == row["input_dims"])
    )
    names = t.gpu.join(ids.select("op_id"), on="op_id")["name"]
    assert names.str.contains(FEWER_FLOPS_KERNEL).any()


def test_options_echo_in_thresholds():
    th = Options().thresholds(("roofline",))
    assert th == {"peak_tflops": 0.0, "peak_gbps": 0.0, "far_from_roofline_share": 0.3, "roofline_min_gpu_share": 0.05}
