"""The Python face of the ``perfsleuth`` verbs: each command is also a function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from perfsleuth.diagnose import Diagnosis, diagnose
from perfsleuth.diagnose.correlate import join_telemetry
from perfsleuth.diagnose.ncu_join import join_ncu
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.errors import Caveat, InvalidArgument
from perfsleuth.ingest import rank_subset, read_trace_job, traces
from perfsleuth.ingest.inputs import JobInputs, classify_inputs
from perfsleuth.ingest.job_identity import software
from perfsleuth.ingest.kineto import KinetoJob, RankFile, check_one_job, default_run_id, map_rank_files
from perfsleuth.ingest.placement import Slot, TraceRank, build_placement, explicit_placement, read_placement_file, trace_rank
from perfsleuth.ingest.source import SourceData
from perfsleuth.model import RUNS
from perfsleuth.report.json_report import analysis_to_json, integer_ns
from perfsleuth.trace.analysis import JobAnalysis, analyze_job, combine_ranks
from perfsleuth.trace.groups import group_descriptions
from perfsleuth.trace.job import RankView, TraceJob
from perfsleuth.trace.rank_analysis import RankResult, analyze_rank


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


def load_trace_job(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> TraceJob:
    """Read one job's trace files into the canonical tables (all events in memory)."""
    k = read_trace_job(paths, run_id=run_id, workers=workers)
    return TraceJob(k.runs, k.events, k.caveats, k.rank_files)


def _parse_and_analyze(job: tuple[str, bool], run_id: str, fmt: str, plan: traces.Plan) -> list[tuple[RankFile, RankResult, TraceRank]]:
    """Worker: one trace file in, its ranks' analyses and placement facts out; their events stay here."""
    path, single = job
    return [
        (rf.without_events(), analyze_rank(RankView(rf.rank, rf.events), run_id), trace_rank(rf))
        for rf in traces.read_trace_file(fmt, path, single_file=single, plan=plan)
    ]


def _analyze_traces(
    fmt: str, files: Sequence[Path], *, run_id: str | None, workers: int | None, ranks: frozenset[int] | None = None
) -> tuple[JobAnalysis, list[TraceRank]]:
    rid = run_id or default_run_id(files)
    plan, caveats = traces.plan_ranks(fmt, files)
    per_file = map_rank_files(files, partial(_parse_and_analyze, run_id=rid, fmt=fmt, plan=plan), workers=workers)
    triples = [p for found in per_file for p in found if rank_subset.keep(p[0].rank, ranks)]
    if ranks is not None and not triples:
        raise InvalidArgument(f"--ranks: none of the {len(files)} trace file(s) holds any of the stated ranks")
    rank_files = [p[0] for p in triples]
    world, more = check_one_job(rank_files)
    analysis = combine_ranks(
        [p[1] for p in triples], traces.runs_table(fmt, rid, rank_files, world), {r.rank: r.path for r in rank_files}, caveats + more
    )
    analysis.process_groups = group_descriptions([r.metadata for r in rank_files])
    return analysis, [p[2] for p in triples]


def analyze_traces(fmt: str, files: Sequence[Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """Analyse one job's trace files holding one file's events at a time per worker (memory bounded
    by the largest file, not the job)."""
    return _analyze_traces(fmt, files, run_id=run_id, workers=workers)[0]


def _trace_ranks_in_memory(k: KinetoJob) -> list[TraceRank]:
    """Placement facts of a job read whole (the same as the workers compute per file)."""
    import pyarrow.compute as pc

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


def analyze_streaming(paths: Sequence[str | Path], *, run_id: str | None = None, workers: int | None = None) -> JobAnalysis:
    """The trace analysis of one job (its traces only), streaming one file per worker."""
    from perfsleuth.ingest import trace_files

    fmt, files = trace_files(paths)
    return analyze_traces(fmt, files, run_id=run_id, workers=workers)


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
) -> JobReport:
    """Read, analyse and diagnose one job from whatever signal files it has: per-rank traces (Kineto,
    JAX, Nsight Systems) and any mix of telemetry, NCCL, Nsight Compute, step-log and inference files.

    ``keep_events=True`` also keeps every trace event in memory (``report.analysis.job``), for digging in.
    ``placement`` (a file, or ``"0=node-a:0,1=node-a:1"``) says which host and GPU each rank ran on, for
    joining telemetry to the ranks (``ingest.placement`` lists the other ways it is found).
    ``ranks`` (``"0,8,16-31"`` or a set) analyses those ranks' traces only (``ingest.rank_subset``).
    """
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
        k = read_trace_job(found.trace_files, run_id=run_id, workers=workers)
        if subset is not None:
            k = rank_subset.restrict_job(k, subset)
        analysis = analyze_job(TraceJob(k.runs, k.events, k.caveats, k.rank_files))
        analysis.process_groups = group_descriptions(list(k.metadata.values()))
        trace_ranks = _trace_ranks_in_memory(k)
    else:
        analysis, trace_ranks = _analyze_traces(found.trace_format, found.trace_files, run_id=run_id, workers=workers, ranks=subset)
    analysis.caveats.extend([*found.caveats, *(c for s in sources for c in s.caveats)])
    analysis.runs = _readable_workload(analysis.runs, [Path(p) for p in paths])
    signals = JobSignals(trace=analysis if found.trace_format else None, sources=list(sources))
    diagnosis = diagnose(signals)
    places, place_caveats = _placement(found, trace_ranks, explicit)
    joined = join_telemetry(diagnosis, signals, places)
    diagnosis, analysis.top_kernels = join_ncu(joined.diagnosis, analysis.top_kernels, signals.table("kernel_metrics"), _gpu_sku(analysis))
    if joined.rank_telemetry is not None or joined.caveats:  # placement caveats matter only where something is joined
        analysis.caveats.extend(place_caveats)
    analysis.caveats.extend(joined.caveats)
    return JobReport(analysis, diagnosis, sources, places, joined.rank_telemetry)


def _readable_workload(runs: pa.Table, paths: list[Path]) -> pa.Table:
    """The runs table with a workload a person can read: the trace's name unless it is the profiler's
    temporary file (tensorboard_trace_handler's tmpXXXX.json) or a rank file, else the job's folder."""
    from perfsleuth.ingest.job_identity import workload_name

    if not runs.num_rows or "workload" not in runs.column_names:
        return runs
    job = paths[0] if len(paths) == 1 else paths[0].parent
    name = workload_name({}, runs["workload"][0].as_py(), job)
    i = runs.schema.get_field_index("workload")
    return runs.set_column(i, runs.schema.field(i), pa.array([name] * runs.num_rows, runs.schema.field(i).type))


def _gpu_sku(analysis: JobAnalysis) -> str | None:
    return analysis.runs["gpu_sku"][0].as_py() if analysis.runs.num_rows and "gpu_sku" in analysis.runs.column_names else None


def verify(
    before: str | Path,
    after: str | Path,
    *,
    finding: str | None = None,
    store: str | Path | None = None,
    tolerance: float = 0.25,
    threshold: float = 0.02,
    diff: bool = True,
    workers: int | None = None,
):
    """The ``perfsleuth verify`` verb: did fixing BEFORE's finding (``finding``, default its largest) save
    what it predicted in AFTER? Each side is a job's files or, with ``store``, run ids of that store;
    with ``store`` the verdict is kept there. Returns ``(fleet.verify.Verification, "added"|"skipped"|None)``."""
    from perfsleuth import engine
    from perfsleuth.fleet.verify import resolve_side, store_verdict, verify_sides
    from perfsleuth.store import Store

    opened = Store(store) if store is not None else None
    con = engine.connect("duckdb") if opened is not None else None
    b = resolve_side(str(before), store=opened, con=con, workers=workers)
    a = resolve_side(str(after), store=opened, con=con, workers=workers)
    v = verify_sides(b, a, fault=finding, tolerance=tolerance, threshold=threshold, diff=diff, workers=workers)
    stored = store_verdict(Path(store), v, b, a) if store is not None else None
    return v, stored


def watch(store: str | Path, **options: Any):
    """The ``perfsleuth watch`` verb: new regressions in the store's series since the last watch, each
    with its culprits, remembered in the store (``fleet.watch.watch_store`` lists the options).
    Returns a ``fleet.watch.WatchResult``."""
    from perfsleuth.fleet.watch import watch_store

    return watch_store(Path(store), **options)


# --- the other verbs, as functions (each is what its command computes, before rendering) --------


def compare(
    baseline: str | Path,
    candidate: str | Path,
    metric: str | None = None,
    *,
    group_by: Sequence[str] = (),
    cluster_by: Sequence[str] = (),
    threshold: float = 0.02,
    higher_is_better: bool | None = None,
) -> list:
    """``perfsleuth compare``: one ``stats.compare.Comparison`` per metric (and group), with BH control
    across them when there are several."""
    from perfsleuth.commands.compare_cmd import run_compare

    return run_compare(Path(baseline), Path(candidate), metric, list(group_by), list(cluster_by), threshold, higher_is_better)[0]


def changes(
    file: str | Path, metric: str | None = None, *, time: str | None = None, series_by: Sequence[str] = (), alpha: float = 0.01
) -> dict[str, Any]:
    """``perfsleuth changes``: the ``perfsleuth.changes/1`` document (schema ``schemas/changes.json``)."""
    from perfsleuth.commands.changes_cmd import _run

    return _run(Path(file), metric, time, list(series_by), "json", alpha)[0]


def localize(
    file: str | Path,
    current: str,
    baseline: str,
    *,
    current_denominator: str | None = None,
    baseline_denominator: str | None = None,
    workload_dims: Sequence[str] | None = None,
    engine: str = "duckdb",
    bootstrap: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """``perfsleuth localize FILE``: the ``perfsleuth.localize/1`` document (schema ``schemas/localize.json``)."""
    from perfsleuth.commands.localize_cmd import _run

    return _run(
        Path(file), current, baseline, current_denominator, baseline_denominator, "json", engine, workload_dims, bootstrap, seed, None
    )[0]


def diff(
    baseline: Sequence[str | Path] | str | Path,
    candidate: Sequence[str | Path] | str | Path,
    *,
    threshold: float = 0.02,
    method: str = "auto",
    workers: int | None = None,
):
    """``perfsleuth diff``: a ``trace.diff.TraceDiff`` (``.to_json()`` is the ``perfsleuth.diff/1`` document)."""
    from perfsleuth.trace.diff import diff_traces

    def paths(p):
        return [p] if isinstance(p, str | Path) else list(p)

    return diff_traces(paths(baseline), paths(candidate), threshold=threshold, method=method, workers=workers)


def ingest(paths: Sequence[str | Path], store: str | Path, *, dims: Sequence[str] = (), run_id: str | None = None) -> dict[str, Any]:
    """``perfsleuth ingest``: add jobs to a fleet store; returns the ``perfsleuth.ingest/1`` summary.

    Raises ``PerfsleuthError`` when a job failed (the others are stored)."""
    import contextlib
    import io
    import json

    from perfsleuth.commands.ingest_cmd import ingest_command
    from perfsleuth.errors import InputError

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = ingest_command([Path(p) for p in paths], Path(store), list(dims), run_id, "json", None)
    if status and not out.getvalue():
        raise InputError(None, err.getvalue().strip().removeprefix("perfsleuth: error: "))
    doc = json.loads(out.getvalue())
    if status:
        raise InputError(store, "; ".join(j["error"] for j in doc["jobs"] if j["status"] == "failed"))
    return doc


def evaluate(cases: Sequence[str | Path], *, workers: int | None = None):
    """``perfsleuth evaluate``: a ``cases.evaluate.EvaluationReport`` over the case directories under ``cases``."""
    from perfsleuth.cases.case import find_cases
    from perfsleuth.cases.evaluate import evaluate as run

    return run(find_cases([Path(c) for c in cases]), workers=workers)


def signals(cases: Sequence[str | Path], *, workers: int | None = None):
    """``perfsleuth signals``: a ``cases.ablation.AblationReport`` (what each signal group buys)."""
    from perfsleuth.cases.ablation import ablate
    from perfsleuth.cases.case import find_cases

    return ablate(find_cases([Path(c) for c in cases]), workers=workers)


def make_cases(out: str | Path, n: int = 100, *, seed: int = 0, workers: int | None = None) -> list[Path]:
    """``perfsleuth cases make``: simulate ``n`` labelled trace cases under ``out``; their directories."""
    from perfsleuth.sim.suite import make_suite

    return make_suite(out, n, seed, workers=workers)


def fleet_report(
    *,
    store: str | Path | None = None,
    records: str | Path | None = None,
    engine: str = "duckdb",
    bootstrap: int = 20,
    seed: int = 0,
    price_per_gpu_hour: float | None = None,
):
    """``perfsleuth fleet report``: the fleet page's content (``fleet.report.FleetPage``; render it with
    ``report.fleet_html.render_fleet_html``)."""
    from perfsleuth import engine as engines
    from perfsleuth.errors import InputError
    from perfsleuth.fleet.report import build_fleet_page

    if (store is None) == (records is None):
        raise InputError(None, "give exactly one of store and records")
    con = engines.connect(engine)
    if store is not None:
        from perfsleuth.store import Store

        table, source = Store(Path(store)).records(con), str(store)
    else:
        table, source = engines.table(con, Path(records)), str(records)
    return build_fleet_page(table, source=source, bootstrap=bootstrap, seed=seed, price_per_gpu_hour=price_per_gpu_hour)


__all__ = [
    "JobReport",
    "analyze",
    "analyze_streaming",
    "analyze_traces",
    "changes",
    "compare",
    "diff",
    "evaluate",
    "fleet_report",
    "ingest",
    "load_trace_job",
    "localize",
    "make_cases",
    "signals",
]
