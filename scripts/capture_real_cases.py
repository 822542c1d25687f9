"""Capture real, labeled PyTorch-profiler traces on a GPU: a healthy training loop and one per injected fault.

Why: the simulator's cases grade perfsleuth against its own model of a job; these are jobs that ran on a
real GPU (the fixtures under tests/data/real_cases were made with this script on one H200), each with
one cause injected by construction and its cost measured outside the profiler: the median wall-clock step
(``torch.cuda.synchronize`` on both sides) of the faulty loop against the same loop without the fault.

Usage (needs torch with CUDA)::

    python3 scripts/capture_real_cases.py OUTDIR [SCENARIO ...]

Writes ``OUTDIR/<scenario>/rank-0.*.pt.trace.json.gz`` and ``OUTDIR/<scenario>/capture.json``.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = DEVICE == "cpu"  # a dry run on a machine without a GPU: same code, toy sizes
D_MODEL, D_HIDDEN, LAYERS, TOKENS = (256, 512, 2, 256) if SMALL else (2048, 8192, 8, 8192)
TIMED_STEPS = 8
STALL_S = 0.008 if not SMALL else 0.002


def mlp(d: int, h: int, layers: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)]
    return nn.Sequential(*blocks).to(DEVICE)


class Batches(torch.utils.data.Dataset):
    """Pre-built host batches; ``stall_s`` models a slow decode in __getitem__ (the injected fault)."""

    def __init__(self, n: int, tokens: int, d: int, stall_s: float = 0.0) -> None:
        self.data = torch.randn(tokens, d, dtype=torch.bfloat16)
        if DEVICE == "cuda":
            self.data = self.data.pin_memory()
        self.n, self.stall_s = n, stall_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.stall_s:
            time.sleep(self.stall_s)
        return self.data


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Loop:
    """One training loop; ``after_step`` hooks inject host-side faults between steps."""

    def __init__(self, *, d=D_MODEL, h=D_HIDDEN, layers=LAYERS, tokens=TOKENS, stall_s=0.0, allreduce=False) -> None:
        torch.manual_seed(0)
        self.model = mlp(d, h, layers)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.loader = torch.utils.data.DataLoader(Batches(10_000, tokens, d, stall_s), batch_size=None, num_workers=0)
        self.it = iter(self.loader)
        self.allreduce = allreduce
        self.hooks: list = []
        self.step_no = 0

    def step(self) -> None:
        x = next(self.it).to(DEVICE, non_blocking=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = self.model(x).float().pow(2).mean()
        loss.backward()
        if self.allreduce:
            import torch.distributed as dist

            flat = torch.cat([p.grad.reshape(-1) for p in list(self.model.parameters())[:2]])
            dist.all_reduce(flat)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        for hook in self.hooks:
            hook(self)
        self.step_no += 1

    def timed(self, n: int = TIMED_STEPS) -> list[float]:
        for _ in range(3):
            self.step()
        sync()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.step()
            sync()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    def profile(self, out: Path, active: int = 6, *, record_gc: bool = False) -> None:
        """``record_gc`` asks the profiler for its Python GC events (PyTorch >= 2.9), the direct evidence
        perfsleuth's gc_pause needs; without them a collection is a silent host gap."""
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
        extra = {}
        if record_gc:
            from torch._C._profiler import _ExperimentalConfig

            extra = {"with_stack": True, "experimental_config": _ExperimentalConfig(record_python_gc_info=True)}
        with profile(
            activities=acts,
            schedule=schedule(wait=1, warmup=2, active=active),
            record_shapes=True,
            on_trace_ready=tensorboard_trace_handler(str(out), worker_name="rank-0", use_gzip=True),
            **extra,
        ) as prof:
            for _ in range(1 + 2 + active):
                self.step()
                prof.step()
        sync()


def every(n: int, fn):
    def hook(loop: Loop) -> None:
        if loop.step_no % n == n - 1:
            fn(loop)

    return hook


def save_checkpoint(loop: Loop) -> None:
    try:
        torch.save(loop.model.state_dict(), "/dev/shm/perfsleuth_ckpt.pt")
    except (OSError, RuntimeError):
        torch.save(loop.model.state_dict(), "/tmp/perfsleuth_ckpt.pt")


_GARBAGE: list = []


def gc_collect(loop: Loop) -> None:
    gc.collect()


def make_garbage(n: int) -> None:
    """Millions of live, GC-tracked objects: every full collection has to walk them all."""
    for _ in range(n):
        a: list = []
        b = [a]
        a.append(b)
        _GARBAGE.append(a)


def empty_cache(loop: Loop) -> None:
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def scenario(name: str) -> tuple[Loop, dict]:
    """The loop for one scenario and what was injected."""
    if name == "healthy":
        return Loop(allreduce=_DIST), {"faults": [], "injected": "none: prefetched pinned batches, 8-layer bf16 MLP"}
    if name == "dataloader_stall":
        return Loop(stall_s=STALL_S, allreduce=_DIST), {
            "faults": ["dataloader_stall"],
            "injected": f"Dataset.__getitem__ sleeps {STALL_S * 1e3:.0f} ms (num_workers=0)",
        }
    if name == "checkpoint_stall":
        loop = Loop(allreduce=_DIST)
        loop.hooks.append(every(3, save_checkpoint))
        return loop, {
            "faults": ["checkpoint_stall"],
            "injected": "torch.save(model.state_dict()) to /dev/shm every 3rd step, no annotation",
        }
    if name == "gc_pause_recorded":  # the same collections, with the profiler's GC events on (PyTorch >= 2.9)
        loop, meta = scenario("gc_pause")
        return loop, {**meta, "injected": meta["injected"] + "; profiled with record_python_gc_info=True"}
    if name == "gc_pause":
        make_garbage(1_000_000 if not SMALL else 200_000)
        gc.disable()
        loop = Loop(allreduce=_DIST)
        loop.hooks.append(every(2, gc_collect))
        return loop, {"faults": ["gc_pause"], "injected": "1M live cyclic list pairs; gc.collect() every 2nd step"}
    if name == "allocator_churn":
        loop = Loop(allreduce=_DIST)
        loop.hooks.append(empty_cache)
        return loop, {"faults": ["allocator_churn"], "injected": "torch.cuda.empty_cache() after every step"}
    if name == "host_launch_bound":
        return (
            Loop(d=256, h=256, layers=120, tokens=32, allreduce=_DIST),
            {"faults": ["host_launch_bound"], "injected": "360 tiny layers (256 wide, 32 tokens): microsecond kernels"},
        )
    if name == "recompilation":
        return CompiledLoop(), {
            "faults": ["recompilation"],
            "injected": "torch.compile(dynamic=False) with the token count changing every step",
        }
    raise SystemExit(f"unknown scenario {name}")


class CompiledLoop(Loop):
    """A compiled model fed a new sequence length each step: every step recompiles (the classic shape-guard miss)."""

    def __init__(self, fixed_shape: bool = False) -> None:
        super().__init__(d=512, h=2048, layers=2, tokens=2048)
        import torch._dynamo.config as dynamo_config

        for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, knob):
                setattr(dynamo_config, knob, 256)
        self.compiled = torch.compile(self.model, dynamic=False)
        self.fixed_shape = fixed_shape

    def step(self) -> None:
        x = next(self.it).to(DEVICE, non_blocking=True)
        n = x.shape[0] if self.fixed_shape else x.shape[0] - 16 * (self.step_no + 1)
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            loss = self.compiled(x[:n]).float().pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step_no += 1


SCENARIOS = (
    "healthy",
    "dataloader_stall",
    "checkpoint_stall",
    "allocator_churn",
    "host_launch_bound",
    "gc_pause",
    "gc_pause_recorded",
    "recompilation",
)
_DIST = False


def init_dist() -> bool:
    """A one-rank NCCL group, so the traces carry distributedInfo and a real NCCL kernel per step."""
    if DEVICE != "cuda" or os.environ.get("PERFSLEUTH_DIST") != "1":
        return False
    try:
        import torch.distributed as dist

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
        return True
    except Exception as exc:  # noqa: BLE001 - capture without collectives rather than nothing
        print("no process group:", exc, file=sys.stderr)
        return False


def main() -> None:
    global _DIST
    out = Path(sys.argv[1])
    names = sys.argv[2:] or list(SCENARIOS)
    _DIST = init_dist()
    for name in names:
        t0 = time.perf_counter()
        loop, meta = scenario(name)
        times = loop.timed(4 if name == "recompilation" else TIMED_STEPS)
        extra = {}
        if name == "recompilation":  # the same compiled loop once its one shape is compiled
            extra["step_ms_fixed_shape_median"] = statistics.median(CompiledLoop(fixed_shape=True).timed(4))
        if name == "host_launch_bound":  # launch-bound: 4x the work per step costs (almost) nothing more
            big = Loop(d=256, h=256, layers=120, tokens=128)
            extra["step_ms_at_4x_tokens"] = statistics.median(big.timed())
            del big
        loop.profile(out / name, record_gc=name == "gc_pause_recorded")
        meta.update(
            {
                "scenario": name,
                "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
                "torch": torch.__version__,
                "nccl_group": _DIST,
                "step_ms": times,
                "step_ms_median": statistics.median(times),
                **extra,
            }
        )
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "capture.json").write_text(json.dumps(meta, indent=1))
        print(f"{name}: median step {meta['step_ms_median']:.2f} ms ({time.perf_counter() - t0:.1f} s)", flush=True)
        del loop
        gc.enable()
        _GARBAGE.clear()
        gc.collect()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
