"""A labeled suite from anyone's real traces: each job copied as a control, then transformed with
faults of known size (``real_faults``) and identity controls.

``make_real_suite(src, out, seed)`` finds the jobs under ``src`` (a folder of job folders, or of
trace files: one job per folder of rank files, or per file), and writes per job::

    OUT/<job>/original/         the unmodified files: the control every other case points to
    OUT/<job>/<transform>-<n>/  one case per transform, ``case.json`` naming its original

The label is the difference from the original: the injected fault with its size measured on the
replayed trace (the job's added time over the mutated job's time, ``Outcome.magnitude``), or no
fault for an identity control. ``perfsleuth evaluate`` diagnoses each original once and does not
count a finding the original already had as a false alarm (``cases.evaluate``).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfsleuth.cases import real_faults as rf
from perfsleuth.cases.case import DETECTABLE_MIN_IMPACT, Case, CaseFault, write_case
from perfsleuth.cases.kineto_raw import TRACE_SUFFIXES, index_rank, is_gz, load_doc, rank_of, save_doc, trace_files
from perfsleuth.cases.mutate_kineto import Outcome, comm_mask, job_time, round_us
from perfsleuth.diagnose.imbalance import PERSISTENT_ALPHA
from perfsleuth.ingest.kineto import SAMPLED_COVERAGE
from perfsleuth.trace.provenance import MIN_EVENTS, MIN_GPU_EVENTS

DETECTABLE_RULE = (
    "injected by construction; detectable when the job's added time (replayed mutated trace minus "
    f"the original) is at least {DETECTABLE_MIN_IMPACT:.0%} of the mutated job's time"
)
UNDETECTABLE_SHARE = 0.2
"""About one fault case in five is sized below the 3% bar on purpose (the diagnosis should abstain)."""
COPIES = 4
TUNE_TRIES = 4
STRAGGLER_ALPHA = PERSISTENT_ALPHA
"""A straggler is provable only when being slowest on every step is unlikely by chance (binomial, 1/ranks per
step, Bonferroni over ranks): the detector's own test level, as for the simulated suite's labels."""


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    files: tuple[Path, ...]


def find_jobs(src: Path) -> list[Job]:
    """Jobs under ``src``: each trace file directly in it, and each folder below holding trace files."""
    src = Path(src)
    if src.is_file():
        return [Job(_slug(src.name), (src,))]
    jobs = [Job(_slug(f.name), (f,)) for f in trace_files(src)]
    for d in sorted(Path(root) / x for root, dirs, _ in os.walk(src, followlinks=True) for x in dirs):
        files = trace_files(d)
        if files:
            jobs.append(Job(_slug(str(d.relative_to(src))), tuple(files)))
    return jobs


def _slug(text: str) -> str:
    for suf in TRACE_SUFFIXES:
        text = text.removesuffix(suf)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "job"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def usable(docs: list[dict[str, Any]]) -> str | None:
    """Why a job cannot be transformed (None when it can): every rank needs ProfilerStep spans and GPU work."""
    for d in docs:
        if not isinstance(d, dict) or not isinstance(d.get("traceEvents"), list):
            return "not a Kineto trace (no traceEvents)"
        idx = index_rank(d)
        if not idx.steps:
            return "no ProfilerStep spans"
        if not idx.chain.any():
            return "no GPU work"
    if len({rank_of(d, i) for i, d in enumerate(docs)}) != len(docs):
        return "rank files do not have distinct ranks"
    sizes = [
        (len(d["traceEvents"]), sum(1 for e in d["traceEvents"] if isinstance(e, dict) and str(e.get("cat", "")).lower() == "kernel"))
        for d in docs
    ]
    if max(n for n, _ in sizes) < FIXTURE_EVENTS or max(k for _, k in sizes) < FIXTURE_KERNELS:
        return (
            f"fixture-sized ({max(n for n, _ in sizes)} events, {max(k for _, k in sizes)} kernels): a hand-made "
            "or toy trace is no workload to inject a fault of known size into"
        )
    return None


FIXTURE_EVENTS = MIN_EVENTS
FIXTURE_KERNELS = MIN_GPU_EVENTS
"""The analysis's own fixture bar (``trace.provenance``): below these a trace is a test fixture or a
toy (HTA's hand-made traces hold 7-60 events); a fault injected there has no workload to be judged
against (perfsleuth answers "insufficient evidence")."""


def undetectable_reasons(job: Job, docs: list[dict[str, Any]]) -> dict[str, str]:
    """Faults that no diagnosis could prove from this job's traces, whatever their size, with why.

    - exposed_communication when ranks of the job are not traced: time inside a collective is then
      transfer or waiting for an untraced late rank, and nothing in the traces tells which;
    - unattributed_host_stall when the trace holds under half of the events the profiler numbered:
      a gap in a thinned host record is not silence."""
    out: dict[str, str] = {}
    world = max(int((d.get("distributedInfo") or {}).get("world_size") or 0) for d in docs)
    if world > len(docs):
        out["exposed_communication"] = (
            f"{len(docs)} of the job's {world} ranks are traced: slower collectives cannot be told from waiting for an untraced rank"
        )
    if all(_numbered_share(d) < SAMPLED_COVERAGE for d in docs):
        out["unattributed_host_stall"] = (
            "the trace holds under half of the events the profiler numbered (args 'Ev Idx'): "
            "it was sampled or filtered, so its host gaps are not silence"
        )
    return out


def _numbered_share(doc: dict[str, Any]) -> float:
    """Events present over the span of the profiler's event numbers (1.0 when it wrote none)."""
    idx = [
        e["args"]["Ev Idx"]
        for e in doc["traceEvents"]
        if isinstance(e, dict) and isinstance(e.get("args"), dict) and isinstance(e["args"].get("Ev Idx"), int)
    ]
    return len(idx) / (max(idx) - min(idx) + 1) if len(idx) > 1 else 1.0


class SuiteWriter:
    """Writes the cases of one job, all pointing to its original."""

    def __init__(self, job: Job, out: Path, docs: list[dict[str, Any]], rng: np.random.Generator) -> None:
        self.job, self.root, self.docs, self.rng = job, out / job.name, docs, rng
        self.origin = [{"path": str(f), "sha256": sha256(f)} for f in job.files]
        self.counter: dict[str, int] = {}
        self.written: list[Path] = []
        self.undetectable = undetectable_reasons(job, docs)

    def _dir(self, stem: str) -> Path:
        self.counter[stem] = self.counter.get(stem, 0) + 1
        return self.root / f"{stem}-{self.counter[stem]}"

    def original(self) -> Path:
        d = self.root / "original"
        d.mkdir(parents=True, exist_ok=True)
        for f in self.job.files:
            shutil.copy2(f, d / f.name)
        self._write(
            d,
            [],
            {"name": "original"},
            "the unmodified job: the control every case of this job is "
            "graded against (its own findings are not false alarms anywhere in the job)",
            "original",
            ".",
        )
        return d

    def _write(
        self,
        d: Path,
        faults: list[CaseFault],
        transform: dict[str, Any],
        notes: str,
        role: str,
        original: str,
        origin: list[dict[str, str]] | None = None,
    ) -> None:
        extra = {"role": role, "original": original, "transform": transform, "origin": origin or self.origin, "job": self.job.name}
        write_case(Case(d, tuple(faults), "real", notes, DETECTABLE_RULE if faults else "", extra))
        self.written.append(d)

    def save(self, d: Path, docs: list[dict[str, Any]], names: list[str] | None = None, gz: list[bool] | None = None) -> None:
        d.mkdir(parents=True, exist_ok=True)
        for k, doc in enumerate(docs):
            name = names[k] if names else self.job.files[min(k, len(self.job.files) - 1)].name
            save_doc(doc, d / name, gz[k] if gz else None)

    def control(self, kind: str) -> Path | None:
        """An identity: the diagnosis must equal the original's."""
        docs = copy.deepcopy(self.docs)
        names = [f.name for f in self.job.files]
        gz = [is_gz(f) for f in self.job.files]
        params: dict[str, Any] = {"name": kind}
        if kind == "time_shift":
            shift = int(self.rng.integers(1_000, 50_000_000)) * (1 if self.rng.random() < 0.5 else -1)
            for doc in docs:
                rf.time_shift(doc, shift)
            params["shift_us"] = shift
        elif kind == "rename":
            names = [
                f"renamed_{k}_{_slug(n)[:20]}.pt.trace.json" + (".gz" if g else "") for k, (n, g) in enumerate(zip(names, gz, strict=True))
            ]
        elif kind == "gzip":
            gz = [not g for g in gz]
            names = [n.removesuffix(".gz") if n.endswith(".gz") else n + ".gz" for n in names]
        elif kind == "rank_relabel":
            offset = int(self.rng.integers(1, 8))
            ranks = [rank_of(doc, k) for k, doc in enumerate(docs)]
            for doc, r in zip(docs, ranks, strict=True):
                rf.relabel_rank(doc, r + offset)
            names = [f"rank-{r + offset}.pt.trace.json" + (".gz" if g else "") for r, g in zip(ranks, gz, strict=True)]
            params["rank_offset"] = offset
        d = self._dir(f"control-{kind}")
        self.save(d, docs, names, gz)
        self._write(
            d,
            [],
            params,
            f"identity control ({kind}): nothing is injected, so the diagnosis must equal the original's; label: nothing new",
            "control",
            "../original",
        )
        return d

    def fault(
        self,
        fault: str,
        stem: str,
        make: Callable[[list[dict[str, Any]], float], Outcome],
        target: float,
        original: str = "../original",
        docs: list[dict[str, Any]] | None = None,
        extra_notes: str = "",
        origin: list[dict[str, str]] | None = None,
    ) -> Path | None:
        """Tune ``make(docs, scale)`` until the measured magnitude is near ``target``; write the case."""
        base = docs if docs is not None else self.docs
        scale = 1.0
        best: tuple[list[dict[str, Any]], Outcome] | None = None
        for _ in range(TUNE_TRIES):
            trial = copy.deepcopy(base)
            out = make(trial, scale)
            if out.after_ns <= 0 or (out.notes and not out.steps):
                return None
            best = (trial, out)
            m = out.magnitude
            if m <= 0:
                scale *= 4
                continue
            if abs(m - target) <= 0.25 * target:
                break
            scale *= min(max(target * (1 - m) / (m * (1 - target)), 0.2), 5.0)
        assert best is not None, "TUNE_TRIES >= 1: each try returns or keeps its trial"
        trial, out = best
        if out.magnitude <= 0:
            return None
        d = self._dir(stem)
        self.save(d, trial)
        m = round(out.magnitude, 4)
        scope = {"ranks": out.ranks, "steps": out.steps}
        notes = (
            f"{fault} injected into the real trace(s) by {stem}: {out.params}; the job's time grew from "
            f"{out.before_ns / 1e6:.1f} ms to {out.after_ns / 1e6:.1f} ms (replayed), magnitude {m:.3f} of the mutated "
            f"job's time (target {target:.3f}). " + " ".join(out.notes) + (" " + extra_notes if extra_notes else "")
        )
        why = self.undetectable.get(fault)
        if why:
            notes += f" Labeled undetectable whatever its size: {why}."
        self._write(
            d,
            [CaseFault(fault, scope, m, m >= DETECTABLE_MIN_IMPACT and not why)],
            {
                "name": stem,
                "params": _jsonable(out.params),
                "injected_us": out.injected_ns / 1000,
                "before_ns": out.before_ns,
                "after_ns": out.after_ns,
            },
            notes,
            "mutation",
            original,
            origin,
        )
        return d


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.integer | np.floating | np.bool_):
        return x.item()
    return x


def _target(rng: np.random.Generator, lo: float = 0.05, hi: float = 0.3) -> float:
    if rng.random() < UNDETECTABLE_SHARE:
        return float(rng.uniform(0.005, 0.02))
    return float(rng.uniform(lo, hi))


def _stall(kind: str, steps: list[int], total_ns: float, rng_seed: int) -> Callable[[list[dict[str, Any]], float], Outcome]:
    def make(docs: list[dict[str, Any]], scale: float) -> Outcome:
        per = round_us(total_ns * scale / len(steps))
        return rf.host_stall(docs, kind, {s: per for s in steps}, np.random.default_rng(rng_seed))

    return make


def write_job(job: Job, out: Path, rng: np.random.Generator) -> tuple[list[Path], str | None]:
    """All cases of one job; (written case dirs, why skipped or None)."""
    docs = [load_doc(f) for f in job.files]
    why = usable(docs)
    if why:
        return [], why
    w = SuiteWriter(job, out, docs, rng)
    w.original()
    for kind in ("time_shift", "rename", "gzip", "rank_relabel"):
        w.control(kind)
    indices = [index_rank(d) for d in docs]
    t0 = job_time(indices)
    steps = sorted(set.intersection(*[{n for n, _ in i.steps} for i in indices]))
    if steps:
        for fault, kind, pick in (
            ("dataloader_stall", "dataloader", "all"),
            ("dataloader_stall", "dataloader", "some"),
            ("checkpoint_stall", "checkpoint", "one"),
            ("allocator_churn", "allocator", "all"),
            ("unattributed_host_stall", "silent", "some"),
        ):
            chosen = _steps(steps, pick, rng)
            target = _target(rng)
            total = target * t0 / (1 - target)
            w.fault(fault, f"{fault}", _stall(kind, chosen, total, int(rng.integers(1 << 30))), target)
    target = _target(rng)
    w.fault("host_launch_bound", "host_launch_bound", lambda d, s: rf.launch_bound(d, round_us(20_000 * s)), target)
    if any(comm_mask(i).any() for i in indices):
        target = _target(rng)
        w.fault("exposed_communication", "slow_collectives", lambda d, s: rf.slow_collectives(d, 1 + 1.0 * s), target)
        _straggler(w, docs, indices, rng)
    return w.written, None


def _steps(steps: list[int], pick: str, rng: np.random.Generator) -> list[int]:
    if pick == "all" or len(steps) == 1:
        return steps
    if pick == "one":
        return [steps[len(steps) // 2]]
    k = max(1, len(steps) // 2)
    return sorted(int(x) for x in rng.choice(steps, size=k, replace=False))


def _straggler(w: SuiteWriter, docs: list[dict[str, Any]], indices: list[Any], rng: np.random.Generator) -> None:
    """A straggler on the job's own ranks when they are several and their collectives match; otherwise
    on copies of its first rank relabelled 0..COPIES-1 (a control of the copies is written too)."""
    from perfsleuth.cases.mutate_kineto import collective_groups

    target = _target(rng)
    ranks = len(docs) if len(docs) > 1 and collective_groups(indices) is not None else COPIES
    steps = min(len(i.steps) for i in indices)
    chance = min(1.0, ranks * (1 / ranks) ** steps)
    if chance >= STRAGGLER_ALPHA:
        w.undetectable["straggler_rank"] = (
            f"{steps} steps on {ranks} ranks: one rank is slowest on every step by chance "
            f"{chance:.0%} of the time, so no test can tell a straggler from chance"
        )
    if len(docs) > 1 and collective_groups(indices) is not None:
        pos = int(rng.integers(len(docs)))
        w.fault("straggler_rank", "straggler_rank", lambda d, s: rf.straggler(d, pos, 1 + 0.3 * s), target)
        return
    copies = []
    for r in range(COPIES):
        doc = copy.deepcopy(docs[0])
        rf.relabel_rank(doc, r)
        info = doc["distributedInfo"]
        info["world_size"] = COPIES
        copies.append(doc)
    names = [f"rank-{r}.pt.trace.json" + (".gz" if is_gz(w.job.files[0]) else "") for r in range(COPIES)]
    d = w.root / "copies-original"
    w.save(d, copies, names)
    origin = [w.origin[0]]
    w._write(
        d,
        [],
        {"name": "copies", "copies": COPIES},
        f"{COPIES} copies of the job's first rank file relabelled as "
        f"ranks 0..{COPIES - 1} (an identical-ranks job built from one real rank): the control of the straggler "
        "case made from it",
        "original",
        ".",
        origin,
    )
    pos = int(rng.integers(COPIES))
    orig_names = w.job.files
    w.job = Job(w.job.name, tuple(d / n for n in names))
    try:
        w.fault(
            "straggler_rank",
            "straggler_rank",
            lambda dd, s: rf.straggler(dd, pos, 1 + 0.3 * s),
            target,
            original="../copies-original",
            docs=copies,
            origin=origin,
            extra_notes=f"The job is {COPIES} copies of one real rank relabelled 0..{COPIES - 1}; rank {pos}'s compute "
            "kernels are stretched and its peers' matching collectives end with its arrival.",
        )
    finally:
        w.job = Job(w.job.name, orig_names)


def make_real_suite(
    src: str | Path, out: str | Path, seed: int = 0, log: Callable[[str], None] | None = None
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Write the suite; returns (case dirs, [(job, why skipped)])."""
    rng = np.random.default_rng(seed)
    out = Path(out)
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for job in find_jobs(Path(src)):
        try:
            paths, why = write_job(job, out, np.random.default_rng(rng.integers(1 << 62)))
        except (OSError, ValueError) as exc:
            paths, why = [], f"cannot read: {exc}"
        except Exception as exc:  # noqa: BLE001 - one odd job must not stop a user's whole suite; it is reported
            shutil.rmtree(out / job.name, ignore_errors=True)
            paths, why = [], f"transform failed: {type(exc).__name__}: {exc}"
        if why:
            skipped.append((job.name, why))
        written += paths
        if log:
            log(f"{job.name}: {len(paths)} cases" + (f" (skipped: {why})" if why else ""))
    return written, skipped
