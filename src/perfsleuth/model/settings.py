"""What a job's recorded settings say about it: numbers in settings text, how many GPUs ran, which step-log rows
measure steady training.

Adapters write settings as the tools print them (``world_size ...... 8``, ``--metadata num_gpus=8``); the
readers, the factor tree and the detectors all interpret them by these rules, so one job never counts two ways.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from perfsleuth.lazy_import import pandas as pd

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)"
"""A number as logs print it, ``nan`` and ``inf`` included (a regular-expression fragment)."""
_LEADING_NUMBER = re.compile(rf"^\s*({NUMBER})", re.IGNORECASE)

SERVING_GPU_KEYS = ("num_gpus", "gpus", "n_gpus", "tensor_parallel_size", "tp")
"""Benchmark metadata keys that say how many GPUs served, in order of trust."""


def leading_number(text: str) -> float | None:
    m = _LEADING_NUMBER.match(text)
    return float(m.group(1)) if m else None


def setting_number(settings: Mapping[str, str], *keys: str) -> float | None:
    """The first of ``keys`` whose value starts with a finite positive number."""
    for k in keys:
        v = settings.get(k)
        if v is None:
            continue
        x = leading_number(str(v))
        if x is not None and np.isfinite(x) and x > 0:
            return x
    return None


def training_gpu_count(settings: Mapping[str, str]) -> int | None:
    """GPUs a training run's step log says it ran on (its world size)."""
    x = setting_number(settings, "world_size", "gpus", "num_gpus", "n_gpus")
    return int(x) if x else None


def serving_gpu_count(dims: Mapping[str, str]) -> int | None:
    """GPUs serving the benchmark, when the result's metadata says (``--metadata num_gpus=8`` or tp)."""
    for k in SERVING_GPU_KEYS:
        if k in dims:
            try:
                return max(int(float(dims[k])), 1)
            except (ValueError, OverflowError):  # not a number, or an infinity
                continue
    gpu = dims.get("gpu") or ""
    m = re.match(r"^(\d+)\s*[xX]", gpu)
    return int(m.group(1)) if m else None


def steady_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Step-log rows that measure steady training: not the first row of a session (it carries start-up), timed."""
    rows = rows[rows["step_time_ns"].notna()]
    first = rows.groupby(["run_id", "stream", "session"])["line"].transform("min") == rows["line"]
    steady = rows[~first]
    return steady if len(steady) else rows
