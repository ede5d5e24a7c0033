"""Every name pattern the analyses match, defined once.

Patterns are regular expressions in the syntax of polars' `str.contains` (Rust `regex`). The
ones a user may need to change (data loading, backward, optimizer, collectives) are defaults of
`options.PatternOptions`, so they are flags of every command; the rest are facts of the format.
"""

from __future__ import annotations

# -- ranges and ops (CPU side) ----------------------------------------------------------------

# torch.profiler's step marker; group 1 is the step number.
PROFILER_STEP = r"^ProfilerStep#(\d+)$"
DATA_LOADING = r"(?i)enumerate\(DataLoader\)|DataLoaderIter|DataLoader.*__next__|data[_ ]?load"
# The TensorBoard plugin's own DataLoader category (its step breakdown), narrower than the above.
TB_DATALOADER = r"^enumerate\(DataLoader\)#.*__next__"
BACKWARD = r"autograd::engine::evaluate_function|Backward"
OPTIMIZER = r"Optimizer\.(step|zero_grad)|optimizer_step"
# The optimizer annotation that clears gradients: one iteration holds it and the step beside it.
ZERO_GRAD = r"zero_grad"
# A namespaced op (aten::to, c10d::allreduce_, vllm::unified_attention) is what user code
# called; anything else in an op chain is a range (record_function, module, DataLoader).
NAMESPACED_OP = r"^[A-Za-z_][\w.]*::\w"
NN_MODULE = r"^nn\.Module:"
# Python functions that run one iteration of a serving engine or a training loop.
STEP_FUNCTION = r"\): (execute_model|step|generate|train_step|training_step|forward_step|run_batch|_process_batch)$"
# CPU work that belongs to the model's forward when no phase range says otherwise.
MODEL_CPU = r"::|^nn\.Module:| > nn\.Module:"
SINGLE_TENSOR_OPTIMIZER = "_single_tensor_"  # a literal, not a pattern
# Signs of a model compiled with torch.compile: its autograd function and Inductor's kernels.
COMPILED_OP = r"^CompiledFunction|CompiledFunctionBackward|^Torch-Compiled Region"
# Ops that wrap compiled code (Dynamo's region, its cache lookup, AOTAutograd's wrappers and
# autograd function): the time inside them between launches is the Python that runs it.
COMPILED_WRAPPER = (
    r"^Torch-Compiled Region|^TorchDynamo Cache Lookup|^Pregraph bytecode|^AOTDispatcher|^CompiledFunction"
)
# Python frames of Dynamo, AOTAutograd and Inductor, and Inductor's generated modules.
COMPILED_FRAME = r"torch/_inductor/|torch/_dynamo/|torch/_functorch/_aot_autograd/|torchinductor_"
TRITON_KERNEL = r"^triton_"

# Frames of the framework, the standard library and the interpreter: a gap's "Python line" is
# the innermost frame that is none of these, i.e. the user's own code (Inductor's generated
# modules are the framework's).
LIBRARY_FRAME = (
    r"^<|^nn\.Module:|^torch/|/torch/|site-packages/|dist-packages/|/lib/python3[.\d]*/|torchinductor_|"
    r"^(threading|contextlib|functools|typing|logging/__init__|selectors|queue|multiprocessing/\S+)\.py|"
    r"^(logging|multiprocessing|concurrent|asyncio|importlib|json|collections)/"
)

# -- runtime calls --------------------------------------------------------------------------

# Calls that hold the CPU thread until the GPU catches up (CUDA runtime, driver, HIP).
SYNC_API = (
    r"^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize$|^(cuda|hip)Memcpy(2D|3D)?$|^hipMemcpyWithStream$"
    r"|^cuCtxSynchronize$|^cuStreamSynchronize$|^cuEventSynchronize$|^cuMemcpy(DtoH|HtoD)?(_v2)?$"
)
# A wait on the GPU side (a stream waits for an event); it does not hold the CPU.
GPU_WAIT_API = r"^(cuda|hip)StreamWaitEvent$|^cuStreamWaitEvent$"
GRAPH_LAUNCH = r"GraphLaunch"
# Device memory allocated or freed through the runtime or driver: the caching allocator growing
# or giving blocks back (cudaMalloc/cudaFree, hipMalloc/hipFree, the async and virtual-memory
# APIs that expandable segments use).
DEVICE_ALLOC_API = (
    r"^(cuda|hip)(Malloc|Free)(Async)?$|^hipExtMallocWithFlags$|^cuMem(Alloc|Free)(Async)?(_v2)?$|"
    r"^(cu|hip)Mem(Create|Release|Map|Unmap|AddressReserve|AddressFree)$"
)
# Calls that put work on a stream and return (CUDA runtime and driver, HIP).
LAUNCH_API = (
    r"Launch(Kernel|CooperativeKernel|HostFunc)|GraphLaunch|LaunchKernelEx|^cuLaunch|^hipExtLaunch|"
    r"^(cuda|hip)Memcpy\w*Async$|^(cuda|hip)Memset\w*Async$|^cuMemcpy\w*Async|^cuMemset\w*Async"
)

# -- GPU activities -------------------------------------------------------------------------

# Collective communication kernels: NCCL (`ncclKernel_*`, and `ncclDevKernel_*` since NCCL
# 2.19), RCCL, and the names other backends give them.
COLLECTIVE = (
    r"(?i)nccl|rccl|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|alltoall|broadcast|sendrecv"
)
PAGEABLE_COPY = r"(?i)pageable"
PINNED_COPY = r"(?i)pinned"
COPY_DIRECTION = r"^Memcpy\s+(\w+)"  # group 1: HtoD, DtoH, DtoD, PtoP, HtoH
H2D_COPY = r"HtoD|Host -> Device"
D2H_COPY = r"DtoH|Device -> Host"
# Kernels that use Tensor Cores (NVIDIA) or matrix cores (AMD MFMA/WMMA), by the instruction
# family or library kernel their names state: CUDA mma/wmma/hmma/imma, Hopper wgmma and
# warp-specialised CUTLASS 3 kernels (Sm90, Gmma, TMA), Blackwell tcgen05 / UMMA, cuBLAS (nvjet,
# *_s16816gemm), cuDNN xmma, FlashAttention; ROCm MFMA (`_MI32x32x8` in hipBLASLt / Tensile
# `Cijk_*` names, `mfma`, MIOpen's xdlops `igemm_*_gtcx*`), Composable Kernel `xdl`/`wmma`
# kernels; DeepGEMM; Triton matmuls (`matmul_ogs`, `_matmul`: tl.dot compiles to MMA/MFMA).
TENSOR_CORE_KERNEL = (
    r"(?i)tensorop|wmma|xmma|hmma|imma|wgmma|tcgen|umma|warpgroup|_mma|mma_|s1688|h1688|s884|h884|s16816|h16816|i8816|"
    r"s161616|nvjet|fmha|flash|GemmUniversal|CollectiveMma|hgemm|bf16.*gemm|gemm.*bf16|fp16.*gemm|tf32|"
    r"bmm_.*(E4m3|E2m1|Bfloat16|Fp16)|(volta|turing|ampere|hopper)_(h|bf16|fp16|tf32|i8)|"
    r"sm(90|100|120)_?\w*(gemm|xmma|gmma)|Sm(90|100)|Gmma|TmaWarpSpecialized|deep_gemm|"
    r"_MI\d+x\d+x\d+|mfma|xdlops|gtcx|_xdl|DeviceGemmXdl|matmul_ogs|_matmul"
)
# A matmul whose operands are already a Tensor Core precision (fp16, bf16, fp8 E4M3/E5M2, fp4
# E2M1/NVFP4/MXFP4, int8): mixed-precision advice does not apply to it (a GEMV in bf16 is
# bandwidth-bound either way).
TENSOR_CORE_PRECISION = (
    r"(?i)bf16|bfloat16|fp16|half|__half|f16|fp8|float8|e4m3|e5m2|fp4|e2m1|nvfp4|mxfp|int8|i8|_HHS_|_BBS_|_HSS_"
)
MATMUL_CONV_KERNEL = (
    r"(?i)gemm|gemv|matmul|convolve|convolution|conv[23]d|cudnn.*conv|cutlass::conv|cublas|wgrad|dgrad|fprop|xmma|"
    r"nvjet|scudnn|winograd|bmm_|fmha|flash|^Cijk_"
)
# Convolution kernels that do fewer multiplications than the direct method counts (Winograd
# transforms, FFT): their FLOPs per second, counted the direct way, can pass the peak.
FEWER_FLOPS_KERNEL = r"(?i)winograd|fft"


# -- matching distinct names ------------------------------------------------------------------

# A long pattern costs more to compile than to match: `str.contains(TENSOR_CORE_KERNEL)` is
# ~0.45 ms a query on 77 names (2026-12-01, polars 2.1), most of it building the regex, and a
# small rank asks for five such matches. What a name matches never changes, so the names of a
# short Series (distinct kernel names: tens to a few thousand a trace, the same on every rank of
# a job) are matched once a process and remembered, up to MEMO_NAMES per pattern. A longer Series
# is matched by polars: the names' walk in Python would cost more (34k runtime calls of an A100
# trace: 3 ms against 0.2-1 ms), and so would a short pattern (its regex is quick to build):
# use it for the long patterns.
MEMO_NAMES = 4096
_MATCHED: dict[str, dict[str | None, bool | None]] = {}


def matches(names, pattern: str):
    """Whether each of `names` (a polars String Series, best of distinct names) contains a match
    of `pattern`, as `names.str.contains(pattern)` says (null for a null name): a Boolean Series
    of the same name and length, each distinct name matched once a process."""
    import polars as pl

    if names.len() > MEMO_NAMES:
        return names.str.contains(pattern)
    memo = _MATCHED.setdefault(pattern, {})
    values = names.to_list()
    new = [v for v in dict.fromkeys(values) if v not in memo]
    if new:
        if len(memo) + len(new) > MEMO_NAMES:
            memo.clear()
        memo.update(zip(new, pl.Series(new, dtype=pl.String).str.contains(pattern).to_list(), strict=True))
    return pl.Series(names.name, [memo[v] for v in values], dtype=pl.Boolean)
