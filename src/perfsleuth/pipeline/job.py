"""One job through the pipeline: its trace files to a worker pool, each rank analysed where it was decoded, the
job put together, diagnosed and reported (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth import progress
from perfsleuth.errors import Caveat, InvalidArgument
from perfsleuth.ingest import rank_subset, trace_files, traces
from perfsleuth.ingest.inputs import JobInputs, classify_inputs
from perfsleuth.ingest.kineto import KinetoJob, RankFile, assemble_job, check_one_job, default_run_id, map_rank_files
from perfsleuth.ingest.placement import Slot, TraceRank, build_placement, explicit_placement, read_placement_file, trace_rank
from perfsleuth.lazy_import import arrow_without_pandas
from perfsleuth.model import RUNS
from perfsleuth.model.job_identity import software, workload_name
from perfsleuth.model.source import SourceData
from perfsleuth.pipeline.spark_ranks import require_rank_engine
from perfsleuth.trace.analysis import JobAnalysis, analyze_job, combine_ranks
from perfsleuth.trace.groups import group_descriptions
from perfsleuth.trace.job import RankView, TraceJob
from perfsleuth.trace.rank_analysis import RankResult, analyze_rank

if TYPE_CHECKING:  # the diff verb's module loads where a diff is made, not for every analyze
    from perfsleuth.diagnose import Diagnosis
    from perfsleuth.trace import diff as trace_diff

T = TypeVar("T")


# --- the per-file pipeline -----------------------------------------------------------------------


def _each_rank(job: tuple[str, bool], fmt: str, plan: traces.Plan, per_rank: Callable[[RankFile], T]) -> list[tuple[RankFile, T]]:
    """Worker: one trace file in; per rank, its facts (no events) and what ``per_rank`` made of it out."""
    path, single = job
    return [(rf.without_events(), per_rank(rf)) for rf in traces.read_trace_file(fmt, path, single_file=single, plan=plan)]


def map_ranks(
    fmt: str,
    files: Sequence[Path],
    per_rank: Callable[[RankFile], T],
    *,
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[list[tuple[RankFile, T]], list[Caveat]]:
    """Every rank of one job's trace files with ``per_rank`` applied where the rank was decoded (one file
    per worker at a time: memory bounded by the largest file), plus what numbering the ranks had to say.
    ``per_rank`` must be a module-level function (or a ``partial`` of one): it travels to the workers.
    ``engine="spark"`` runs each file as a Spark task on ``master`` instead of in a local pool
    (``pipeline.spark_ranks``); what comes back, and all that follows, is the same. ``meanwhile`` runs
    here while the local workers read (``ingest.kineto.map_rank_files``)."""
    plan, caveats = traces.plan_ranks(fmt, files)
    each = partial(_each_rank, fmt=fmt, plan=plan, per_rank=per_rank)
    if engine == "spark":
        from perfsleuth.pipeline.spark_ranks import map_rank_files_spark

        per_file = map_rank_files_spark(files, each, master=master)
    else:
        sizes = [f.stat().st_size if f.exists() else 0 for f in files]
        with progress.task(f"parsing {len(files)} trace file{'s' if len(files) != 1 else ''}", total=sum(sizes), unit="bytes") as advance:
            per_file = map_rank_files(files, each, workers=workers, done=lambda i: advance(sizes[i]), meanwhile=meanwhile)
    return [p for found in per_file for p in found], caveats


def _whole(rf: RankFile) -> RankFile:
    return rf


def read_trace_job(
    paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None, engine: str = "local", master: str | None = None
) -> KinetoJob:
    """Read one job's trace files (every rank's events in memory)."""
    fmt, files = trace_files(paths)
    pairs, caveats = map_ranks(fmt, files, _whole, workers=workers, engine=engine, master=master)
    job = assemble_job([whole for _, whole in pairs], run_id=run_id or default_run_id(files))
    job.runs = traces.with_source_format(job.runs, fmt)
    job.caveats = caveats + job.caveats
    return job


def load_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> TraceJob:
    """Read one job's trace files into the canonical tables (all events in memory)."""
    k = read_trace_job(paths, run_id=run_id, workers=workers)
    return TraceJob(k.runs, k.events, k.caveats, k.rank_files)


# --- analyze -------------------------------------------------------------------------------------


def _analyse_rank(rf: RankFile, run_id: str) -> tuple[RankResult, TraceRank]:
    """The per-rank step of ``analyze``: the rank's trace analysis and its placement facts."""
    return analyze_rank(RankView(rf.rank, rf.events), run_id), trace_rank(rf)


def _analyze_traces(
    fmt: str,
    files: Sequence[Path],
    *,
    run_id: str | None,
    workers: int | None,
    ranks: frozenset[int] | None = None,
    engine: str = "local",
    master: str | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[JobAnalysis, list[TraceRank]]:
    rid = run_id or default_run_id(files)
    found, caveats = map_ranks(
        fmt, files, partial(_analyse_rank, run_id=rid), workers=workers, engine=engine, master=master, meanwhile=meanwhile
    )
    kept = [(rf, result) for rf, result in found if rank_subset.keep(rf.rank, ranks)]
    if ranks is not None and not kept:
        raise InvalidArgument(f"--ranks: none of the {len(files)} trace file(s) holds any of the stated ranks")
    rank_files = [rf for rf, _ in kept]
    world, more = check_one_job(rank_files)
    analysis = combine_ranks(
        [r for _, (r, _) in kept], traces.runs_table(fmt, rid, rank_files, world), {r.rank: r.path for r in rank_files}, caveats + more
    )
    analysis.process_groups = group_descriptions([r.metadata for r in rank_files])
    return analysis, [t for _, (_, t) in kept]


def _load_diagnosis() -> None:
    """Import the diagnosis and the JSON report while the reader workers parse, instead of before
    they fork (while one core works and the others wait) or after they finish: on the 8 x 54 MB benchmark set
    that took what the parent imports before the fork from 75 of perfsleuth's modules to 57 (``analyze``
    imports these where it first calls them). ``numpy.random``, which the diagnosis's intervals load
    later, is left out: loaded here it sits in memory through the readers' peak (a 5-round A/B gave
    186 -> 190 MiB summed PSS with it, 176 -> 177 without; the spread between runs is about 10 MiB,
    and PSS is the bar this run meets with little to spare)."""
    import perfsleuth.diagnose.correlate
    import perfsleuth.diagnose.detectors
    import perfsleuth.diagnose.ncu_join
    import perfsleuth.report.json_report  # noqa: F401


def analyze_traces(fmt: str, files: Sequence[Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """Analyse one job's trace files holding one file's events at a time per worker (memory bounded
    by the largest file, not the job)."""
    return _analyze_traces(fmt, files, run_id=run_id, workers=workers)[0]


def analyze_streaming(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """The trace analysis of one job (its traces only), streaming one file per worker."""
    arrow_without_pandas()
    fmt, files = trace_files(paths)
    return analyze_traces(fmt, files, run_id=run_id, workers=workers)


@dataclass(frozen=True, slots=True)
class JobReport:
    """What ``perfsleuth analyze`` knows about one job: the trace analysis (empty when the job came
    without traces), the diagnosis over every signal, and the other signal files it read."""

    analysis: JobAnalysis
    diagnosis: Diagnosis
    sources: tuple[SourceData, ...] = field(default=())
    placement: pa.Table | None = None  # per traced rank: host, GPU, epoch window (ingest.placement)
    rank_telemetry: pa.Table | None = None  # per traced rank: its GPU's telemetry during the trace (diagnose.correlate)

    def to_json(self) -> dict[str, Any]:
        from perfsleuth.report.json_report import analysis_to_json, integer_ns

        doc = analysis_to_json(self.analysis, self.diagnosis)
        doc["sources"] = [
            {"format": s.format, "path": s.path, "tables": {k: t.num_rows for k, t in s.tables.items()}} for s in self.sources
        ]
        doc["placement"] = self.placement.to_pylist() if self.placement is not None else None
        doc["rank_telemetry"] = self.rank_telemetry.to_pylist() if self.rank_telemetry is not None else None
        if isinstance(doc.get("run"), dict):
            run = self.analysis.runs.to_pylist()[0] if self.analysis.runs.num_rows else {}
            doc["run"]["software"] = software(run, dict(run.get("dims") or []))
        return integer_ns(doc)

    def findings_table(self) -> pa.Table:
        """The findings and the not-assessed answers as one Arrow table (a row per fault class and
        outcome, as the fleet store keeps them)."""
        from perfsleuth.store.findings import findings_rows

        runs = self.analysis.runs
        workload = runs["workload"][0].as_py() if runs.num_rows else None
        return findings_rows(self.diagnosis, run_id=self.analysis.run_id, workload=workload, gpu_seconds=None)

    def _repr_html_(self) -> str:
        """In a notebook, the report is its self-contained HTML page."""
        from perfsleuth.report.html_report import render_html

        return render_html(self.analysis, self.diagnosis, self.sources)


def _trace_ranks_in_memory(k: KinetoJob) -> list[TraceRank]:
    """Placement facts of a job read whole (the same as the workers compute per file)."""
    out = []
    for rank, path in k.rank_files.items():
        ev = k.events.filter(pc.equal(k.events["rank"], rank))
        span = (pc.min(ev["ts_ns"]).as_py(), pc.max(ev["ts_ns"]).as_py()) if ev.num_rows else None
        out.append(trace_rank(RankFile(path, rank, "", k.metadata.get(rank, {}), ev, [], span)))
    return out


def _placement(
    found: JobInputs, trace_ranks: list[TraceRank], explicit: tuple[dict[int, Slot], str] | None
) -> tuple[pa.Table | None, list[Caveat]]:
    """The placement table: the ``placement`` option first, else placement files among the inputs."""
    if not trace_ranks:
        return None, []
    if explicit is None and found.placement_files:
        merged: dict[int, Slot] = {}
        for f in found.placement_files:
            merged.update(read_placement_file(f))
        explicit = (merged, "placement file " + ", ".join(f.name for f in found.placement_files))
    return build_placement(trace_ranks, explicit)


def _no_trace(run_id: str, sources: Sequence[SourceData]) -> JobAnalysis:
    """An empty trace analysis for a job that came without traces (renderers show its findings only)."""
    formats = ",".join(sorted({s.format for s in sources}))
    runs = pa.Table.from_pylist([{"run_id": run_id, "source_format": formats}], schema=RUNS)
    return combine_ranks([], runs, {}, [])


def analyze(
    paths: Sequence[str | Path],
    *,
    run_id: str | None = None,
    workers: int | None = None,
    keep_events: bool = False,
    placement: str | Path | None = None,
    ranks: str | frozenset[int] | None = None,
    engine: str = "local",
    master: str | None = None,
) -> JobReport:
    """Read, analyse and diagnose one job from whatever signal files it has: per-rank traces (Kineto,
    JAX, Nsight Systems) and any mix of telemetry, NCCL, Nsight Compute, step-log and inference files.

    ``keep_events=True`` also keeps every trace event in memory (``report.analysis.job``), for digging in.
    ``placement`` (a file, or ``"0=node-a:0,1=node-a:1"``) says which host and GPU each rank ran on, for
    joining telemetry to the ranks (``ingest.placement`` lists the other ways it is found).
    ``ranks`` (``"0,8,16-31"`` or a set) analyses those ranks' traces only (``ingest.rank_subset``).
    ``engine="spark"`` parses and analyses each rank file as a Spark task (``master``: a Spark master
    URL, default ``local[2]``), the files read where they lie; only per-rank results come back, and the
    report is the same as the local run's (``pipeline.spark_ranks``).
    """
    require_rank_engine(engine)
    arrow_without_pandas()  # a job of traces alone never loads pandas (lazy_import); its other sources' readers do
    found = classify_inputs(paths)
    explicit = explicit_placement(placement)  # a bad option fails before any trace is parsed
    subset = rank_subset.parse_rank_spec(ranks) if isinstance(ranks, str) else ranks
    if subset is not None:
        found = replace(found, trace_files=rank_subset.select_files(found.trace_files, subset))
        if found.trace_format is not None and not found.trace_files:
            raise InvalidArgument("--ranks: no trace file holds any of the stated ranks")
    sources = tuple(adapter.read(p) for adapter, p in found.others)
    trace_ranks: list[TraceRank] = []
    if found.trace_format is None:
        rid = run_id or default_run_id([p for _, p in found.others])
        analysis = _no_trace(rid, sources)
    elif keep_events:
        k = read_trace_job(found.trace_files, run_id=run_id, workers=workers, engine=engine, master=master)
        if subset is not None:
            k = rank_subset.restrict_job(k, subset)
        analysis = analyze_job(TraceJob(k.runs, k.events, k.caveats, k.rank_files))
        analysis.process_groups = group_descriptions(list(k.metadata.values()))
        trace_ranks = _trace_ranks_in_memory(k)
    else:
        analysis, trace_ranks = _analyze_traces(
            found.trace_format,
            found.trace_files,
            run_id=run_id,
            workers=workers,
            ranks=subset,
            engine=engine,
            master=master,
            meanwhile=_load_diagnosis,
        )
    from perfsleuth.diagnose import diagnose  # imported while the readers worked (_load_diagnosis), or here
    from perfsleuth.diagnose.correlate import join_telemetry
    from perfsleuth.diagnose.ncu_join import join_ncu
    from perfsleuth.diagnose.signals import JobSignals

    analysis.caveats.extend([*found.caveats, *(c for s in sources for c in s.caveats)])
    analysis.runs = _readable_workload(analysis.runs, [Path(p) for p in paths])
    signals = JobSignals(trace=analysis if found.trace_format else None, sources=list(sources))
    diagnosis = diagnose(signals)
    places, place_caveats = _placement(found, trace_ranks, explicit)
    analysis.hosts, analysis.racks = _hosts_and_racks(places)
    joined = join_telemetry(diagnosis, signals, places)
    diagnosis, analysis.top_kernels = join_ncu(joined.diagnosis, analysis.top_kernels, signals.table("kernel_metrics"), _gpu_sku(analysis))
    if joined.rank_telemetry is not None or joined.caveats:  # placement caveats matter only where something is joined
        analysis.caveats.extend(place_caveats)
    analysis.caveats.extend(joined.caveats)
    return JobReport(analysis, diagnosis, sources, places, joined.rank_telemetry)


def _hosts_and_racks(places: pa.Table | None) -> tuple[dict[int, str], dict[str, str]]:
    """rank -> host and host -> rack from the placement table, for the per-node and per-rack views
    (a host placed in two racks keeps the first rack the placement gives it)."""
    if places is None:
        return {}, {}
    rows = places.select(["rank", "host", "rack"]).to_pylist()
    hosts = {int(r["rank"]): str(r["host"]) for r in rows if r["host"]}
    racks: dict[str, str] = {}
    for r in rows:
        if r["host"] and r["rack"]:
            racks.setdefault(str(r["host"]), str(r["rack"]))
    return hosts, racks


def _readable_workload(runs: pa.Table, paths: list[Path]) -> pa.Table:
    """The runs table with a workload a person can read: the trace's name unless it is the profiler's
    temporary file (tensorboard_trace_handler's tmpXXXX.json) or a rank file, else the job's folder."""
    if not runs.num_rows or "workload" not in runs.column_names:
        return runs
    job = paths[0] if len(paths) == 1 else paths[0].parent
    name = workload_name({}, runs["workload"][0].as_py(), job)
    i = runs.schema.get_field_index("workload")
    return runs.set_column(i, runs.schema.field(i), pa.array([name] * runs.num_rows, runs.schema.field(i).type))


def _gpu_sku(analysis: JobAnalysis) -> str | None:
    return analysis.runs["gpu_sku"][0].as_py() if analysis.runs.num_rows and "gpu_sku" in analysis.runs.column_names else None


# --- diff ----------------------------------------------------------------------------------------


def _measure_rank(rf: RankFile) -> trace_diff.RankRows:
    """The per-rank step of ``diff_traces``: the rank's rows per step window."""
    from perfsleuth.trace import diff as trace_diff

    return trace_diff.measure_rank(RankView(rf.rank, rf.events))


def _side_setup(fmt: str, rank_files: Sequence[RankFile], world: int) -> dict[str, Any]:
    """What the side ran on, as the traces state it: GPU, world size, CUDA/NCCL versions (readable)."""
    run = traces.runs_table(fmt, "side", rank_files, world).to_pylist()[0]
    return {"gpu_sku": run.get("gpu_sku"), "world_size": run.get("world_size"), **software(run)}


def diff_side(
    paths: Sequence[str | Path], *, workers: int | None = None, engine: str = "local", master: str | None = None
) -> trace_diff.SideProfile:
    """One side of a diff: every rank's rows per step, measured where the rank was decoded (a local
    worker or a Spark task, as in ``analyze``), averaged over the ranks per step (``trace.diff.profile_side``)."""
    from perfsleuth.trace import diff as trace_diff  # before the workers fork: they inherit it

    fmt, files = trace_files(paths)
    found, caveats = map_ranks(fmt, files, _measure_rank, workers=workers, engine=engine, master=master)
    rank_files = [rf for rf, _ in found]
    world, more = check_one_job(rank_files)
    label = ", ".join(str(p) for p in paths)
    return trace_diff.profile_side(
        label, fmt, default_run_id(files), [rows for _, rows in found], [*caveats, *more], _side_setup(fmt, rank_files, world)
    )


def diff_traces(
    baseline: Sequence[str | Path],
    candidate: Sequence[str | Path],
    *,
    threshold: float = 0.02,
    confidence: float = 0.95,
    method: str = "auto",
    workers: int | None = None,
    engine: str = "local",
    master: str | None = None,
) -> trace_diff.TraceDiff:
    """Read both jobs' traces and diff them (the ``perfsleuth diff`` verb as a function); ``engine`` and
    ``master`` say where each rank file is read, as for ``analyze``."""
    from perfsleuth.trace import diff as trace_diff

    require_rank_engine(engine)
    b = diff_side(baseline, workers=workers, engine=engine, master=master)
    c = diff_side(candidate, workers=workers, engine=engine, master=master)
    d = trace_diff.diff_sides(b, c, threshold=threshold, confidence=confidence, method=method)
    return replace(d, caveats=(*trace_diff.setup_caveats(b, c), *d.caveats))


__all__ = [
    "JobReport",
    "analyze",
    "analyze_streaming",
    "analyze_traces",
    "diff_side",
    "diff_traces",
    "load_trace_job",
    "map_ranks",
    "read_trace_job",
]
