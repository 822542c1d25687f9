"""Measure what each PyTorch-profiler signal costs to collect: step-time overhead and trace bytes per step.

Why: ``perfsleuth signals`` ranks signal groups by the diagnosis quality they buy against their
collection cost; this script measures that cost on a GPU (the numbers in
perfsleuth/diagnose/signal_costs.py come from one run of it on an H200) for two loops at the ends of
the range: a GPU-bound 8-layer MLP (the profiler's host overhead hides behind GPU work) and a
launch-bound loop of 360 tiny layers (every microsecond of host overhead shows).

Usage: python3 scripts/measure_profiler_overhead.py OUT.json
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(__file__))
from capture_real_cases import DEVICE, Loop  # noqa: E402

CPU, CUDA = ProfilerActivity.CPU, ProfilerActivity.CUDA
CONFIGS = {
    "off": None,
    "cpu_ops": dict(activities=[CPU]),
    "gpu_activity": dict(activities=[CUDA]),
    "cpu_and_gpu": dict(activities=[CPU, CUDA]),
    "cpu_and_gpu+record_shapes": dict(activities=[CPU, CUDA], record_shapes=True),
    "cpu_and_gpu+profile_memory": dict(activities=[CPU, CUDA], profile_memory=True),
    "cpu_and_gpu+with_stack": dict(activities=[CPU, CUDA], with_stack=True),
}
STEPS, REPEATS = 12, 3


def run(loop: Loop, cfg: dict | None) -> tuple[float, int]:
    """Median over repeats of the mean step time (ms) with this profiler config; trace bytes per step."""
    times, size = [], 0
    for r in range(REPEATS):
        loop.step()
        torch.cuda.synchronize()
        if cfg is None:
            t0 = time.perf_counter()
            for _ in range(STEPS):
                loop.step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / STEPS * 1e3)
            continue
        with profile(**cfg) as prof:
            t0 = time.perf_counter()
            for _ in range(STEPS):
                loop.step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / STEPS * 1e3)
        if r == 0:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                prof.export_chrome_trace(f.name)
                size = len(gzip.compress(Path(f.name).read_bytes(), 6)) // STEPS
    return statistics.median(times), size


def main() -> None:
    assert DEVICE == "cuda"
    loops = {"gpu_bound_mlp": lambda: Loop(), "launch_bound_tiny": lambda: Loop(d=256, h=256, layers=120, tokens=32)}
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "steps": STEPS, "repeats": REPEATS}
    for name, make in loops.items():
        loop = make()
        for _ in range(3):
            loop.step()
        res = {}
        for cfg_name, cfg in CONFIGS.items():
            ms, size = run(loop, cfg)
            res[cfg_name] = {"step_ms": ms, "gz_bytes_per_step": size}
            print(name, cfg_name, f"{ms:.2f} ms", size, flush=True)
        base = res["off"]["step_ms"]
        for v in res.values():
            v["overhead"] = v["step_ms"] / base - 1
        out[name] = res
        del loop
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
