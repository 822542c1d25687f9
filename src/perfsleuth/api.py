"""The Python face of the ``perfsleuth`` verbs: each command is also a function.

``analyze`` and the trace readers are ``perfsleuth.pipeline``'s (the one per-file trace pipeline),
re-exported here unchanged; the other verbs call what their command computes, before rendering."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfsleuth.commands.verify_cmd import run_verify as verify
from perfsleuth.pipeline import JobReport, analyze, analyze_streaming, analyze_traces, load_trace_job


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
    file: str | Path,
    metric: str | None = None,
    *,
    time: str | None = None,
    series_by: Sequence[str] = (),
    alpha: float = 0.01,
    remove_season: bool = True,
) -> dict[str, Any]:
    """``perfsleuth changes``: the ``perfsleuth.changes/1`` document (schema ``schemas/changes.json``);
    ``remove_season=False`` is ``--keep-season``."""
    from perfsleuth.commands.changes_cmd import run_changes

    return run_changes(Path(file), metric, time, list(series_by), "json", alpha, remove_season=remove_season)[0]


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
    engine: str = "local",
    master: str | None = None,
):
    """``perfsleuth diff``: a ``trace.diff.TraceDiff`` (``.to_json()`` is the ``perfsleuth.diff/1`` document);
    ``engine="spark"`` reads each rank file as a Spark task on ``master``, as in ``analyze``."""
    from perfsleuth.pipeline import diff_traces

    def paths(p):
        return [p] if isinstance(p, str | Path) else list(p)

    return diff_traces(paths(baseline), paths(candidate), threshold=threshold, method=method, workers=workers, engine=engine, master=master)


def ingest(
    paths: Sequence[str | Path],
    store: str | Path,
    *,
    dims: Sequence[str] = (),
    run_id: str | None = None,
    engine: str = "local",
    master: str | None = None,
) -> dict[str, Any]:
    """``perfsleuth ingest``: add jobs to a fleet store; returns the ``perfsleuth.ingest/1`` summary.
    ``engine="spark"`` (``master``: a Spark master URL) parses and analyses each rank file as a Spark task.

    Raises ``PerfsleuthError`` when a job failed (the others are stored)."""
    import contextlib
    import io
    import json

    from perfsleuth.commands.ingest_cmd import check_options, ingest_command
    from perfsleuth.errors import InputError

    check_options([Path(p) for p in paths], list(dims), run_id, "json", engine)  # a bad option raises its own error
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = ingest_command([Path(p) for p in paths], Path(store), list(dims), run_id, "json", None, engine=engine, master=master)
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


def explain(fault: str | None = None):
    """``perfsleuth explain``: the ``taxonomy.FaultClass`` of ``fault`` (an id, or a catalog reference such as
    ``T12``), its ``taxonomy.SubCause`` when it names one, or the tuple of every class without one. An unknown
    id raises ``InputError`` naming the closest ids."""
    from perfsleuth import taxonomy
    from perfsleuth.errors import InputError

    if fault is None:
        return taxonomy.FAULTS
    if (sub_cause := taxonomy.SUB_CAUSE_BY_ID.get(fault.strip())) is not None:
        return sub_cause
    entry = taxonomy.lookup(fault)
    if entry is None:
        close = taxonomy.close_matches(fault)
        raise InputError(
            None,
            f"{fault!r} is not a fault or sub-cause id",
            place="fault",
            hint=f"did you mean {', '.join(close)}?" if close else "perfsleuth explain lists them",
        )
    return entry


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
    metric: str = "tokens",
):
    """``perfsleuth fleet report``: the fleet page's content (``fleet.report.FleetPage``; render it with
    ``report.fleet_html.render_fleet_html``), following ``metric`` (tokens, step_time or mfu)."""
    from perfsleuth import engine as engines
    from perfsleuth.errors import InputError
    from perfsleuth.fleet.report import build_fleet_page

    if (store is None) == (records is None):
        raise InputError(None, "give exactly one of store and records")
    con = engines.connect(engine)
    if store is not None:
        from perfsleuth.store import Store

        table, source = Store(Path(store)).records(con), str(store)
    elif records is not None:
        table, source = engines.table(con, Path(records)), str(records)
    else:  # never: exactly one of the two was checked above
        raise InputError(None, "give exactly one of store and records")
    return build_fleet_page(table, source=source, bootstrap=bootstrap, seed=seed, price_per_gpu_hour=price_per_gpu_hour, metric=metric)


__all__ = [
    "JobReport",
    "analyze",
    "analyze_streaming",
    "analyze_traces",
    "changes",
    "compare",
    "diff",
    "evaluate",
    "explain",
    "fleet_report",
    "ingest",
    "load_trace_job",
    "localize",
    "make_cases",
    "signals",
    "verify",
    "watch",
]
