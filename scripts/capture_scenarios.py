#!/usr/bin/env python3
"""Capture ground-truth PyTorch profiler traces, one bottleneck injected per scenario.

Each scenario is a small workload with exactly one performance problem put there on purpose,
so that traceanalyzer's verdict on its trace can be checked against a known answer:

  dataloader_bound  DataLoader with num_workers=0 and a heavy per-sample CPU transform
  sync_bound        `.item()` on device tensors every iteration (loss, per-parameter grad norms)
  pageable_h2d      large blocking host-to-device copies from pageable memory      (GPU only)
  launch_bound      thousands of tiny elementwise kernels issued from a Python loop
  cuda_graphs       the launch_bound loop captured once in a torch.cuda.CUDAGraph and
                    replayed                                                        (GPU only)
  overlap_ok        pinned host batches copied with non_blocking=True on a side stream,
                    prefetched one step ahead while bf16 matmuls run               (GPU only)
  healthy           large bf16 matmuls (float32 on CPU) keeping the device busy

Every scenario is profiled with

    torch.profiler.profile(activities=[CPU] (+ CUDA on a GPU run),
                           schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1),
                           record_shapes=True, profile_memory=True, with_stack=True)

with `prof.step()` once per iteration, exported with `prof.export_chrome_trace()` and gzipped to
`<out-dir>/<scenario>_<device>.pt.trace.json.gz` (<device> is `cpu` or `cuda`).  The script then
adds or replaces the scenario's entry in `<out-dir>/manifest.json`: file, scenario, device (GPU
name or "cpu"), torch_version, capture settings, expected_top_cause, expected_findings, note.

On a machine without a GPU the GPU-only scenarios are skipped with a message, and the CPU traces
carry `expected_top_cause: null` (there is no GPU whose idle time could have a cause).

Usage:

    python scripts/capture_scenarios.py                        # all scenarios, cuda if available
    python scripts/capture_scenarios.py --device cpu           # the CPU-capable ones on the CPU
    python scripts/capture_scenarios.py --only sync_bound --only launch_bound --out-dir /tmp/t

All scenarios together take a few minutes on a GPU machine and under a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, Dataset

WAIT, WARMUP, ACTIVE = 1, 1, 3
TOTAL_STEPS = WAIT + WARMUP + ACTIVE
MAX_TRACE_BYTES = 5 * 1024 * 1024
MANIFEST = "manifest.json"

# Finding ids and top causes the manifest may name (traceanalyzer's vocabulary).
FINDINGS = (
    "data_loading",
    "sync_stalls",
    "pageable_copies",
    "launch_bound",
    "no_tensor_cores",
    "single_tensor_optimizer",
    "low_gpu_utilization",
    "capture_caveats",
)
CAUSES = ("data_loading", "sync", "cpu_bound", "launch_latency", "gpu_wait", "untraced", "none")

Step = Callable[[int], None]


# --------------------------------------------------------------------------- helpers


def gemm_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs that support it (tensor cores), fp16 on older ones, float32 on the CPU."""
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast(device: torch.device):
    """Mixed precision on the GPU so that GEMMs use tensor cores; a no-op on the CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=gemm_dtype(device))
    return torch.autocast("cpu", enabled=False)


class HeavyTransformImages(Dataset):
    """Synthetic images whose __getitem__ does deliberately heavy CPU work."""

    def __init__(self, n: int = 2048, size: int = 96, crop: int = 64, passes: int = 16):
        self.n, self.size, self.crop, self.passes = n, size, crop, passes
        k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        k = torch.outer(k, k)
        self.blur = (k / k.sum()).expand(3, 1, 5, 5).contiguous()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        # Python's RNG for the scalar parameters: torch scalars would add CPU aten::item calls,
        # which belong to the sync_bound scenario only.
        rng = random.Random(idx)
        g = torch.Generator().manual_seed(idx)
        img = torch.rand(3, self.size, self.size, generator=g)
        # random rotation + scale via an affine resampling ...
        angle = rng.uniform(-0.3, 0.3)
        scale = rng.uniform(0.9, 1.1)
        theta = torch.tensor(
            [
                [scale * math.cos(angle), -scale * math.sin(angle), 0.0],
                [scale * math.sin(angle), scale * math.cos(angle), 0.0],
            ]
        ).unsqueeze(0)
        grid = F.affine_grid(theta, [1, 3, self.size, self.size], align_corners=False)
        img = F.grid_sample(img.unsqueeze(0), grid, align_corners=False).squeeze(0)
        # ... then repeated blurs, a crop and normalisation
        for _ in range(self.passes):
            img = F.conv2d(img.unsqueeze(0), self.blur, padding=2, groups=3).squeeze(0)
        top, left = rng.randrange(self.size - self.crop + 1), rng.randrange(self.size - self.crop + 1)
        img = img[:, top : top + self.crop, left : left + self.crop]
        img = (img - img.mean(dim=(1, 2), keepdim=True)) / (img.std(dim=(1, 2), keepdim=True) + 1e-5)
        return img.contiguous(), rng.randrange(10)


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(32 * 16, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def mlp(width: int, depth: int, out: int, device: torch.device, dtype=torch.float32) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers).to(device=device, dtype=dtype)


def train_step(model, opt, x, y, device) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward/backward/optimizer step; returns (loss, logits)."""
    with record_function("forward"), autocast(device):
        logits = model(x)
    with record_function("loss"):
        loss = F.cross_entropy(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    with record_function("backward"):
        loss.backward()
    opt.step()
    return loss, logits


# --------------------------------------------------------------------------- scenarios
# Each builder sets the workload up (outside the profiler) and returns one iteration.


def build_dataloader_bound(device: torch.device) -> Step:
    loader = DataLoader(
        HeavyTransformImages(), batch_size=16, shuffle=True, num_workers=0, pin_memory=device.type == "cuda"
    )
    batches = iter(loader)
    model = SmallCNN().to(device)
    # foreach=True everywhere: the optimizer is not the injected problem here.
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)

    def step(i: int) -> None:
        x, y = next(batches)  # enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__
        with record_function("to_device"):
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
        train_step(model, opt, x, y, device)

    return step


def build_sync_bound(device: torch.device) -> Step:
    # Small enough that the GPU finishes each chunk of work quickly, so the time after each
    # host read (the queue drained, the CPU re-filling it) is a large part of the step.
    width, depth, batch = (2048, 6, 1024) if device.type == "cuda" else (512, 6, 128)
    model = mlp(width, depth, 10, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    x = torch.randn(batch, width, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    history: list[float] = []

    def step(i: int) -> None:
        loss, logits = train_step(model, opt, x, y, device)
        # The injected problem: host reads of device values, each one a device->host copy
        # plus a stream synchronisation that drains the GPU queue.
        with record_function("log_metrics"):
            history.append(loss.item())
            grad_norms = [p.grad.norm().item() for p in model.parameters() if p.grad is not None]
            if not all(math.isfinite(v) for v in grad_norms):
                raise FloatingPointError("non-finite gradient")
            history.append(logits.detach().abs().max().item())

    return step


def build_pageable_h2d(device: torch.device) -> Step:
    # 4 x 256 MiB of ordinary (pageable) host memory, touched once so that it is resident.
    host = [torch.full((64 * 1024 * 1024,), float(k)) for k in range(4)]
    w = torch.randn(4096, 4096, device=device, dtype=gemm_dtype(device))

    outputs: list[torch.Tensor] = []

    def step(i: int) -> None:
        outputs.clear()
        for k in range(2):
            with record_function("h2d_pageable"):
                # Blocking copy from pageable memory: staged through a driver buffer,
                # and torch synchronises the stream after it.
                batch = host[(2 * i + k) % len(host)].to(device)
            with record_function("compute"):
                a = batch[: 4096 * 4096].view(4096, 4096).to(w.dtype)
                outputs.append(a @ w)

    return step


def _tiny_loop(x: torch.Tensor, iters: int) -> None:
    for _ in range(iters):
        x.mul_(0.999).add_(0.001)


def build_launch_bound(device: torch.device) -> Step:
    x = torch.randn(256, device=device)
    iters = 1000  # 2,000 tiny kernels per step

    def step(i: int) -> None:
        with record_function("tiny_ops"):
            _tiny_loop(x, iters)

    return step


def build_cuda_graphs(device: torch.device) -> Step:
    x = torch.randn(256, device=device)
    iters = 1000
    # Warm up on a side stream before capture, as the CUDA graphs docs require.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _tiny_loop(x, iters)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _tiny_loop(x, iters)
    torch.cuda.synchronize()

    def step(i: int) -> None:
        with record_function("graph_replay"):
            for _ in range(2):
                graph.replay()  # one cudaGraphLaunch, 2,000 kernels

    return step


def _gemm_chain(width: int, depth: int, device: torch.device) -> list[torch.Tensor]:
    dtype = gemm_dtype(device)
    return [torch.randn(width, width, device=device, dtype=dtype) / math.sqrt(width) for _ in range(depth)]


def build_overlap_ok(device: torch.device) -> Step:
    width, depth, batch = 8192, 16, 1024
    weights = _gemm_chain(width, depth, device)
    # Pinned host batches (32 MiB each): the copy runs on the copy engine, off the compute stream.
    host = [torch.randn(batch, width).pin_memory() for _ in range(4)]
    copy_stream = torch.cuda.Stream()
    state: dict[str, torch.Tensor] = {}

    def prefetch(k: int) -> None:
        with torch.cuda.stream(copy_stream), record_function("prefetch_h2d"):
            state["next"] = host[k % len(host)].to(device, non_blocking=True)

    prefetch(0)

    def step(i: int) -> None:
        compute = torch.cuda.current_stream()
        compute.wait_stream(copy_stream)
        cur = state["next"]
        cur.record_stream(compute)
        prefetch(i + 1)  # overlaps with the matmuls below
        with record_function("compute"):
            h = cur.to(weights[0].dtype)
            for w in weights:
                h = torch.relu(h @ w)
            state["out"] = h

    return step


def build_healthy(device: torch.device) -> Step:
    if device.type == "cuda":
        width, depth, batch = 8192, 8, 4096
    else:
        width, depth, batch = 1024, 4, 512
    dtype = gemm_dtype(device)
    model = mlp(width, depth, width, device, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(batch, width, device=device, dtype=dtype)
    target = torch.randn(batch, width, device=device, dtype=dtype)

    def step(i: int) -> None:
        with record_function("forward"):
            out = model(x)
        with record_function("loss"):
            loss = F.mse_loss(out, target)
        opt.zero_grad(set_to_none=True)
        with record_function("backward"):
            loss.backward()
        opt.step()

    return step


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[torch.device], Step]
    gpu_only: bool
    description: str
    expected_top_cause: str | None  # on a GPU
    expected_findings: tuple[str, ...]  # on a GPU
    cpu_findings: tuple[str, ...] = ()  # on the CPU (no GPU in the trace)
    note: str = ""


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "dataloader_bound",
            build_dataloader_bound,
            False,
            "SmallCNN training fed by a DataLoader with num_workers=0 whose __getitem__ does an "
            "affine resample and 16 blur passes per 96x96 image (batch 16)",
            "data_loading",
            ("data_loading", "low_gpu_utilization"),
            ("data_loading", "capture_caveats"),
            "the GPU idles while the main thread runs DataLoader __next__ each step",
        ),
        Scenario(
            "sync_bound",
            build_sync_bound,
            False,
            "MLP training step (6 hidden layers) followed by loss.item(), one grad-norm .item() "
            "per parameter and a max-logit .item(): 16 host reads of device values per step",
            "sync",
            ("sync_stalls", "low_gpu_utilization"),
            ("capture_caveats",),
            "each .item() is a DtoH copy plus cudaStreamSynchronize that drains the queue; the GPU "
            "then idles until the CPU launches again, so every gap follows a synchronising call",
        ),
        Scenario(
            "pageable_h2d",
            build_pageable_h2d,
            True,
            "two blocking 256 MiB host-to-device copies from pageable memory per step, each "
            "followed by one 4096x4096 GEMM",
            "none",
            ("pageable_copies", "sync_stalls"),
            (),
            "the copies themselves keep the device busy (memcpy counts as busy time), so little "
            "idle time is left to rank; the problem is the copy: Memcpy HtoD (Pageable -> Device) at "
            "pageable bandwidth, unoverlapped, with the CPU thread blocked in cudaMemcpyAsync and "
            "the cudaStreamSynchronize torch issues after each blocking copy",
        ),
        Scenario(
            "launch_bound",
            build_launch_bound,
            False,
            "a Python loop of 1,000 x (mul_, add_) on a 256-element tensor: 2,000 tiny kernels per step",
            "launch_latency",
            ("launch_bound", "low_gpu_utilization"),
            ("capture_caveats",),
            "each kernel runs for ~2 us but takes longer than that to launch, so the GPU idles "
            "between kernels while the queue stays nearly empty",
        ),
        Scenario(
            "cuda_graphs",
            build_cuda_graphs,
            True,
            "the launch_bound loop captured once in a torch.cuda.CUDAGraph and replayed twice per "
            "step (one cudaGraphLaunch = 2,000 kernels)",
            "none",
            (),
            (),
            "the control for launch_bound: the launch overhead is gone and the kernels run back to "
            "back; what idle is left is the sub-microsecond spacing between graph nodes. The "
            "replayed kernels all carry their cudaGraphLaunch's correlation id",
        ),
        Scenario(
            "overlap_ok",
            build_overlap_ok,
            True,
            "pinned 32 MiB batches copied with non_blocking=True on a side stream one step ahead, "
            "overlapping a chain of 16 bf16 (1024x8192)@(8192x8192) GEMMs",
            "none",
            (),
            (),
            "the control for pageable_h2d: copies overlap compute and the compute stream stays busy",
        ),
        Scenario(
            "healthy",
            build_healthy,
            False,
            "bf16 MLP training step (8 layers of 8192x8192, batch 4096; on the CPU float32, 4 "
            "layers of 1024, batch 512), SGD foreach, no host syncs",
            "none",
            (),
            ("capture_caveats",),
            "the GPU is busy with large tensor-core GEMMs and the CPU runs ahead",
        ),
    )
}


# --------------------------------------------------------------------------- capture


def capture_settings(device: torch.device) -> dict:
    return {
        "activities": ["CPU", "CUDA"] if device.type == "cuda" else ["CPU"],
        "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE, "repeat": 1},
        "record_shapes": True,
        "profile_memory": True,
        "with_stack": True,
    }


def capture(scn: Scenario, device: torch.device, out_path: str) -> float:
    """Profile one scenario and write its gzipped Chrome trace; returns seconds taken."""
    torch.manual_seed(0)
    step = scn.build(device)
    if device.type == "cuda":
        torch.cuda.synchronize()

    tmp_dir = tempfile.mkdtemp(prefix=f"capture_{scn.name}_")
    raw = os.path.join(tmp_dir, "trace.json")
    exported: list[str] = []

    def on_trace_ready(prof) -> None:
        prof.export_chrome_trace(raw)
        exported.append(raw)

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    t0 = time.perf_counter()
    try:
        with profile(
            activities=activities,
            schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
            on_trace_ready=on_trace_ready,
            record_shapes=True,
            profile_memory=True,
            with_stack=True,
        ) as prof:
            for i in range(TOTAL_STEPS):
                step(i)
                prof.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if not exported:
            raise RuntimeError(f"{scn.name}: the profiler produced no trace")
        with open(raw, "rb") as fi, gzip.open(out_path, "wb", compresslevel=9) as fo:
            shutil.copyfileobj(fi, fo)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    del step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return time.perf_counter() - t0


def manifest_entry(scn: Scenario, device: torch.device, file_name: str) -> dict:
    on_gpu = device.type == "cuda"
    entry = {
        "file": file_name,
        "scenario": scn.name,
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
        "torch_version": torch.__version__,
        "capture": capture_settings(device),
        "expected_top_cause": scn.expected_top_cause if on_gpu else None,
        "expected_findings": list(scn.expected_findings if on_gpu else scn.cpu_findings),
        "description": scn.description,
        "torch_threads": torch.get_num_threads(),
    }
    if on_gpu:
        entry["note"] = scn.note
    else:
        entry["note"] = (
            "CPU-only capture: the trace has no GPU activity, so there are no GPU idle gaps to "
            "attribute (expected_top_cause is null), GPU-side findings cannot fire, and a "
            "CPU-only trace is itself a capture caveat. On a GPU: " + scn.note
        )
    assert entry["expected_top_cause"] in CAUSES + (None,)
    assert set(entry["expected_findings"]) <= set(FINDINGS)
    return entry


def update_manifest(out_dir: str, entries: list[dict]) -> str:
    path = os.path.join(out_dir, MANIFEST)
    existing: list[dict] = []
    if os.path.exists(path):
        with open(path) as f:
            existing = json.load(f)
    new_files = {e["file"] for e in entries}
    merged = [e for e in existing if e.get("file") not in new_files] + entries
    merged.sort(key=lambda e: e["file"])
    with open(path, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Capture one profiler trace per bottleneck scenario (see the module docstring)."
    )
    ap.add_argument(
        "--out-dir", default="sample_traces", help="where traces and manifest.json go (default: %(default)s)"
    )
    ap.add_argument(
        "--only",
        action="append",
        choices=sorted(SCENARIOS),
        metavar="NAME",
        help=f"capture only this scenario (repeatable): {', '.join(SCENARIOS)}",
    )
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="device to run on (default: cuda if available, else cpu)",
    )
    args = ap.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda requested but torch.cuda.is_available() is False")
    device = torch.device(args.device)
    os.makedirs(args.out_dir, exist_ok=True)

    names = args.only or list(SCENARIOS)
    entries: list[dict] = []
    failed = 0
    for name in dict.fromkeys(names):
        scn = SCENARIOS[name]
        if scn.gpu_only and device.type != "cuda":
            print(f"skip {name}: needs a GPU (device is {device.type})", file=sys.stderr)
            continue
        file_name = f"{name}_{device.type}.pt.trace.json.gz"
        out_path = os.path.join(args.out_dir, file_name)
        try:
            seconds = capture(scn, device, out_path)
        except Exception as exc:  # keep going: one broken scenario should not lose the others
            failed += 1
            print(f"FAILED {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        size = os.path.getsize(out_path)
        warn = "  WARNING: over 5 MiB" if size > MAX_TRACE_BYTES else ""
        print(f"wrote {out_path} ({size / 1e6:.2f} MB gzipped, {seconds:.1f}s){warn}")
        entries.append(manifest_entry(scn, device, file_name))

    if entries:
        print(f"updated {update_manifest(args.out_dir, entries)} ({len(entries)} entries added or replaced)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
