#!/usr/bin/env python3
"""Capture a small, real PyTorch profiler (Kineto) trace for traceanalyzer.

What it captures
----------------
A tiny CNN is trained on synthetic 32x32 RGB "images" for a few steps.  The
data comes from a real ``torch.utils.data.DataLoader`` over a ``Dataset`` whose
``__getitem__`` does deliberate per-sample CPU work (a random crop, flip,
blur and normalisation written in plain torch ops), so with ``--num-workers 0``
the data loading shows up as ``enumerate(DataLoader)#...__next__`` ranges on
the main thread, inside each ``ProfilerStep#N``.

The loop runs under::

    torch.profiler.profile(
        activities=[CPU] (+ CUDA when torch.cuda.is_available()),
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1),
        record_shapes=True, profile_memory=True, with_stack=True)

calling ``prof.step()`` once per iteration, and the trace is written with
``prof.export_chrome_trace(path)`` and then gzipped (``.json.gz``).  Inside a
step, ``record_function`` ranges name the phases: ``to_device``, ``forward``,
``loss``, ``backward``; the optimizer step is named by torch itself
(``Optimizer.step#SGD.step``).

How to run
----------
Needs torch (``pip install torch`` or the project's ``capture`` extra)::

    python scripts/capture_sample.py                       # CUDA if available, else CPU
    python scripts/capture_sample.py --device cpu --num-workers 0 \\
        --out sample_traces/cpu_dataloader_workers0.pt.trace.json.gz
    python scripts/capture_sample.py --device cuda --num-workers 4 \\
        --out sample_traces/cuda_dataloader_workers4.pt.trace.json.gz

It runs in well under a minute on 2 CPU cores and the gzipped trace stays
around a megabyte or less.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, Dataset

WAIT, WARMUP, ACTIVE = 1, 1, 4
DEFAULT_OUT = "sample_traces/cpu_dataloader_workers0.pt.trace.json.gz"


class SyntheticImages(Dataset):
    """Random images with a per-sample CPU transform (the injected data cost)."""

    def __init__(self, n: int = 4096, size: int = 40, crop: int = 32, classes: int = 10, seed: int = 0):
        self.n, self.size, self.crop, self.classes, self.seed = n, size, crop, classes, seed
        kernel = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0])
        kernel = torch.outer(kernel, kernel)
        self.blur = (kernel / kernel.sum()).expand(3, 1, 5, 5).contiguous()
        self.mean = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
        self.std = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, idx: int):
        # Python's RNG for scalar choices: torch scalars would add CPU-side aten::item calls.
        rng = random.Random(self.seed * 1_000_003 + idx)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + idx)
        img = torch.rand(3, self.size, self.size, generator=g)
        # random crop
        top, left = rng.randrange(self.size - self.crop + 1), rng.randrange(self.size - self.crop + 1)
        img = img[:, top : top + self.crop, left : left + self.crop]
        # random horizontal flip
        if rng.random() < 0.5:
            img = img.flip(-1)
        # a few blur passes and a colour jitter: deliberate CPU work per sample
        for _ in range(3):
            img = F.conv2d(img.unsqueeze(0), self.blur, padding=2, groups=3).squeeze(0)
        img = img * (0.8 + 0.4 * torch.rand(3, 1, 1, generator=g))
        img = (img - self.mean) / self.std
        label = rng.randrange(self.classes)
        return img.contiguous(), label


class TinyCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 8 * 8, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def gzip_file(src: str, dst: str) -> None:
    with open(src, "rb") as fi, gzip.open(dst, "wb", compresslevel=9) as fo:
        shutil.copyfileobj(fi, fo)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output .json.gz path (default: %(default)s)")
    ap.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (default: 0)")
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="device to train on (default: cuda if available, else cpu)",
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda requested but torch.cuda.is_available() is False")

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    use_cuda = device.type == "cuda"

    loader = DataLoader(
        SyntheticImages(seed=args.seed),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        pin_memory=use_cuda,
        persistent_workers=args.num_workers > 0,
    )
    model = TinyCNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)

    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix="capture_sample_")
    raw = os.path.join(tmp_dir, "trace.json")
    exported: list[str] = []

    def on_trace_ready(prof) -> None:
        prof.export_chrome_trace(raw)
        exported.append(raw)

    total_steps = WAIT + WARMUP + ACTIVE
    t0 = time.perf_counter()
    model.train()
    with profile(
        activities=activities,
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
        profile_memory=True,
        with_stack=True,
    ) as prof:
        for step, (images, labels) in enumerate(loader):
            with record_function("to_device"):
                images = images.to(device, non_blocking=use_cuda)
                labels = labels.to(device, non_blocking=use_cuda)
            with record_function("forward"):
                logits = model(images)
            with record_function("loss"):
                loss = F.cross_entropy(logits, labels)
            opt.zero_grad(set_to_none=True)
            with record_function("backward"):
                loss.backward()
            opt.step()
            prof.step()
            if step + 1 >= total_steps:
                break
    if use_cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0

    if not exported:
        print("error: the profiler did not produce a trace", file=sys.stderr)
        return 1
    gzip_file(raw, out)
    shutil.rmtree(tmp_dir, ignore_errors=True)
    print(
        f"wrote {out} ({os.path.getsize(out) / 1e6:.2f} MB gzipped) "
        f"device={args.device} num_workers={args.num_workers} torch={torch.__version__} "
        f"steps={total_steps} ({elapsed:.1f}s), last loss {loss.item():.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
