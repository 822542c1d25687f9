"""Raw Kineto trace files as the transforms see them: the JSON document, written back in its own form,
and an index of one rank's events in integer nanoseconds.

The transforms of ``mutate_kineto`` edit the document itself (every key and arg kept), so the
mutated file is what the profiler would have written for the slower run; this module only reads,
writes and indexes. Times in the file are microseconds (floats with a nanosecond fraction in newer
traces); the index holds them as int64 ns so shifts add up exactly.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GPU_CHAIN_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
"""GPU work that occupies a stream in launch order (the events the re-timing moves)."""
GPU_ANNOTATION_CATS = frozenset({"gpu_user_annotation"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})
FLOW_PHASES = frozenset({"s", "f", "t"})
LAUNCH_FLOW_CATS = frozenset({"ac2g", "async_cpu_to_gpu", "async_gpu"})
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
LAUNCH_RE = re.compile(r"^(cuda|hip)LaunchKernel|^cuLaunchKernel|^cudaLaunchCooperativeKernel|^cudaGraphLaunch")
WAITING_RE = re.compile(r"Synchronize|Memcpy|^(cuda|hip)Free|^cuMemFree")
"""Runtime calls that may block the host until the GPU catches up (syncs, pageable copies, frees)."""
COMM_RE = re.compile(r"nccl|rccl|msccl", re.I)
TRACE_SUFFIXES = (".json", ".json.gz")


def is_gz(path: Path) -> bool:
    return path.name.endswith(".gz")


def load_doc(path: str | Path) -> dict[str, Any]:
    """The trace document (gzip or plain JSON)."""
    p = Path(path)
    raw = gzip.decompress(p.read_bytes()) if is_gz(p) else p.read_bytes()
    return json.loads(raw)


def save_doc(doc: dict[str, Any], path: str | Path, gz: bool | None = None) -> Path:
    """Write the document in the form its name says (``.gz`` stays gzip), keys in their order."""
    p = Path(path)
    gz = is_gz(p) if gz is None else gz
    data = json.dumps(doc, separators=(",", ":")).encode()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(gzip.compress(data, compresslevel=6, mtime=0) if gz else data)
    return p


def trace_files(folder: Path) -> list[Path]:
    """The Kineto traces in a folder, recognised by content (a case.json or capture.json beside them is not one)."""
    from perfsleuth.ingest.kineto import detect

    return sorted(f for f in folder.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES) and detect(f))


def rank_of(doc: dict[str, Any], default: int = 0) -> int:
    info = doc.get("distributedInfo")
    r = info.get("rank") if isinstance(info, dict) else None
    return int(r) if isinstance(r, int | float) else default


def _ns(x: Any) -> int:
    return int(round(float(x) * 1000.0))


@dataclass
class RankIndex:
    """One rank's ``ph: X`` events as arrays (int ns), with what the re-timing needs to know.

    ``ev`` holds the event dicts themselves (same order as the arrays), so a transform can write
    new times back into the document."""

    doc: dict[str, Any]
    ev: list[dict[str, Any]]
    ts: np.ndarray
    end: np.ndarray
    cat: np.ndarray
    name: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    corr: np.ndarray  # args.correlation, -1 without
    chain: np.ndarray  # GPU stream work
    gpu_ann: np.ndarray
    host: np.ndarray  # host spans, incl. the profiler's whole-trace "Trace" span
    launch_of: np.ndarray  # per event: index of its launching runtime call, -1 without
    main: tuple[Any, Any] | None  # (pid, tid) of the thread holding ProfilerStep spans
    steps: list[tuple[int, int]]  # (step number, event index) of host ProfilerStep spans, by start

    @property
    def rank(self) -> int:
        return rank_of(self.doc)

    def step_bounds(self) -> list[tuple[int, int, int]]:
        """(step, start ns, end ns) of the host ProfilerStep spans."""
        return [(n, int(self.ts[i]), int(self.end[i])) for n, i in self.steps]

    def main_thread(self) -> tuple[Any, Any]:
        """(pid, tid) of the main thread, where inserted host spans go; a trace without ProfilerStep spans has none."""
        if self.main is None:
            raise ValueError("the trace has no ProfilerStep spans: no main thread to insert host events on")
        return self.main


def index_rank(doc: dict[str, Any]) -> RankIndex:
    """Index the ``ph: X`` events of one rank's document."""
    ev = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    n = len(ev)
    ts = np.fromiter((_ns(e["ts"]) for e in ev), np.int64, n)
    dur = np.fromiter((_ns(e.get("dur", 0) or 0) for e in ev), np.int64, n)
    cat = np.array([str(e.get("cat", "")) for e in ev], dtype=object)
    name = np.array([str(e.get("name", "")) for e in ev], dtype=object)
    pid = np.array([e.get("pid") for e in ev], dtype=object)
    tid = np.array([e.get("tid") for e in ev], dtype=object)
    corr = np.fromiter(
        ((e.get("args") or {}).get("correlation", -1) if isinstance((e.get("args") or {}).get("correlation", -1), int) else -1 for e in ev),
        np.int64,
        n,
    )
    chain = np.isin(cat, list(GPU_CHAIN_CATS))
    gpu_ann = np.isin(cat, list(GPU_ANNOTATION_CATS))
    host = ~chain & ~gpu_ann & (cat != "cuda_sync") & (cat != "cuda_profiler_range")
    launch_cat = np.isin(cat, list(LAUNCH_CATS))
    by_corr: dict[int, int] = {}
    for i in np.flatnonzero(launch_cat & (corr >= 0)):
        by_corr[int(corr[i])] = int(i)
    launch_of = np.full(n, -1, np.int64)
    for i in np.flatnonzero(chain & (corr >= 0)):
        launch_of[i] = by_corr.get(int(corr[i]), -1)
    steps: list[tuple[int, int]] = []
    for i in np.flatnonzero(host):
        m = STEP_RE.match(name[i])
        if m:
            steps.append((int(m.group(1)), int(i)))
    steps.sort(key=lambda s: ts[s[1]])
    main = (pid[steps[0][1]], tid[steps[0][1]]) if steps else None
    return RankIndex(doc, ev, ts, ts + dur, cat, name, pid, tid, corr, chain, gpu_ann, host, launch_of, main, steps)
