"""The hardware's roofs: public datasheet peaks per GPU, keyed by the name `deviceProperties`
gives it, and the lookup from a trace's `Device` to its row.

Every figure is a vendor's published peak for dense math (no 2:4 sparsity: datasheets print the
sparse figure with an asterisk, and it is halved here) at the boost clock, in TFLOP/s (TOP/s for
INT8), and the memory bandwidth in GB/s (10^9 bytes/s). None: the device has no such unit (V100
has no BF16, FP8 or TF32 Tensor Cores) or the vendor publishes no figure (GB10). AMD's MI250 and
MI250X are two dies (GCDs) in one package, and PyTorch sees each die as a device: their rows are
half the package figures, as the device a trace names is one die.

A device is found by its name; ROCm often names every Instinct part "AMD Radeon Graphics", and
then the compute capability (gfx major.minor) and the CU count (`numSms`) say which part it is.
An unknown or ambiguous device gets no peaks, and the analysis says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from traceanalyzer.trace import Device

# Roof names, in the order the tables print them. `fp16` is the FP16 Tensor Core (matrix core)
# peak with FP32 accumulation, the one PyTorch's GEMMs use; `fp32_matrix` is AMD's FP32 on
# matrix cores (NVIDIA has none: FP32 matmuls run on CUDA cores, or on TF32 Tensor Cores).
COMPUTE_ROOFS = ("fp32", "fp32_matrix", "tf32", "fp16", "bf16", "fp8", "int8")


@dataclass(frozen=True)
class DevicePeaks:
    """One row of the peaks table: dense peaks (TFLOP/s), memory bandwidth (GB/s), the source."""

    part: str
    fp32: float | None
    fp32_matrix: float | None
    tf32: float | None
    fp16: float | None
    bf16: float | None
    fp8: float | None
    int8: float | None
    memory_gbps: float | None
    source: str

    def compute(self, roof: str) -> float | None:
        """The compute peak (TFLOP/s) of one roof name (`fp16`, `tf32`, ...)."""
        return getattr(self, roof)


def _row(part, fp32, fp32m, tf32, fp16, bf16, fp8, int8, mem, source) -> DevicePeaks:
    return DevicePeaks(part, fp32, fp32m, tf32, fp16, bf16, fp8, int8, mem, source)


NV_V100 = "NVIDIA Tesla V100 datasheet (nvidia.com/en-us/data-center/v100/)"
NV_A100 = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/), sparse figures halved"
NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), sparse figures halved"
NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), sparse figures halved"
NV_H800 = "NVIDIA H800 datasheet (nvidia.cn/data-center/h800/): H100 compute, sparse figures halved"
NV_GH200 = "NVIDIA GH200 Grace Hopper Superchip datasheet (nvidia.com/en-us/data-center/grace-hopper-superchip/)"
NV_B200 = "NVIDIA HGX B200 datasheet (nvidia.com/en-us/data-center/hgx/): 8-GPU figures / 8, sparse halved"
NV_GB10 = "NVIDIA DGX Spark datasheet (nvidia.com/en-us/products/workstations/dgx-spark/): only 1 PFLOP FP4 sparse"
AMD_MI250 = "AMD Instinct MI250 datasheet (amd.com/en/products/accelerators/instinct/mi200/mi250.html), per GCD (1/2)"
AMD_MI250X = "AMD Instinct MI250X datasheet (amd.com/en/products/accelerators/instinct/mi200/mi250x.html), per GCD"
AMD_MI300X = "AMD Instinct MI300X datasheet (amd.com/en/products/accelerators/instinct/mi300/mi300x.html), dense"
AMD_MI350X = "AMD Instinct MI350X datasheet (amd.com/en/products/accelerators/instinct/mi350/mi350x.html), dense"

# part: fp32, fp32 matrix, tf32, fp16, bf16, fp8, int8 (TFLOP/s, TOP/s), memory GB/s, source.
H100_SXM = _row("H100 SXM5", 67.0, None, 494.7, 989.4, 989.4, 1978.9, 1978.9, 3350.0, NV_H100)
PEAKS: dict[str, DevicePeaks] = {
    p.part: p
    for p in (
        _row("V100 SXM2", 15.7, None, None, 125.0, None, None, None, 900.0, NV_V100),
        _row("V100 PCIe", 14.0, None, None, 112.0, None, None, None, 900.0, NV_V100),
        _row("V100S PCIe", 16.4, None, None, 130.0, None, None, None, 1134.0, NV_V100),
        _row(
            "T4",
            8.1,
            None,
            None,
            65.0,
            None,
            None,
            130.0,
            320.0,
            "NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4/)",
        ),
        _row(
            "RTX 2080 Ti",
            13.4,
            None,
            None,
            53.8,  # FP32 accumulate runs at half rate on GeForce Turing (107.6 with FP16 accumulate)
            None,
            None,
            215.2,
            616.0,
            "NVIDIA Turing architecture whitepaper (2018), Appendix A, GeForce RTX 2080 Ti reference clocks",
        ),
        _row("A100 SXM4 40GB", 19.5, None, 156.0, 312.0, 312.0, None, 624.0, 1555.0, NV_A100),
        _row("A100 SXM4 80GB", 19.5, None, 156.0, 312.0, 312.0, None, 624.0, 2039.0, NV_A100),
        _row("A100 PCIe 40GB", 19.5, None, 156.0, 312.0, 312.0, None, 624.0, 1555.0, NV_A100),
        _row("A100 PCIe 80GB", 19.5, None, 156.0, 312.0, 312.0, None, 624.0, 1935.0, NV_A100),
        H100_SXM,
        _row("H100 PCIe", 51.0, None, 378.0, 756.0, 756.0, 1513.0, 1513.0, 2000.0, NV_H100),
        _row("H100 NVL", 60.0, None, 417.5, 835.5, 835.5, 1670.5, 1670.5, 3900.0, NV_H100),
        _row("H200 SXM", 67.0, None, 494.5, 989.5, 989.5, 1979.0, 1979.0, 4800.0, NV_H200),
        _row("H200 NVL", 60.0, None, 417.5, 835.5, 835.5, 1670.5, 1670.5, 4800.0, NV_H200),
        _row("H800 SXM5", 67.0, None, 494.7, 989.4, 989.4, 1978.9, 1978.9, 3350.0, NV_H800),
        _row("H800 PCIe", 51.0, None, 378.0, 756.0, 756.0, 1513.0, 1513.0, 2000.0, NV_H800),
        _row("GH200 96GB HBM3", 67.0, None, 494.5, 989.5, 989.5, 1979.0, 1979.0, 4000.0, NV_GH200),
        _row("GH200 144GB HBM3e", 67.0, None, 494.5, 989.5, 989.5, 1979.0, 1979.0, 4900.0, NV_GH200),
        _row("B200", 75.0, None, 1125.0, 2250.0, 2250.0, 4500.0, 4500.0, 8000.0, NV_B200),
        _row("GB10", None, None, None, None, None, None, None, 273.0, NV_GB10),
        _row("MI250 (one GCD)", 22.65, 45.25, None, 181.05, 181.05, None, 181.05, 1638.4, AMD_MI250),
        _row("MI250X (one GCD)", 23.95, 47.85, None, 191.5, 191.5, None, 191.5, 1638.4, AMD_MI250X),
        _row("MI300X", 163.4, 163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9, 5300.0, AMD_MI300X),
        _row("MI350X", 144.2, 144.2, None, 2307.2, 2307.2, 4614.4, 4614.4, 8000.0, AMD_MI350X),
    )
}

GIB = 1 << 30
# (name pattern, part, extra condition on the device) in order: the first that matches wins.
# Conditions: ("mem_gib_over", x) or ("cus", n) or ("cc", "9.0").
_BY_NAME: tuple[tuple[str, str, tuple], ...] = (
    (r"V100S", "V100S PCIe", ()),
    (r"V100.*PCIE", "V100 PCIe", ()),
    (r"V100", "V100 SXM2", ()),  # SXM2 and DGXS (DGX Station's NVLink module) parts
    (r"\bT4\b", "T4", ()),
    (r"2080 Ti", "RTX 2080 Ti", ()),
    (r"A100.*PCIE.*80|A100 80GB PCIe", "A100 PCIe 80GB", ()),
    (r"A100.*PCIE", "A100 PCIe 40GB", ()),
    (r"A100.*80GB", "A100 SXM4 80GB", ()),
    (r"A100.*40GB", "A100 SXM4 40GB", ()),
    (r"A100", "A100 SXM4 40GB", ("mem_gib_under", 48)),  # SXM4-40GB and PG509 (the SXM4 board), 40 GB
    (r"A100", "A100 SXM4 80GB", ()),
    (r"GH200", "GH200 144GB HBM3e", ("mem_gib_over", 100)),
    (r"GH200", "GH200 96GB HBM3", ()),
    (r"H100.*PCIe", "H100 PCIe", ()),
    (r"H100 NVL", "H100 NVL", ()),
    (r"H100", "H100 SXM5", ()),
    (r"H200 NVL", "H200 NVL", ()),
    (r"H200", "H200 SXM", ()),
    (r"H800.*PCIe", "H800 PCIe", ()),
    (r"H800", "H800 SXM5", ()),
    (r"B200", "B200", ()),
    (r"GB10\b", "GB10", ()),
    (r"MI300X", "MI300X", ()),
    (r"MI350X", "MI350X", ()),
    (r"MI250X?", "MI250X (one GCD)", ("cus", 110)),
    (r"MI250X?", "MI250 (one GCD)", ("cus", 104)),
    # ROCm's generic name: the gfx version and CU count say which die it is.
    (r"AMD Radeon Graphics|AMD Instinct", "MI250 (one GCD)", ("cc_cus", "9.0", 104)),
    (r"AMD Radeon Graphics|AMD Instinct", "MI250X (one GCD)", ("cc_cus", "9.0", 110)),
    (r"AMD Radeon Graphics|AMD Instinct", "MI300X", ("cc_cus", "9.4", 304)),
)


def _holds(cond: tuple, d: Device) -> bool:
    if not cond:
        return True
    kind = cond[0]
    mem = (d.total_memory_bytes or 0) / GIB
    if kind == "mem_gib_over":
        return mem > cond[1]
    if kind == "mem_gib_under":
        return 0 < mem < cond[1]
    if kind == "cus":
        return d.sm_count == cond[1]
    if kind == "cc_cus":
        return d.compute_capability == cond[1] and d.sm_count == cond[2]
    return False


def find_peaks(device: Device) -> tuple[DevicePeaks | None, str]:
    """The peaks row of a device and how it was found (`by name`, `by gfx version and CU count`),
    or None and why not."""
    for pattern, part, cond in _BY_NAME:
        if re.search(pattern, device.name, re.IGNORECASE) and _holds(cond, device):
            how = "by gfx version and CU count" if cond and cond[0] == "cc_cus" else "by name"
            return PEAKS[part], how
    return None, f"no peaks known for {device.name!r} (give --peak-tflops and --peak-gbps)"


def override(peaks: DevicePeaks | None, tflops: float, gbps: float) -> DevicePeaks | None:
    """The peaks with the user's figures in place: `tflops` (> 0) becomes every compute roof,
    `gbps` (> 0) the memory roof; None stays None unless a figure is given."""
    if tflops <= 0 and gbps <= 0:
        return peaks
    base = peaks or _row("user", None, None, None, None, None, None, None, None, "")
    compute = {r: (tflops if tflops > 0 else getattr(base, r)) for r in COMPUTE_ROOFS}
    source = ", ".join(
        s
        for s in (
            f"--peak-tflops {tflops:g}" if tflops > 0 else "",
            f"--peak-gbps {gbps:g}" if gbps > 0 else "",
            base.source if peaks else "",
        )
        if s
    )
    return DevicePeaks(
        base.part if peaks else "user",
        **compute,
        memory_gbps=gbps if gbps > 0 else base.memory_gbps,
        source=source,
    )
