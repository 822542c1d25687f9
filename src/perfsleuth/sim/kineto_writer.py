"""Write a simulated job as PyTorch-profiler (Kineto) Chrome-trace JSON, one file per rank.

Why: the analyses must read simulated jobs through the same reader as real ones, so the files
copy the real writer's shape (``libkineto`` ``output_json``): top-level keys in its order, one
event per line, ``ts``/``dur`` in microseconds with a nanosecond fraction, host events on the
process id, GPU events on ``pid = device`` and ``tid = stream``, ``ac2g`` flows from launch to
kernel, collective metadata on ``record_param_comms`` and on the NCCL kernel. Timestamps are the
true time plus the rank's clock offset, which the analyses must undo. With ``profile_memory`` the
header gets ``"profile_memory": 1`` and the host thread one ``[memory]`` instant event per
allocation/free (``Addr``, ``Bytes``, ``Total Allocated``, ``Total Reserved``), as Kineto writes
them. A job cut short by a hang ends its window where the simulator says, with the kernels still
running written up to that end.

The header is written with spaces after ``:`` as Kineto does (HTA finds the rank with the regex
``"rank":\\s+(\\d+)``); events are serialized by orjson for speed. No simulation happens here.
"""

from __future__ import annotations

import gc
import gzip as gzip_mod
import json
from pathlib import Path
from typing import Any

import orjson

from perfsleuth.sim.simulator import (
    CBID,
    H_ANNOTATION,
    K_MEMCPY,
    RankTrace,
    SimulatedJob,
    device_properties,
)

HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime")
_FLOW_FROM = frozenset({CBID["cudaLaunchKernel"], CBID["cudaLaunchKernelExC"], CBID["cudaMemcpyAsync"]})


def _events(job: SimulatedJob, tr: RankTrace) -> list[dict[str, Any]]:
    """All traceEvents of one rank, in Kineto's order: host ops, runtime, GPU, metadata, spans."""
    off = job.trace_start_ns + job.clock_offset_ns[tr.rank]
    pid = tid = tr.pid
    dev = tr.device
    out: list[dict[str, Any]] = []
    add = out.append
    host = sorted(tr.host, key=lambda e: (e[2], -e[3]))
    idx = 0
    mem, m, n_mem = tr.memory, 0, len(tr.memory)
    for cat, name, a, z, ext, _corr, extra in host:
        if cat <= H_ANNOTATION:
            while m < n_mem and mem[m][0] < a:  # [memory] instant events, in time order among the ops
                idx = _memory_event(add, mem[m], off, pid, tid, dev, idx)
                m += 1
            args = {"External id": ext, "Record function id": ext, "Ev Idx": idx}
            if extra:
                args.update(extra)
            idx += 1
            add(
                {
                    "ph": "X",
                    "cat": HOST_CATS[cat],
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": (a + off) / 1000,
                    "dur": (z - a) / 1000,
                    "args": args,
                }
            )
    for rec in mem[m:]:
        idx = _memory_event(add, rec, off, pid, tid, dev, idx)
    for cat, name, a, z, ext, corr, cbid in host:
        if cat > H_ANNOTATION:
            ts = (a + off) / 1000
            add(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": (z - a) / 1000,
                    "args": {"External id": ext, "cbid": cbid, "correlation": corr},
                }
            )
            if cbid in _FLOW_FROM:
                add({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g", "name": "ac2g"})
    for g in sorted(tr.gpu, key=lambda g: g.start):
        ts, dur = (g.start + off) / 1000, (g.end - g.start) / 1000
        if g.kind == K_MEMCPY:
            add(
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": g.name,
                    "pid": dev,
                    "tid": g.stream,
                    "ts": ts,
                    "dur": dur,
                    "args": {
                        "External id": g.ext,
                        "device": dev,
                        "context": 1,
                        "stream": g.stream,
                        "correlation": g.corr,
                        "bytes": g.nbytes,
                        "memory bandwidth (GB/s)": g.nbytes / max(1, g.end - g.start),
                    },
                }
            )
        else:
            args = {
                "External id": g.ext,
                "queued": 0,
                "device": dev,
                "context": 1,
                "stream": g.stream,
                "correlation": g.corr,
                **(g.static or {}),
            }
            if g.cargs:
                args.update(g.cargs)
            add({"ph": "X", "cat": "kernel", "name": g.name, "pid": dev, "tid": g.stream, "ts": ts, "dur": dur, "args": args})
        add({"ph": "f", "id": g.corr, "pid": dev, "tid": g.stream, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"})
    for a, z, ext, corr, stream in tr.syncs:
        add(
            {
                "ph": "X",
                "cat": "cuda_sync",
                "name": "Stream Sync",
                "pid": dev,
                "tid": stream,
                "ts": (a + off) / 1000,
                "dur": (z - a) / 1000,
                "args": {
                    "External id": ext,
                    "cuda_sync_kind": "Stream Sync",
                    "stream": stream,
                    "correlation": corr,
                    "device": dev,
                    "context": 1,
                },
            }
        )
    for name, ext, stream, a, z in tr.gpu_annotations:
        add(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": name,
                "pid": dev,
                "tid": stream,
                "ts": (a + off) / 1000,
                "dur": (z - a) / 1000,
                "args": {"External id": ext},
            }
        )
    t0 = min(host[0][2], min((g.start for g in tr.gpu), default=host[0][2])) - 30_000
    t1 = max(max(e[3] for e in host), max((g.end for g in tr.gpu), default=0)) + 50_000
    if tr.window_end is not None:  # the profiler was stopped while work was still running
        t1 = tr.window_end
    ts0, ts1 = (t0 + off) / 1000, (t1 + off) / 1000
    streams = sorted({g.stream for g in tr.gpu} | {s[4] for s in tr.syncs})
    meta = [
        (pid, 0, "process_name", {"name": "python3"}),
        (pid, 0, "process_labels", {"labels": "CPU"}),
        (pid, 0, "process_sort_index", {"sort_index": pid}),
        (dev, 0, "process_name", {"name": "python3"}),
        (dev, 0, "process_labels", {"labels": f"GPU {dev}"}),
        (dev, 0, "process_sort_index", {"sort_index": 16777216 + dev}),
    ]
    for s in streams:
        meta += [(dev, s, "thread_name", {"name": f"stream {s} "}), (dev, s, "thread_sort_index", {"sort_index": s})]
    meta += [(pid, tid, "thread_name", {"name": f"thread {tid} (pt_main_thread)"}), (pid, tid, "thread_sort_index", {"sort_index": tid})]
    out += [{"name": n, "ph": "M", "ts": ts0, "pid": p, "tid": t, "args": a} for p, t, n, a in meta]
    out.append({"name": "process_sort_index", "ph": "M", "ts": ts0, "pid": "Spans", "tid": 0, "args": {"sort_index": 536870912}})
    out.append(
        {
            "ph": "X",
            "cat": "Trace",
            "ts": ts0,
            "dur": (t1 - t0) / 1000,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
    )
    out.append(
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": ts0}
    )
    out.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": ts1})
    return out


def _memory_event(add, rec: tuple, off: int, pid: int, tid: int, dev: int, idx: int) -> int:
    """One ``[memory]`` instant event (a caching-allocator allocation, or a free with negative Bytes)."""
    t, addr, nbytes, allocated, reserved = rec
    add(
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            "pid": pid,
            "tid": tid,
            "ts": (t + off) / 1000,
            "args": {
                "Ev Idx": idx,
                "Device Type": 1,
                "Device Id": dev,
                "Addr": addr,
                "Bytes": nbytes,
                "Total Allocated": allocated,
                "Total Reserved": reserved,
            },
        }
    )
    return idx + 1


def _header(job: SimulatedJob, tr: RankTrace) -> dict[str, Any]:
    cfg = job.config
    n_dev = min(8, cfg.world_size)
    return {
        "schemaVersion": 1,
        "deviceProperties": [device_properties(cfg.gpu_name, d) for d in range(n_dev)],
        "distributedInfo": {
            "backend": "nccl",
            "rank": tr.rank,
            "world_size": cfg.world_size,
            "pg_count": len(tr.process_groups),
            "pg_config": tr.process_groups,
            "nccl_version": cfg.nccl_version,
        },
        "record_shapes": 0,
        **({"profile_memory": 1} if cfg.profile_memory else {}),
        "cupti_version": 24,
        "cuda_runtime_version": 12040,
        "cuda_driver_version": 12040,
        "trace_id": tr.trace_id,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": (1_730_000_000 + cfg.seed % 50_000_000) * 1_000_000_000,
    }


def trace_dict(job: SimulatedJob, rank: int) -> dict[str, Any]:
    """One rank's trace as the dict ``json.load`` would give for the written file."""
    tr = job.ranks[rank]
    return {**_header(job, tr), "traceEvents": _events(job, tr), "traceName": _trace_name(tr)}


def _trace_name(tr: RankTrace) -> str:
    return f"/tmp/rank-{tr.rank}.{tr.pid}.pt.trace.json"


def trace_bytes(job: SimulatedJob, rank: int) -> bytes:
    """The file content for one rank: Kineto-style header, one event per line."""
    tr = job.ranks[rank]
    head = json.dumps(_header(job, tr))[:-1].encode()  # drop the closing brace
    was_enabled = gc.isenabled()
    gc.disable()  # ~100k short-lived dicts: collector passes would dominate the run time
    try:
        events = _events(job, tr)
    finally:
        if was_enabled:
            gc.enable()
    # One orjson call for the whole list, then one event per line as Kineto writes it. Events hold
    # no lists of objects, so "},{" followed by a quote only occurs between two events.
    body = orjson.dumps(events)[1:-1].replace(b'},{"', b'},\n{"')
    tail = json.dumps(_trace_name(tr)).encode()
    return b"".join([head, b', "traceEvents": [\n', body, b'\n], "traceName": ', tail, b"}\n"])


def write_rank(job: SimulatedJob, rank: int, path: Path, *, gzip: bool = False) -> Path:
    """Write one rank's trace to ``path`` (gzip level 1 when ``gzip``: fast, ~8x smaller)."""
    data = trace_bytes(job, rank)
    if gzip:
        with gzip_mod.open(path, "wb", compresslevel=1) as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def write_job(job: SimulatedJob, out_dir: Path, *, gzip: bool = False) -> list[Path]:
    """Write ``rank-{r}.json[.gz]`` for every rank and ``truth.json``; return the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if gzip else ".json"
    paths = [write_rank(job, r, out_dir / f"rank-{r}{suffix}", gzip=gzip) for r in range(len(job.ranks))]
    truth = out_dir / "truth.json"
    truth.write_bytes(orjson.dumps(job.truth(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    return [*paths, truth]
