"""What a job is, in words a person reads: its software versions, its workload name, its setup.

Traces state versions the way CUDA's API returns them: ``cuda_runtime_version`` and
``cuda_driver_version`` are ``1000 * major + 10 * minor`` (13000 is CUDA 13.0, 12040 is 12.4), and the
second is the CUDA version the *driver API* supports, not the NVIDIA driver (580.95 on a CUDA 13.0
machine), which no PyTorch trace records. Here the three are separate fields — ``cuda_runtime``,
``cuda_driver_api`` and ``nvidia_driver`` (only from a source that states it: a dimension, nvidia-smi) —
each as ``major.minor``.

A trace's ``traceName`` is where the profiler wrote the file; ``tensorboard_trace_handler`` writes a
temporary ``tmpXXXXXXXX.json`` first, so that name is no workload. :func:`workload_name` takes the
workload from the dimensions, else the trace's model name when it is a real name, else the job's
directory.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

_TEMP_NAME = re.compile(r"^(tmp[a-z0-9_]{6,}|[0-9a-f]{16,})(\.[a-z.]+)?$", re.IGNORECASE)
_TRACE_FILE = re.compile(r"\.(pt\.trace\.)?json(\.gz)?$|\.(xplane\.pb|sqlite|nsys-rep)$", re.IGNORECASE)
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[-_ ]?\d+", re.IGNORECASE)


def cuda_version(value: Any) -> str | None:
    """``13000`` → ``"13.0"``, ``12040`` → ``"12.4"``; a dotted string is kept; anything else is None."""
    if value is None:
        return None
    text = str(value).strip()
    if re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        return text
    if not text.isdigit():
        return None
    n = int(text)
    if n < 1000:
        return None
    return f"{n // 1000}.{(n % 1000) // 10}"


def software(run: Mapping[str, Any], dims: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The job's versions as separate readable fields (see the module docstring); ``run`` is a runs row."""
    dims = dims or {}
    return {
        "cuda_runtime": cuda_version(run.get("cuda")),
        "cuda_driver_api": cuda_version(run.get("driver")),
        "nvidia_driver": dims.get("nvidia_driver") or None,
        "nccl": None if run.get("nccl") in (None, "") else str(run["nccl"]),
    }


def is_temporary(name: str | None) -> bool:
    """A profiler's scratch file name (``/tmp/tmpab12cd34.json``), or a path inside the temp directory."""
    if not name:
        return True
    path = PurePath(name)
    temp = PurePath(tempfile.gettempdir())
    return bool(_TEMP_NAME.match(path.name)) or (path.is_absolute() and temp in path.parents)


def workload_name(dims: Mapping[str, str], traced: str | None, job: Path) -> str:
    """The workload: ``workload`` or ``model`` dimension, else the trace's own name when it is no
    temporary file or rank-file name, else the job's directory (a file's parent)."""
    for key in ("workload", "model"):
        if dims.get(key):
            return str(dims[key])
    if traced and not is_temporary(traced) and not _RANK_NAME.search(PurePath(traced).name):
        name = PurePath(traced).name
        return _TRACE_FILE.sub("", name) if _TRACE_FILE.search(name) else traced
    folder = job if job.is_dir() else job.parent
    return folder.resolve().name or "job"


def default_run_id(traced: str | None, job: Path) -> str:
    """A job's run id without ``--run-id``: the trace's own when it names the job, else the job's name
    (a directory's, or a file's without extensions). A rank file's name ("rank-0") names no job."""
    if traced and not _RANK_NAME.search(traced) and not is_temporary(traced):
        return traced
    name = job.name if job.is_dir() else job.name.split(".")[0]
    if _RANK_NAME.search(name) and not job.is_dir():
        name = job.parent.resolve().name or name
    return name or "run"


def unique_run_id(run_id: str, sha256: str, taken: bool) -> str:
    """``run_id``, or ``run_id-<first 10 hex of the content hash>`` when another job already has it: two
    profiler folders named alike (``profile/`` in every job) get two runs, the same content still one."""
    return f"{run_id}-{sha256[:10]}" if taken else run_id


def setup_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two jobs' setups (GPU model, world size, versions), as phrases; empty when
    the two agree or a side does not say."""
    labels = (
        ("gpu_sku", "GPU"),
        ("world_size", "world size"),
        ("cuda_runtime", "CUDA runtime"),
        ("cuda_driver_api", "CUDA driver API"),
        ("nvidia_driver", "NVIDIA driver"),
        ("nccl", "NCCL"),
        ("torch", "PyTorch"),
    )
    out = []
    for key, label in labels:
        x, y = a.get(key), b.get(key)
        if x not in (None, "") and y not in (None, "") and str(x) != str(y):
            out.append(f"{label} {x} vs {y}")
    return out
