"""A run's dimensions: what it ran on and what it ran (cluster, node, gpu_sku, driver, model, tp, ...).

Three sources, later ones win: what the files themselves say (the trace's device and versions, the
step log's settings), a sidecar, and ``--dims key=value`` on the command line. The sidecar of a job is
``dims.json`` inside the job's directory, or ``<file>.dims.json`` beside a job given as one file: a JSON
object of names to values (numbers are kept as text). The set is open: any name that is a lower-case
identifier is a dimension; ``date`` (YYYY-MM-DD) is special and sets the run's date partition.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfsleuth.errors import InputError
from perfsleuth.model import MAX_MEASUREMENT, RECORDS
from perfsleuth.model.job_identity import software
from perfsleuth.store.layout import check_date

SIDECAR = "dims.json"
KNOWN = (
    "cluster",
    "rack",
    "node",
    "gpu_sku",
    "driver",
    "cuda",
    "cuda_driver_api",
    "nccl",
    "backend",
    "framework",
    "model",
    "workload",
    "tp",
    "pp",
    "dp",
    "ep",
    "batch",
    "global_batch",
    "precision",
    "seq_len",
    "world_size",
    "firmware",
    "source_format",
)
"""The names perfsleuth itself fills or that the fleet simulator uses; others are welcome, these get spell-checked."""
_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
_STEPLOG_NAMES = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "seq_length": "seq_len",
    "micro_batch_size": "batch",
    "global_batch_size": "global_batch",
    "world_size": "world_size",
    "train_micro_batch_size_per_gpu": "batch",
    "train_batch_size": "global_batch",
}


NUMERIC_FACTS = ("tokens_per_step", "model_flops_per_step")
"""Keys of ``--dims`` or the sidecar that are numbers about the job, not dimensions: the factor tree needs
them for tokens/s/GPU and MFU when no step log states them (a trace alone knows neither). Ingest takes
them out of the dimensions (``store.job.workload_facts``)."""


def reserved_names() -> frozenset[str]:
    """Names a dimension cannot take: the records' own columns, except those that are dimensions themselves
    and the numeric facts a job may state."""
    allowed = {"gpu_sku", "precision", *NUMERIC_FACTS}
    return frozenset(n for n in RECORDS.names if n not in allowed) | {"date"}


def check_name(name: str, *, source: str | Path | None, place: str) -> str:
    """``name`` when it can be a dimension (a column in every engine), else an InputError that says why."""
    if not _NAME.fullmatch(name):
        close = difflib.get_close_matches(name.lower().replace("-", "_"), KNOWN, n=1)
        hint = f"did you mean {close[0]}?" if close else "use lower-case letters, digits and _ (gpu_sku, tp, node)"
        raise InputError(source, f"{name!r} is not a dimension name", place=place, hint=hint)
    if name in reserved_names():
        raise InputError(source, f"{name!r} is a measured column of the records, not a dimension", place=place, hint="pick another name")
    return name


def parse_flags(flags: Sequence[str]) -> dict[str, str]:
    """``--dims`` values: ``key=value``, each flag one pair or several separated by commas."""
    out: dict[str, str] = {}
    for flag in flags:
        for item in (s.strip() for s in flag.split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise InputError(None, f"--dims {item!r} is not key=value", place="--dims", hint="e.g. --dims cluster=c1,node=n07")
            key = key.strip()
            if key != "date":
                check_name(key, source=None, place="--dims")
            out[key] = check_fact(key, value.strip(), source=None, place=f"--dims {key}")
    if "date" in out:
        check_date(out["date"], place="--dims date")
    return out


def check_fact(key: str, text: str, *, source: str | Path | None, place: str) -> str:
    """``text`` unchanged; an error naming the place when ``key`` is a numeric fact and ``text`` is not a
    positive number up to 1e300. Checked where the value is written (a flag, a sidecar key) so the error
    names that place: tokens × steps of 1e308 would overflow every fleet sum the run enters."""
    if key not in NUMERIC_FACTS:
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_MEASUREMENT:
        raise InputError(source, f"{key}={text!r} is not a positive number up to 1e300", place=place, hint=f"e.g. --dims {key}=1048576")
    return text


def sidecar_path(job: Path) -> Path:
    return job / SIDECAR if job.is_dir() else job.with_name(job.name + ".dims.json")


def read_sidecar(job: Path) -> dict[str, str]:
    """The job's sidecar dimensions, or nothing when it has none."""
    path = sidecar_path(job)
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"not a JSON dimensions file: {exc}") from None
    if not isinstance(doc, dict):
        raise InputError(path, "a dimensions sidecar is one JSON object of names to values", hint='{"cluster": "c1", "tp": 8}')
    out: dict[str, str] = {}
    for key, value in doc.items():
        if key != "date":
            check_name(str(key), source=path, place=f"key {key!r}")
        if isinstance(value, dict | list) or value is None:
            raise InputError(path, f"the value of {key!r} must be text or a number", place=f"key {key!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(
                path,
                f"the value of {key!r} is {value!r}: a NaN or Infinity literal, which is not JSON and names nothing",
                place=f"key {key!r}",
                hint="write the value as text, or remove the key",
            )
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out[str(key)] = check_fact(str(key), text, source=path, place=f"key {key!r}")
    if "date" in out:
        check_date(out["date"], source=path, place="key 'date'")
    return out


def from_metadata(runs: pa.Table, source_meta: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Dimensions the files state: the trace's device and versions, the step log's parallelism and shapes."""
    out: dict[str, str] = {}
    if runs.num_rows:
        row = runs.slice(0, 1).to_pylist()[0]
        for key in ("gpu_sku", "nccl", "backend", "world_size", "source_format"):
            if row.get(key) not in (None, ""):
                out[key] = str(row[key])
        # a trace's "driver" is the CUDA version its driver API supports (13000), not the NVIDIA driver:
        # both CUDA versions are stored readable, and "driver" is left to a source that states the NVIDIA one
        versions = software(row)
        for key, name in (("cuda_runtime", "cuda"), ("cuda_driver_api", "cuda_driver_api")):
            if version := versions[key]:
                out[name] = version
        for key, value in row.get("dims") or []:
            if key in KNOWN and value not in (None, ""):
                out[key] = str(value)
    for meta in source_meta:
        settings = meta.get("settings") or {}
        for key, name in _STEPLOG_NAMES.items():
            if key in settings:
                out.setdefault(name, str(settings[key]))
        if isinstance(meta.get("framework"), str):
            out.setdefault("framework", meta["framework"])
        if isinstance(meta.get("nccl_version"), str):
            out.setdefault("nccl", meta["nccl_version"])
        if isinstance(meta.get("gpu"), str):
            out.setdefault("gpu_sku", meta["gpu"])
    if "world_size" in out and "tp" in out and "dp" not in out:
        world, tp, pp = (_int(out.get(k, "1")) for k in ("world_size", "tp", "pp"))
        if world and tp and pp and world % (tp * pp) == 0:
            out["dp"] = str(world // (tp * pp))
    return out


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
