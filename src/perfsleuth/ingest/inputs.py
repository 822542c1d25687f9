"""Sort what a user passed to ``perfsleuth analyze`` into one job's trace files and its other signals.

A job's evidence comes in any mix and any names: per-rank traces of one format (Kineto JSON, JAX
profiles, Nsight Systems exports), read per rank by the trace pipeline, and whole-file signals (DCGM
scrapes, nvidia-smi, nccl-tests, NCCL logs, Nsight Compute CSV, step logs, inference benchmarks),
each read by its adapter. Every file is recognised by its content, never its extension. A placement
file (which rank ran on which host and GPU, ``ingest.placement``) is recognised the same way and kept apart.

A file named directly must be recognised (else a clear error). In a directory, files nothing
recognises are skipped with a caveat (READMEs, configs), except perfsleuth's own case files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest import memory_guard, placement
from perfsleuth.ingest.source import Adapter, detect_format

KINETO_NAMES = (".json", ".json.gz")
"""A named file with these endings that nothing recognises is meant as a trace: the Kineto reader
reads it and names the exact problem (not JSON, truncated gzip, no traceEvents)."""

OWN_FILES = frozenset({"case.json", "truth.json", "capture.json", "dims.json"})  # dims.json: a store sidecar
"""perfsleuth's case files and the capture notes beside real cases: never signal files."""


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """A per-rank trace format: how to recognise a file and how to pick one file per capture."""

    name: str
    detect: Callable[[Path], bool]
    choose: Callable[[list[Path]], list[Path]] = lambda files: files  # drop other forms of the same capture


def trace_formats() -> tuple[TraceFormat, ...]:
    """Most specific first: the Kineto sniff accepts any Chrome-trace JSON, a JAX one included."""
    from perfsleuth.ingest import jax_trace, kineto

    return (
        TraceFormat("jax", jax_trace.detect, jax_trace.choose_forms),
        TraceFormat("nsys", _nsys_export),
        TraceFormat("kineto", kineto.detect),
    )


def _nsys_export(path: Path) -> bool:
    """Nsight Systems' own test (``nsys.detect``), made only for an SQLite file: a JSON trace job loads
    neither the nsys reader nor sqlite3 (5 ms, paid before the reader workers fork)."""
    try:
        if memory_guard.decoded_size(path)[0] != "sqlite":
            return False
    except OSError:
        return False
    from perfsleuth.ingest import nsys

    return nsys.detect(path)


@dataclass(slots=True)
class JobInputs:
    trace_format: str | None = None
    trace_files: list[Path] = field(default_factory=list)
    others: list[tuple[Adapter, Path]] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    placement_files: list[Path] = field(default_factory=list)


def _trace_format_of(path: Path, formats: Sequence[TraceFormat]) -> TraceFormat | None:
    for fmt in formats:
        try:
            if fmt.detect(path):
                return fmt
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    return None


def _series_by_folder(others: list[tuple[Adapter, Path]]) -> list[tuple[Adapter, Path]]:
    """Periodic scrapes of one format in one folder are one time series: read the folder, once."""
    out: list[tuple[Adapter, Path]] = []
    seen: set[tuple[str, Path]] = set()
    counts: dict[tuple[str, Path], int] = {}
    for adapter, f in others:
        if adapter.series:
            counts[(adapter.name, f.parent)] = counts.get((adapter.name, f.parent), 0) + 1
    for adapter, f in others:
        key = (adapter.name, f.parent)
        if adapter.series and counts[key] > 1:
            if key not in seen:
                seen.add(key)
                out.append((adapter, f.parent))
        else:
            out.append((adapter, f))
    return out


def classify_inputs(paths: Sequence[str | Path]) -> JobInputs:
    """One job's inputs by kind. Raises when a named file is unrecognised, when nothing is
    recognised at all, or when the traces mix formats."""
    formats = trace_formats()
    traces: dict[str, list[Path]] = {}
    out = JobInputs()
    skipped: list[Path] = []

    def place(f: Path, named: bool) -> None:
        fmt = _trace_format_of(f, formats)
        if fmt is not None:
            traces.setdefault(fmt.name, []).append(f)
            return
        if placement.detect(f):
            out.placement_files.append(f)
            return
        adapter = detect_format(f)
        if adapter is not None:
            out.others.append((adapter, f))
        elif named and f.name.endswith(KINETO_NAMES):
            traces.setdefault("kineto", []).append(f)  # the trace reader says exactly what is wrong with it
        elif named:
            raise InputError(f, "not a format perfsleuth reads", hint="`perfsleuth formats` lists them")
        elif f.name not in OWN_FILES:
            skipped.append(f)

    for raw in paths:
        p = Path(raw)
        if p.is_file():
            place(p, named=True)
        elif p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
            for f in files:
                place(f, named=False)
        else:
            raise InputError(p, "no such file or directory")
    out.others = _series_by_folder(out.others)
    if len(traces) > 1:
        kinds = ", ".join(f"{k} ({len(v)} files)" for k, v in traces.items())
        raise InputError(
            Path(paths[0]) if paths else None,
            f"traces of more than one format in one job: {kinds}",
            hint="analyse one trace format per job",
        )
    if traces:
        name, files = next(iter(traces.items()))
        fmt = next(f for f in formats if f.name == name)
        out.trace_format, out.trace_files = name, fmt.choose(files)
    if not out.trace_files and not out.others:
        where = ", ".join(str(p) for p in paths) or "<nothing>"
        raise InputError(
            Path(paths[0]) if len(paths) == 1 else None,
            f"no signal files perfsleuth reads in {where}",
            hint="traces (*.json[.gz] with traceEvents, .xplane.pb, nsys .sqlite) or the files `perfsleuth formats` lists",
        )
    if skipped:
        names = ", ".join(f.name for f in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
        out.caveats.append(
            Caveat(
                "inputs_skipped",
                f"{len(skipped)} file(s) in the given directories are not a signal format perfsleuth reads and were skipped: {names}",
            )
        )
    return out
