"""Kernels: per-name statistics, Tensor Core detection and the short-kernel census, by hand on a
synthetic trace; CUDA-graph replays attributed to the op around the cudaGraphLaunch."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from tests.synthetic import TraceBuilder
from traceanalyzer import load
from traceanalyzer.analyses.kernels import analyse_kernels


def test_kernel_table_and_census(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 2000)
    b.op("aten::mm", 0, 100)
    for i in range(3):
        b.kernel("volta_sgemm_128x64_nn", ts=100 + 100 * i, dur=80 + 10 * i, launch_ts=10 + i)
    b.op("aten::linear", 400, 10)
    b.kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn", ts=500, dur=50, launch_ts=401)
    b.op("aten::add", 600, 100)
    for i in range(10):
        b.kernel("elementwise_add", ts=700 + 10 * i, dur=5, launch_ts=601 + i)
    r = analyse_kernels(load(b.write(tmp_path)))
    rows = {row["kernel"]: row for row in r.table.iter_rows(named=True)}
    sgemm = rows["volta_sgemm_128x64_nn"]
    assert (sgemm["calls"], sgemm["total_us"], sgemm["mean_us"], sgemm["min_us"], sgemm["max_us"]) == (
        3,
        270,
        90,
        80,
        100,
    )
    assert sgemm["share"] == pytest.approx(270 / 370)  # kernel time 270 + 50 + 50
    assert sgemm["matmul_conv"] and not sgemm["tensor_cores"] and sgemm["launched_by"] == "aten::mm (3)"
    assert rows["ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_tn"]["tensor_cores"]
    assert not rows["elementwise_add"]["matmul_conv"]
    assert r.table["kernel"].to_list()[0] == "volta_sgemm_128x64_nn"  # longest total first
    # underneath, integer ns: the sgemm's 80 + 90 + 100 µs, mean 90 µs; totals summed as integers
    ns = r.table_ns.filter(pl.col("kernel") == "volta_sgemm_128x64_nn").row(0, named=True)
    assert (ns["total_ns"], ns["mean_ns"], ns["min_ns"], ns["max_ns"]) == (270_000, 90_000.0, 80_000, 100_000)
    assert r.table_ns.schema["total_ns"] == pl.Int64 and r.total_ns == 370_000 and r.total_us == 370.0
    s = r.short
    assert (s.count, s.total, s.time_ns, s.time_us) == (10, 14, 50_000, 50)
    assert s.count_share == pytest.approx(10 / 14) and s.time_share == pytest.approx(50 / 370)
    assert (r.matmul_conv_ns, r.matmul_conv_no_tc_ns) == (320_000, 270_000)
    assert r.matmul_conv_us == 320 and r.matmul_conv_no_tc_us == 270
    assert r.short_names.row(0, named=True) == {"name": "elementwise_add", "calls": 10, "total_us": 50.0}
    assert r.tensor_core_share == pytest.approx(50 / 320)


@pytest.fixture(scope="module")
def gb10(SHARED_TRACES):
    path = SHARED_TRACES / "gb10_vllm_cudagraphs.pt.trace.json.gz"
    with gzip.open(path, "rt") as fh:
        raw = json.load(fh)["traceEvents"]
    return load(path), raw


TENSOR_CORE_NAMES = [
    # CUDA: FP8 grouped GEMM in CUTLASS (the case), DeepGEMM, Hopper wgmma, Blackwell
    # tcgen05 and nvjet, FP4 in TRT-LLM's bmm
    "void cutlass::device_kernel<flashinfer::group_gemm::GroupedGemmKernel<cutlass::float_e4m3_t, float>>(Params)",
    "void deep_gemm::fp8_gemm_kernel<128u, 128u, 128u, 64u, 4u, 8u, 1u>(float*, int*, unsigned int)",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "void cutlass::device_kernel<cutlass::gemm::kernel::Sm100GemmTmaUmmaWarpSpecialized<tcgen05>>(Params)",
    "nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN",
    "bmm_E2m1_E2m1E2m1_Fp32_t128x128x256u2_s4_et128x64_m256x128x64_cga2x1x1_16dp256b_TN_schPd2x1x2x3_sm100f",
    # ROCm: hipBLASLt / Tensile MFMA (fp32 inputs on matrix cores), CK xdl, MIOpen xdlops,
    # Triton matmul (on ROCm or CUDA)
    "Cijk_Alik_Bljk_SB_MT64x64x16_MI16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3",
    "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<float>>(Argument)",
    "igemm_fwd_gtcx3_nhwc_fp16_bx0_ex0_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_gkgs",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x256x128x1_swiglu",
    "_matmul_kernel",
    # a bf16 GEMV: already a Tensor Core precision, nothing for mixed-precision advice to add
    "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4>",
]


@pytest.mark.parametrize("name", TENSOR_CORE_NAMES)
def test_tensor_cores_by_instruction_family_and_precision(tmp_path, name):
    b = TraceBuilder()
    b.op("aten::mm", 0, 10)
    b.kernel(name, ts=100, dur=100, launch_ts=1)
    r = analyse_kernels(load(b.write(tmp_path)))
    row = r.table.row(0, named=True)
    assert row["matmul_conv"] and row["tensor_cores"] and r.matmul_conv_no_tc_us == 0


@pytest.mark.parametrize(
    "name, matmul",
    [
        ("volta_sgemm_128x64_nn", True),  # FP32 SIMT GEMM: no Tensor Cores
        ("ampere_sgemm_32x32_sliced1x4_tn", True),
        ("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", True),
        # b200: a MoE epilogue whose template names cutlass' bf16 type is no matmul
        (
            "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t>>",
            False,
        ),
    ],
)
def test_fp32_simt_kernels_are_not_tensor_cores(tmp_path, name, matmul):
    b = TraceBuilder()
    b.kernel(name, ts=100, dur=100, launch_ts=1)
    row = analyse_kernels(load(b.write(tmp_path))).table.row(0, named=True)
    assert row["matmul_conv"] is matmul and not row["tensor_cores"]


def test_graph_replays_are_attributed_to_the_launching_op(gb10):
    trace, raw = gb10
    launches = [e for e in raw if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"]
    graph_corr = {e["args"]["correlation"] for e in launches}
    replayed = [e for e in raw if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in graph_corr]
    assert (len(launches), len(replayed)) == (650, 11_540)  # ../shared/traces/README.md
    r = analyse_kernels(trace)
    assert r.table["graph_replayed"].sum() == 11_540
    # Every replayed kernel name is launched by an op (not "(no op)").
    names = {e["name"] for e in replayed}
    launched_by = dict(zip(r.table["kernel"], r.table["launched_by"]))
    assert all(launched_by[n] and "(no op)" not in launched_by[n] for n in names)
