"""Simulated training step logs with injected faults and their ground truth, for the step-log detectors.

A ``Job`` is a healthy run with realistic noise: log-normal step times, rare single long iterations
(a GC pause, a slow batch), cheap checkpoint saves, periodic evaluations, a noisy decreasing loss
and, in fp16, the loss scaler's start-up calibration and its periodic overflow-and-halve. Faults
change it: ``CheckpointStall`` (saves that block), ``LossSpike``, ``NanIterations``, ``SkipCascade``
(numeric anomalies), ``Restart`` (a crash, downtime, re-initialisation and recomputation from the
last checkpoint). The run is simulated iteration by iteration on a wall clock, then written in one
of ``FORMATS`` exactly as that framework writes it (Megatron-LM since 2024, Megatron-LM before
2022-08 without timestamps and with saves inside the iteration time, DeepSpeed, JSON Lines).

The ground truth of each fault is measured on the simulated clock (``magnitude``: the share of
wall time, or of iterations for numeric faults) and labelled detectable when the format can show
it (``DETECTABLE_RULE``). This module makes logs; ``diagnose.steplog`` judges them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("megatron", "megatron_old", "deepspeed", "jsonl")
FAULTS = ("checkpoint_stall", "numeric_anomaly", "restart_overhead")
SUFFIX = {"megatron": ".log", "megatron_old": ".log", "deepspeed": ".log", "jsonl": ".jsonl"}
DETECTABLE_MIN_IMPACT = 0.03
DETECTABLE_RULE = (
    "checkpoint_stall / restart_overhead: detectable when the share of wall time the log can show (saves; "
    "downtime + re-initialisation + recomputation; without timestamps, the recomputation of the logged "
    "iterations only) is at least 3% "
    "and, for checkpoints, the log names the saves or the save interval; numeric_anomaly: detectable when "
    "the format logs the signal (loss for spikes, NaN counts, skipped counts)"
)
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()
FIRST_INIT_S = 90.0
LOSS_OUTLIER_RATE = 1 / 2000
SPIKE_VISIBLE = 0.1
"""A loss spike is detectable when a logged row's mean loss rises at least 10% above the trend."""


@dataclass(frozen=True, slots=True)
class Job:
    """The healthy run."""

    format: str = "megatron"
    iterations: int = 3000
    log_interval: int = 10
    step_s: float = 1.2
    noise_cv: float = 0.03
    hiccup_rate: float = 1 / 800
    hiccup_max: float = 3.0
    drift: float = 0.0
    save_interval: int = 500
    save_s: float = 1.0
    save_lines: bool = True
    print_args: bool = True
    eval_interval: int = 1000
    eval_s: float = 8.0
    precision: str = "bf16"
    seq_length: int = 4096
    global_batch: int = 256
    world_size: int = 64
    seed: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointStall:
    save_s: float


@dataclass(frozen=True, slots=True)
class LossSpike:
    at: int
    size: float = 0.6
    length: int = 10


@dataclass(frozen=True, slots=True)
class NanIterations:
    at: int
    count: int = 3


@dataclass(frozen=True, slots=True)
class SkipCascade:
    at: int
    count: int = 20


@dataclass(frozen=True, slots=True)
class Restart:
    at: int
    downtime_s: float
    init_s: float


Fault = CheckpointStall | LossSpike | NanIterations | SkipCascade | Restart


@dataclass(frozen=True, slots=True)
class Truth:
    fault: str
    scope: dict[str, Any]
    magnitude: float
    detectable: bool
    note: str = ""


@dataclass(frozen=True, slots=True)
class SimLog:
    text: str
    suffix: str
    job: Job
    faults: tuple[Fault, ...]
    truth: tuple[Truth, ...]

    @property
    def expected(self) -> frozenset[str]:
        return frozenset(t.fault for t in self.truth if t.detectable)

    @property
    def undetectable(self) -> frozenset[str]:
        return frozenset(t.fault for t in self.truth if not t.detectable) - self.expected


# --- the simulated clock ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Iter:
    session: int
    step: int
    end_s: float
    dur_s: float
    loss: float
    grad_norm: float
    loss_scale: float
    lr: float
    skipped: bool
    nan: bool
    extra_s: float = 0.0  # saves/evals after the previous logged row, before this iteration


@dataclass(slots=True)
class _Event:
    session: int
    kind: str
    t_s: float
    step: int | None = None
    duration_s: float | None = None


@dataclass(slots=True)
class _Run:
    iters: list[_Iter] = field(default_factory=list)
    events: list[_Event] = field(default_factory=list)
    save_total_s: float = 0.0
    restart_lost_s: float = 0.0
    restart_recompute_s: float = 0.0
    restart_recompute_logged_s: float = 0.0
    restart_steps: list[int] = field(default_factory=list)
    save_steps: list[int] = field(default_factory=list)
    start_s: float = 0.0
    end_s: float = 0.0


def _loss(step: int) -> float:
    return 1.9 + 7.5 * (step + 50) ** -0.45


def simulate(job: Job, faults: tuple[Fault, ...]) -> _Run:
    """Iteration by iteration on a wall clock: durations, saves, evaluations, restarts, loss, loss scale."""
    rng = np.random.default_rng(job.seed)
    run = _Run()
    save_s = next((f.save_s for f in faults if isinstance(f, CheckpointStall)), job.save_s)
    restarts = sorted((f for f in faults if isinstance(f, Restart)), key=lambda f: f.at)
    spikes = [f for f in faults if isinstance(f, LossSpike)]
    nans = [f for f in faults if isinstance(f, NanIterations)]
    cascades = [f for f in faults if isinstance(f, SkipCascade)]
    fp16 = job.precision == "fp16"
    t = T0
    run.events.append(_Event(0, "start", t))
    t += FIRST_INIT_S
    run.start_s = t
    session, it, last_saved, pending = 0, 0, 0, 0.0
    scale, clean = (2.0**32 if fp16 else 1.0), 0
    sigma = math.sqrt(math.log(1 + job.noise_cv**2))
    draws = 2 * job.iterations + 16  # restarts recompute at most one run's worth
    durs = job.step_s * rng.lognormal(-(sigma**2) / 2, sigma, draws)
    durs *= np.where(rng.random(draws) < job.hiccup_rate, rng.uniform(1.5, job.hiccup_max, draws), 1.0)  # GC, slow batch
    noises = 0.015 * rng.standard_normal(draws)
    noises += np.where(rng.random(draws) < LOSS_OUTLIER_RATE, rng.choice([-0.04, 0.04], draws), 0.0)  # a harder batch
    gnoise = rng.lognormal(0, 0.1, draws)
    k = -1
    while it < job.iterations:
        it += 1
        k += 1
        dur = float(durs[k]) * (1 + job.drift * it / job.iterations)
        loss = _loss(it) * (1 + float(noises[k]))
        gnorm = (0.4 + 2.0 * (it + 20) ** -0.5) * float(gnoise[k])
        skipped = nan = False
        for s in spikes:
            if s.at <= it < s.at + s.length:
                bump = s.size * math.exp(-(it - s.at) / max(s.length / 3, 1))
                loss *= 1 + bump
                gnorm *= 1 + 6 * bump
                if fp16 and it == s.at:
                    skipped = True
        nan = any(n.at <= it < n.at + n.count for n in nans)
        cascade = any(c.at <= it < c.at + c.count for c in cascades)
        if fp16:
            if scale > 2.0**16 or cascade or skipped:
                skipped = True
                scale = max(scale / 2, 1.0)
                clean = 0
            else:
                clean += 1
                if clean >= 1000:
                    scale, clean = scale * 2, 0
        elif cascade:
            skipped = True
        t += dur
        lr = 3e-4 * min(1.0, it / 500) * (0.5 + 0.5 * math.cos(math.pi * min(it, job.iterations) / job.iterations))
        run.iters.append(_Iter(session, it, t, dur, loss, gnorm, scale, lr, skipped, nan, pending))
        pending = 0.0
        if restarts and it == restarts[0].at:
            r = restarts.pop(0)
            recompute = sum(x.dur_s for x in run.iters if x.session == session and x.step > last_saved)
            logged = it // job.log_interval * job.log_interval  # iterations after the last logged row leave no trace
            run.restart_recompute_logged_s += sum(x.dur_s for x in run.iters if x.session == session and last_saved < x.step <= logged)
            t += r.downtime_s
            session += 1
            run.events.append(_Event(session, "start", t))
            t += r.init_s
            run.events.append(_Event(session, "checkpoint_load", t, last_saved))
            run.restart_lost_s += r.downtime_s + r.init_s + recompute
            run.restart_recompute_s += recompute
            run.restart_steps.append(last_saved)
            it = last_saved
            continue
        if job.eval_interval and it % job.eval_interval == 0 and job.format != "deepspeed":
            d = job.eval_s * float(rng.lognormal(0, 0.05))
            t += d
            pending += d
            run.events.append(_Event(session, "eval", t, it))
        if it % job.save_interval == 0 and it < job.iterations:
            d = save_s * float(rng.lognormal(0, 0.08))
            run.events.append(_Event(session, "checkpoint_save", t, it))
            t += d
            pending += d
            run.events.append(_Event(session, "checkpoint_saved", t, it, d))
            run.save_total_s += d
            run.save_steps.append(it)
            last_saved = it
    run.end_s = run.iters[-1].end_s  # the wall time the log covers ends with the last iteration
    return run


# --- ground truth -----------------------------------------------------------------------------------


def _truth(job: Job, faults: tuple[Fault, ...], run: _Run) -> tuple[Truth, ...]:
    wall = run.end_s - run.start_s
    out = []
    timed = job.format != "megatron_old"
    for f in faults:
        if isinstance(f, CheckpointStall):
            mag = run.save_total_s / wall
            named = job.save_lines or (job.print_args and job.format.startswith("megatron"))  # only Megatron prints it
            out.append(
                Truth(
                    "checkpoint_stall",
                    {"steps": list(run.save_steps)},
                    mag,
                    mag >= DETECTABLE_MIN_IMPACT and named,
                    "" if named else "neither save lines nor the save interval in the log",
                )
            )
        elif isinstance(f, Restart):
            visible = run.restart_lost_s if timed else run.restart_recompute_logged_s
            out.append(
                Truth(
                    "restart_overhead",
                    {"steps": list(run.restart_steps)},
                    run.restart_lost_s / wall,
                    visible / wall >= DETECTABLE_MIN_IMPACT,
                    "" if timed else "no timestamps: only the recomputation of logged iterations shows",
                )
            )
    numeric = [f for f in faults if isinstance(f, LossSpike | NanIterations | SkipCascade)]
    if numeric:
        steps: list[int] = []
        affected = 0
        visible = False
        for f in numeric:
            if isinstance(f, LossSpike):
                steps.append(f.at)
                affected += f.length
                visible |= job.format != "deepspeed" and _row_bump(f, job.log_interval, job.precision == "fp16") >= SPIKE_VISIBLE
            elif isinstance(f, NanIterations):
                steps.append(f.at)
                affected += f.count
                visible |= job.format != "deepspeed"
            else:
                steps.append(f.at)
                affected += f.count
                visible = True
        out.append(Truth("numeric_anomaly", {"steps": steps}, affected / job.iterations, visible))
    return tuple(out)


def _row_bump(spike: LossSpike, interval: int, fp16: bool) -> float:
    """The largest mean relative loss rise of a logged row (rows average ``interval`` iterations; in
    fp16 the spike's first iteration overflows and is skipped, so it is not in the average)."""
    first = (spike.at - 1) // interval * interval + 1
    best = 0.0
    for start in range(first, spike.at + spike.length, interval):
        kept = [i for i in range(start, start + interval) if not (fp16 and i == spike.at)]
        bumps = [
            spike.size * math.exp(-(i - spike.at) / max(spike.length / 3, 1)) if spike.at <= i < spike.at + spike.length else 0.0
            for i in kept
        ]
        best = max(best, float(np.mean(bumps)) if bumps else 0.0)
    return best


# --- writers ----------------------------------------------------------------------------------------


def _ts(t: float, fmt: str = "%Y-%m-%d %H:%M:%S.%f") -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime(fmt)


@dataclass(slots=True)
class _Row:
    session: int
    step: int
    end_s: float
    its: list[_Iter]

    @property
    def mean_s(self) -> float:
        return float(np.mean([x.dur_s for x in self.its]))

    @property
    def extra_s(self) -> float:
        return sum(x.extra_s for x in self.its)


def _rows(run: _Run, interval: int) -> list[_Row]:
    """Logged rows: every ``interval`` iterations of each session, covering the iterations since the last row."""
    rows: list[_Row] = []
    acc: list[_Iter] = []
    session = 0
    for x in run.iters:
        if x.session != session:
            acc, session = [], x.session
        acc.append(x)
        if x.step % interval == 0:
            rows.append(_Row(x.session, x.step, x.end_s, acc))
            acc = []
    return rows


def _merge(rows: list[_Row], events: list[_Event]) -> list[tuple[float, int, Any]]:
    items: list[tuple[float, int, Any]] = [(r.end_s, 0, r) for r in rows]
    items += [(e.t_s, 1, e) for e in events]
    return sorted(items, key=lambda x: (x[0], x[1]))


def _megatron(job: Job, run: _Run, rng: np.random.Generator, old: bool) -> str:
    out: list[str] = []
    rows = _rows(run, job.log_interval)
    tflop = 6 * 7e9 * job.seq_length * job.global_batch / 1e12 / job.world_size

    def header(session: int) -> None:
        out.append(
            f"using world size: {job.world_size}, data-parallel size: {job.world_size // 8}, "
            "tensor-model-parallel size: 8, pipeline-model-parallel size: 1"
        )
        if job.print_args:
            out.append("------------------------ arguments ------------------------")
            for k, v in (
                ("global_batch_size", job.global_batch),
                ("log_interval", job.log_interval),
                ("save_interval", job.save_interval),
                ("seq_length", job.seq_length),
                ("train_iters", job.iterations),
                ("world_size", job.world_size),
            ):
                out.append(f"  {k} {'.' * (48 - len(k))} {v}")
            out.append("-------------------- end of arguments ---------------------")
        out.append("> building GPT2BPETokenizer tokenizer ...")
        out.append("> initializing torch distributed ...")
        out.append("> building GPT model ...")

    for _, kind, item in _merge(rows, run.events):
        if kind == 1:
            e: _Event = item
            stamp = "" if old else f"[{_ts(e.t_s)}] "
            if e.kind == "start":
                header(e.session)
            elif e.kind == "checkpoint_load":
                out.append(f" loading checkpoint from /ckpt at iteration {e.step}")
                out.append(f"  successfully loaded checkpoint from /ckpt [ t 1/8, p 1/1 ] at iteration {e.step}")
                if not old:
                    out.append(f"[after megatron is initialized] datetime: {_ts(e.t_s, '%Y-%m-%d %H:%M:%S')} ")
                out.append("training ...")
            elif e.kind == "checkpoint_save" and job.save_lines:
                out.append(f"{stamp}saving checkpoint at iteration {e.step:7d} to /ckpt" + ("" if old else " in torch_dist format"))
            elif e.kind == "checkpoint_saved" and job.save_lines:
                if old:
                    out.append(f"  successfully saved checkpoint at iteration {e.step:7d} to /ckpt")
                else:
                    out.append(f"  {stamp}successfully saved checkpoint from iteration {e.step:7d} to /ckpt [ t 1/8, p 1/1 ]")
                    ms = (e.duration_s or 0) * 1e3
                    out.append("(min, max) time across ranks (ms):")
                    out.append(f"    {'save-checkpoint '.ljust(48, '.')}: ({ms * 0.98:.2f}, {ms:.2f})")
            elif e.kind == "eval":
                val_loss = _loss(e.step or 1) * 1.02
                out.append("-" * 100)
                out.append(
                    f" validation loss at iteration {e.step} on validation set | lm loss value: {val_loss:.6E} | "
                    f"lm loss PPL: {math.exp(val_loss):.6E} | "
                )
                out.append("-" * 100)
            continue
        r: _Row = item
        n = len(r.its)
        ms = (r.mean_s + (r.extra_s / n if old else 0.0)) * 1e3
        good = [x for x in r.its if not x.skipped and not x.nan]
        loss = float(np.mean([x.loss for x in good])) if good else None
        last = r.its[-1]
        parts = [
            (" " if old else f" [{_ts(r.end_s)}]") + f" iteration {r.step:8d}/{job.iterations:8d}",
            f" consumed samples: {r.step * job.global_batch:12d}",
            f" elapsed time per iteration (ms): {ms:.1f}",
        ]
        if not old:
            parts.append(f" throughput per GPU (TFLOP/s/GPU): {tflop / (ms / 1e3):.1f}")
        parts.append(f" learning rate: {last.lr:.3E}" if old else f" learning rate: {last.lr:.6E}")
        parts.append(f" global batch size: {job.global_batch:5d}")
        if loss is not None:
            parts.append(f" lm loss: {loss:.6E}")
        parts.append(f" loss scale: {last.loss_scale:.1f}")
        parts.append(f" grad norm: {last.grad_norm:.3f}")
        parts.append(f" number of skipped iterations: {sum(x.skipped for x in r.its):3d}")
        parts.append(f" number of nan iterations: {sum(x.nan for x in r.its):3d}")
        out.append("|".join(parts) + " |")
        fb = r.mean_s * 1e3 * 0.93
        if old:
            out.append(
                f"time (ms) | forward-compute: {fb * 0.33:.2f} | backward-compute: {fb * 0.67:.2f} | "
                f"optimizer: {r.mean_s * 1e3 * 0.05:.2f} | batch-generator: {float(rng.uniform(0.5, 2)):.2f}"
            )
        else:
            out.append("(min, max) time across ranks (ms):")
            for name, v in (
                ("forward-backward", fb),
                ("optimizer", r.mean_s * 1e3 * 0.05),
                ("batch-generator", float(rng.uniform(0.5, 2))),
            ):
                out.append(f"    {(name + ' ').ljust(48, '.')}: ({v * 0.99:.2f}, {v:.2f})")
    out.append("[after training is done]" + ("" if old else f" datetime: {_ts(run.end_s, '%Y-%m-%d %H:%M:%S')} "))
    return "\n".join(out) + "\n"


def _deepspeed(job: Job, run: _Run, rng: np.random.Generator) -> str:
    out: list[str] = []
    rows = _rows(run, job.log_interval)

    def log(t: float, where: str, msg: str) -> None:
        out.append(f"[{_ts(t, '%Y-%m-%d %H:%M:%S')},{int((t % 1) * 1000):03d}] [INFO] [{where}] {msg}")

    def header(t: float) -> None:
        log(t, "logging.py:107:log_dist", "[Rank 0] DeepSpeed info: version=0.14.0, git-hash=unknown, git-branch=unknown")
        log(t, "config.py:996:print", "DeepSpeedEngine configuration:")
        for k, v in (
            ("steps_per_print", job.log_interval),
            ("train_batch_size", job.global_batch),
            ("world_size", job.world_size),
            ("wall_clock_breakdown", True),
        ):
            log(t, "config.py:1000:print", f"  {k} {'.' * max(2, 30 - len(k))} {v}")

    prev_skipped: dict[int, int] = {}
    for _, kind, item in _merge(rows, run.events):
        if kind == 1:
            e: _Event = item
            if e.kind == "start":
                header(e.t_s)
            elif e.kind == "checkpoint_load":
                log(
                    e.t_s,
                    "torch_checkpoint_engine.py:27:load",
                    f"[Torch] Begin Load checkpoint from /ckpt/global_step{e.step}/mp_rank_00_model_states.pt...",
                )
            elif e.kind == "checkpoint_save" and job.save_lines:
                log(
                    e.t_s,
                    "logging.py:107:log_dist",
                    f"[Rank 0] Saving model checkpoint: /ckpt/global_step{e.step}/mp_rank_00_model_states.pt",
                )
            elif e.kind == "checkpoint_saved" and job.save_lines:
                log(e.t_s, "torch_checkpoint_engine.py:33:commit", f"[Torch] Checkpoint global_step{e.step} is ready now!")
            continue
        r: _Row = item
        for x in r.its:
            if x.skipped:
                log(
                    x.end_s,
                    "loss_scaler.py:183:update_scale",
                    f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                    f"scale: {int(x.loss_scale * 2)}, reducing to {int(x.loss_scale)}",
                )
        total = prev_skipped.get(r.session, 0) + sum(x.skipped for x in r.its)
        prev_skipped[r.session] = total
        last = r.its[-1]
        log(r.end_s, "logging.py:107:log_dist", f"[Rank 0] step={r.step}, skipped={total}, lr=[{last.lr}], mom=[(0.9, 0.95)]")
        log(
            r.end_s,
            "timer.py:264:stop",
            f"epoch=0/micro_step={r.step}/global_step={r.step}, RunningAvgSamplesPerSec="
            f"{job.global_batch / r.mean_s:.6f}, CurrSamplesPerSec={job.global_batch / last.dur_s:.6f}, MemAllocated=21.4GB, "
            f"MaxMemAllocated=61.2GB",
        )
        ms = last.dur_s * 1e3
        out.append(f"[Rank 0] time (ms) | fwd: {ms * 0.3:.2f} | bwd: {ms * 0.6:.2f} | step: {ms * 0.1:.2f}")
    return "\n".join(out) + "\n"


def _jsonl(job: Job, run: _Run) -> str:
    out: list[str] = []
    rows = _rows(run, job.log_interval)
    tokens = job.global_batch * job.seq_length
    for _, kind, item in _merge(rows, run.events):
        if kind == 1:
            e: _Event = item
            if e.kind == "checkpoint_save":
                continue  # one JSONL event per save, written when it ends, with its duration
            if e.kind == "checkpoint_saved":
                if job.save_lines:
                    out.append(
                        json.dumps(
                            {"event": "checkpoint_save", "step": e.step, "time": round(e.t_s, 3), "duration_s": round(e.duration_s or 0, 3)}
                        )
                    )
                continue
            doc: dict[str, Any] = {"event": e.kind, "time": round(e.t_s, 3)}
            if e.step is not None:
                doc["step"] = e.step
            out.append(json.dumps(doc))
            continue
        r: _Row = item
        n = len(r.its)
        good = [x for x in r.its if not x.skipped and not x.nan]
        doc = {
            "step": r.step,
            "step_time_s": round(r.mean_s, 5),
            "time": round(r.end_s, 3),
            "tokens": tokens,
            "samples": job.global_batch,
            "loss": round(float(np.mean([x.loss for x in good])), 5) if good else None,
            "grad_norm": round(r.its[-1].grad_norm, 4),
            "loss_scale": r.its[-1].loss_scale,
            "lr": r.its[-1].lr,
            "skipped": sum(x.skipped for x in r.its),
            "nan": sum(x.nan for x in r.its),
            "gpus": job.world_size,
        }
        if n != 1:
            doc["iterations"] = n
        out.append(json.dumps(doc))
    return "\n".join(out) + "\n"


def make_log(job: Job, faults: tuple[Fault, ...] = ()) -> SimLog:
    """Simulate the job with its faults and write its log; the truth says what is wrong and how much."""
    if job.format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    run = simulate(job, faults)
    rng = np.random.default_rng(job.seed + 1)
    if job.format in ("megatron", "megatron_old"):
        text = _megatron(job, run, rng, old=job.format == "megatron_old")
    elif job.format == "deepspeed":
        text = _deepspeed(job, run, rng)
    else:
        text = _jsonl(job, run)
    return SimLog(text, SUFFIX[job.format], job, faults, _truth(job, faults, run))


# --- a suite ----------------------------------------------------------------------------------------


def _random_job(rng: np.random.Generator, seed: int) -> Job:
    fmt = str(rng.choice(FORMATS, p=[0.4, 0.2, 0.2, 0.2]))
    interval = int(rng.choice([5, 10, 20])) if fmt != "jsonl" else int(rng.choice([1, 5, 10]))
    save_interval = int(rng.choice([250, 500, 1000]))
    return Job(
        format=fmt,
        iterations=int(rng.integers(1000, 2501)) // 100 * 100,
        log_interval=interval,
        step_s=float(rng.uniform(0.4, 6.0)),
        noise_cv=float(rng.uniform(0.01, 0.08)),
        hiccup_rate=float(np.exp(rng.uniform(np.log(1 / 3000), np.log(1 / 50)))),
        hiccup_max=float(rng.uniform(2.0, 8.0)),
        drift=float(rng.uniform(-0.05, 0.15)),
        save_interval=save_interval,
        save_s=float(rng.uniform(0.2, 0.004 * save_interval)),
        precision="fp16" if rng.random() < 0.35 else "bf16",
        eval_interval=int(rng.choice([0, 1000, 2000])),
        eval_s=float(rng.uniform(2, 15)),
        world_size=int(rng.choice([8, 64, 512])),
        seed=seed,
    )


def _random_fault(rng: np.random.Generator, fault: str, job: Job) -> tuple[Job, tuple[Fault, ...]]:
    n = job.iterations
    if fault == "checkpoint_stall":
        share = float(rng.uniform(0.01, 0.2))  # some below the bar on purpose
        period = job.save_interval * job.step_s
        save_s = share * period / (1 - share)
        hide = rng.random()
        job = replace(job, save_lines=hide > 0.2, print_args=hide > 0.1)
        return job, (CheckpointStall(save_s),)
    if fault == "restart_overhead":
        at = int(rng.integers(n // 4, 3 * n // 4))
        if at % job.save_interval == 0:
            at += 1
        wall = n * job.step_s
        share = float(rng.uniform(0.01, 0.15))
        lost = share * wall
        recompute = (at % job.save_interval) * job.step_s
        rest = max(lost - recompute, 30.0)
        return job, (Restart(at, downtime_s=0.6 * rest, init_s=0.4 * rest),)
    kind = int(rng.integers(0, 3)) if job.format != "deepspeed" else 2
    at = int(rng.integers(n // 5, 4 * n // 5))
    if kind == 0:
        return job, (LossSpike(at, size=float(rng.uniform(0.3, 1.5)), length=int(rng.integers(3, 30))),)
    if kind == 1:
        return job, (NanIterations(at, count=int(rng.integers(1, 6))),)
    return replace(job, precision="fp16"), (SkipCascade(at, count=int(rng.integers(15, 40))),)


def suite(n: int = 100, seed: int = 7, healthy_share: float = 0.3) -> list[SimLog]:
    """``n`` simulated logs: about ``healthy_share`` healthy, the rest with one fault each, formats mixed."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        job = _random_job(rng, seed * 1000 + i)
        faults: tuple[Fault, ...] = ()
        if rng.random() >= healthy_share:
            job, faults = _random_fault(rng, FAULTS[i % len(FAULTS)], job)
        out.append(make_log(job, faults))
    return out


def write_case(sim: SimLog, directory: str | Path, name: str = "train") -> Path:
    """Write the log and its ``case.json`` (``perfsleuth.cases.case`` format) into ``directory``."""
    from perfsleuth.cases.case import Case, CaseFault
    from perfsleuth.cases.case import write_case as write

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    log = d / f"{name}{sim.suffix}"
    log.write_text(sim.text)
    faults = tuple(CaseFault(t.fault, t.scope, round(t.magnitude, 4), t.detectable) for t in sim.truth)
    notes = "; ".join(
        [f"simulated {sim.job.format} step log: {', '.join(map(repr, sim.faults)) or 'healthy'}"]
        + [f"{t.fault}: {t.note}" for t in sim.truth if t.note]
    )
    write(Case(d, faults, "simulated", notes, DETECTABLE_RULE if faults else ""))
    return log
