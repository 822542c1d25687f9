"""The ``perfsleuth`` command. Verbs are thin: they parse options, call ``perfsleuth.api`` and render.

A user's mistake (bad file, bad option) prints one line naming the file, the place and the cause and
exits with status 2; a traceback means a bug in perfsleuth.
"""

import gc
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from perfsleuth import __version__
from perfsleuth.commands.help_format import WholeSummaryGroup
from perfsleuth.errors import InputError, PerfsleuthError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
    cls=WholeSummaryGroup,
    help="perfsleuth: why is this GPU job slower than it should be, and how sure are we.",
)


FORMATS = (
    (
        "kineto",
        "PyTorch profiler Chrome-trace JSON (.json, .json.gz), one file per rank: CUDA and ROCm, "
        "2021-era to current category names, ns or µs timestamps  [analyze]",
    ),
    ("csv", "a table of samples or a history, one row per sample  [compare, changes]"),
    ("parquet", "the same as Parquet, including perfsleuth's records table  [compare, changes]"),
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"perfsleuth {__version__}")
        raise typer.Exit(0)


@app.callback()
def _verb_scope(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version, help="print the version and exit")] = False,
) -> None:
    """Around every verb: the library deprecations no user can act on are silenced for its duration."""
    ctx.with_resource(_library_deprecations_quiet())


@contextmanager
def _library_deprecations_quiet() -> Iterator[None]:
    """Silence the DeprecationWarnings Ibis's own calls raise, for as long as one verb runs.

    Ibis 12 calls DuckDB's deprecated ``fetch_arrow_table()`` on every query and reads a deprecated
    pandas option: warnings about Ibis's code that tell a user nothing and that perfsleuth cannot change.
    Only that category from those modules is silenced, and only inside the verb (no filter is installed
    at import); every other warning still surfaces, and the tests run each verb with warnings as errors."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ibis(\.|$)")
        yield


class OutputFormat(StrEnum):
    text = "text"
    json = "json"
    html = "html"
    md = "md"


class AnalyzeFormat(StrEnum):
    """``analyze``: the report formats, and perfetto (the job's traces with the findings overlaid)."""

    text = "text"
    json = "json"
    html = "html"
    md = "md"
    perfetto = "perfetto"
    openmetrics = "openmetrics"


class DataFormat(StrEnum):
    """The verbs whose result is a record, not a report: text for people, json for machines."""

    text = "text"
    json = "json"


class PageFormat(StrEnum):
    """``evaluate``: text, json, or one self-contained HTML page."""

    text = "text"
    json = "json"
    html = "html"


def _set_progress(value: bool | None) -> None:
    from perfsleuth import progress

    progress.configure(value)


ShowProgress = Annotated[
    bool | None,
    typer.Option(
        "--progress/--quiet",
        callback=_set_progress,
        expose_value=False,
        help="progress on stderr: --progress always, --quiet never (default: only when stderr is a terminal)",
    ),
]

_FORMAT_HELP = "text for people, json for machines, md for a ticket, html for one self-contained page"


def _fail(exc: PerfsleuthError) -> None:
    from perfsleuth.commands.output import fail

    raise typer.Exit(fail(str(exc)))


def _require(*paths: Path | None) -> None:
    """Fail at once on an input path that does not exist, before a verb imports its (heavy) engine."""
    for path in paths:
        if path is not None and not path.exists() and not path.is_symlink():
            _fail(InputError(path, "no such file or directory"))


def _emit(report, fmt: OutputFormat, out: Path | None) -> None:
    """Render ``report`` in ``fmt`` to ``out`` (a file, device, FIFO or ``-``) or stdout; exit 2 when
    ``out`` cannot take it. Text for a file is rendered whole first, so it is written like the rest."""
    import io

    from perfsleuth.commands.output import deliver, is_stdout

    if fmt is not OutputFormat.text:
        status = deliver(_render_document(report, fmt), out)
        if status:
            raise typer.Exit(status)
        return
    from perfsleuth.report.text_report import make_console, render  # here: the other formats need neither it nor rich

    if is_stdout(out):
        render(report.analysis, report.diagnosis, make_console(), report.sources)
        status = 0
    else:
        buffer = io.StringIO()
        render(report.analysis, report.diagnosis, make_console(buffer), report.sources)
        status = deliver(buffer.getvalue(), out)
    if status:
        raise typer.Exit(status)


def _render_document(report, fmt: OutputFormat) -> str:
    if fmt is OutputFormat.json:
        from perfsleuth.report.escape import json_document

        return json_document(report.to_json())
    if fmt is OutputFormat.html:
        from perfsleuth.report.html_report import render_html

        return render_html(report.analysis, report.diagnosis, report.sources)
    from perfsleuth.report.markdown_report import render_markdown

    return render_markdown(report.analysis, report.diagnosis, report.sources)


_RANK_ENGINE_HELP = (
    "where each rank file is parsed and analysed: local (a process pool) or spark (one Spark task per file; --master for a cluster)"
)
_RANK_MASTER_HELP = (
    "Spark master URL, e.g. spark://host:7077 or yarn (default local[2]); the trace files must be at the same path on every executor"
)


@app.command()
def analyze(
    paths: Annotated[
        list[Path], typer.Argument(help="a job's directory, or its files: traces, telemetry, logs, benchmarks (recognised by content)")
    ],
    format: Annotated[
        AnalyzeFormat,
        typer.Option(
            "--format",
            "-f",
            help="text for people, json for machines, html for a report, md for a ticket, perfetto for "
            "the traces with the findings on perfsleuth tracks (Chrome-trace JSON for ui.perfetto.dev), "
            "openmetrics for Prometheus (textfile collector, Pushgateway)",
        ),
    ] = AnalyzeFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write the report here instead of stdout")] = None,
    run_id: Annotated[str | None, typer.Option(help="name of the run (default: the directory name)")] = None,
    workers: Annotated[int | None, typer.Option(help="processes that parse rank files (default: one per core)")] = None,
    placement: Annotated[
        str | None,
        typer.Option(
            help="which host and GPU each rank ran on, to join telemetry to ranks: a CSV/JSON file of rank,host,gpu "
            "or RANK=HOST[:GPU],... (default: nsys host names, host names in trace file names)"
        ),
    ] = None,
    ranks: Annotated[
        str | None,
        typer.Option(
            "--ranks",
            help="analyse these ranks' traces only, e.g. 0,8,16-31 (one rank per node plus suspects); the "
            "report says what the other ranks leave undecidable",
        ),
    ] = None,
    engine: Annotated[str, typer.Option(help=_RANK_ENGINE_HELP)] = "local",
    master: Annotated[str | None, typer.Option(help=_RANK_MASTER_HELP)] = None,
    _progress: ShowProgress = None,
) -> None:
    """What is wrong with this job, from whatever it has: traces, telemetry, NCCL, ncu, step logs, benchmarks."""
    _require(*paths)
    from perfsleuth import progress
    from perfsleuth.api import analyze as run_analysis

    try:
        with progress.task(f"analysing {', '.join(p.name for p in paths[:3])}{' ...' if len(paths) > 3 else ''}"):
            report = run_analysis(
                paths,
                run_id=run_id,
                workers=workers,
                placement=placement,
                keep_events=format is AnalyzeFormat.perfetto,
                ranks=ranks,
                engine=engine,
                master=master,
            )
    except PerfsleuthError as exc:
        _fail(exc)
    if format is AnalyzeFormat.perfetto:
        _emit_perfetto(report, paths, out)
        return
    if format is AnalyzeFormat.openmetrics:
        from perfsleuth.commands.output import deliver
        from perfsleuth.report.openmetrics_job import job_openmetrics

        if status := deliver(job_openmetrics(report.analysis, report.diagnosis), out):
            raise typer.Exit(status)
        return
    _emit(report, OutputFormat(format.value), out)


def _emit_perfetto(report, paths: list[Path], out: Path | None) -> None:
    """The traces with perfsleuth's tracks, or exit 2 when the job has no trace to overlay."""
    import json

    from perfsleuth.commands.output import deliver
    from perfsleuth.report.perfetto_trace import perfetto_document

    if report.analysis.job is None:
        _fail(
            InputError(
                ", ".join(map(str, paths)),
                "no trace among the inputs: --format perfetto overlays the findings on the job's traces",
                hint="use text, json, md or html",
            )
        )
    if status := deliver(json.dumps(perfetto_document(report.analysis, report.diagnosis)), out):
        raise typer.Exit(status)


@app.command()
def demo(
    keep: Annotated[
        Path | None,
        typer.Option(
            "--keep", help="keep the simulated job's files (traces; with --fleet, the store) in this directory (default: a temp dir)"
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="simulator seed")] = 7,
    format: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.text,
    html: Annotated[
        Path | None,
        typer.Option(help="also write the HTML report here (default perfsleuth-demo.html, or perfsleuth-fleet-demo.html with --fleet)"),
    ] = None,
    fleet: Annotated[
        bool,
        typer.Option(
            "--fleet", help="the fleet layer instead: four simulated weeks of runs in a store, one rack turned slow, the fleet page"
        ),
    ] = False,
) -> None:
    """Simulate a small faulty 4-rank training job (or, with --fleet, a fleet with a slow rack), show what perfsleuth finds."""
    if fleet:
        from perfsleuth.commands.fleet_demo import fleet_demo

        raise typer.Exit(fleet_demo(keep, html or Path("perfsleuth-fleet-demo.html"), seed=seed))
    html = html or Path("perfsleuth-demo.html")
    from perfsleuth.api import analyze as run_analysis
    from perfsleuth.report.text_report import make_console
    from perfsleuth.sim.demo import write_demo_job

    with tempfile.TemporaryDirectory(prefix="perfsleuth-demo-") as tmp:
        target = keep or Path(tmp)
        target.mkdir(parents=True, exist_ok=True)
        truth = write_demo_job(target, seed=seed)
        try:
            report = run_analysis([target], run_id="demo")
        except PerfsleuthError as exc:
            _fail(exc)
        from perfsleuth.commands.output import deliver

        if status := deliver(_render_document(report, OutputFormat.html), html):
            raise typer.Exit(status)
        if format is not OutputFormat.text:
            _emit(report, format, None)
            return
        console = make_console()
        console.print(
            f"Simulated a {truth['world_size']}-rank data-parallel training job (PyTorch-profiler traces in "
            f"{target if keep else 'a temporary directory'}). Injected: {', '.join(truth['faults'])}.\n",
            markup=False,
        )
        _emit(report, format, None)
        found = ", ".join(f.fault for f in report.diagnosis.findings) or "nothing"
        console.print(f"\nInjected: {', '.join(truth['faults'])}. Found: {found}.", markup=False)
        console.print(f"HTML report: {html.resolve()}", markup=False)


@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="baseline samples: CSV, Parquet or a records table")],
    candidate: Annotated[Path, typer.Argument(help="candidate samples, same columns")],
    metric: Annotated[str, typer.Option(help="metric column(s), comma-separated")],
    group_by: Annotated[list[str] | None, typer.Option("--group-by", help="compare per value of these columns (FDR-controlled)")] = None,
    cluster_by: Annotated[list[str] | None, typer.Option("--cluster-by", help="nesting, outermost first: node,run")] = None,
    threshold: Annotated[float, typer.Option(help="smallest relative effect that matters (0.02 = 2%)")] = 0.02,
    higher_is_better: Annotated[
        bool | None, typer.Option("--higher-is-better/--lower-is-better", help="direction of 'worse' (default: from the metric's name)")
    ] = None,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help=_FORMAT_HELP)] = OutputFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
) -> None:
    """Did CANDIDATE regress against BASELINE, by how much, and how sure (exit 1 on a regression)."""
    _require(baseline, candidate)
    from perfsleuth.commands.compare_cmd import compare_command

    raise typer.Exit(
        compare_command(baseline, candidate, metric, group_by or [], cluster_by or [], threshold, higher_is_better, format.value, out)
    )


@app.command()
def changes(
    file: Annotated[Path | None, typer.Argument(help="a time-ordered history: CSV, Parquet or a records table")] = None,
    metric: Annotated[str | None, typer.Option(help="metric column (default: the only numeric column)")] = None,
    time: Annotated[str | None, typer.Option("--time", help="time column (default: the only timestamp column, else row order)")] = None,
    series_by: Annotated[list[str] | None, typer.Option("--series-by", help="one history per value of these columns")] = None,
    alpha: Annotated[float, typer.Option(help="false-alarm rate per series")] = 0.01,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help=_FORMAT_HELP)] = OutputFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            help="a fleet store instead of FILE: one series of run values per workload x cluster (or --series-by dims); needs --metric",
        ),
    ] = None,
    keep_season: Annotated[
        bool,
        typer.Option(
            "--keep-season",
            help="treat a recognised daily/weekly/monthly cycle as correlated noise instead of taking it out first",
        ),
    ] = False,
) -> None:
    """Where did this history change, and is it real."""
    if (file is None) == (store is None):
        typer.echo("perfsleuth: error: give either FILE (a history table) or --store DIR, not both", err=True)
        raise typer.Exit(2)
    if store is not None:
        _require(store)
        from perfsleuth.commands.changes_store import changes_store_command

        raise typer.Exit(changes_store_command(store, metric, series_by or [], format.value, out, alpha, remove_season=not keep_season))
    assert file is not None  # exactly one of FILE and --store, checked above
    _require(file)
    from perfsleuth.commands.changes_cmd import changes_command

    raise typer.Exit(changes_command(file, metric, time, series_by or [], format.value, out, alpha, remove_season=not keep_season))


@app.command()
def localize(
    file: Annotated[
        Path | None,
        typer.Argument(
            help="a leaf table (CSV or Parquet): one row per combination of dimension "
            "values, or one row per run; every column not named as a metric is a "
            "dimension. Leave out with --store"
        ),
    ] = None,
    current: Annotated[
        str | None,
        typer.Option(
            help="FILE: metric column of the current window (the numerator of a ratio); --store: the current window, YYYY-MM-DD..YYYY-MM-DD"
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="FILE: metric column of the baseline window; --store: the baseline "
            "window, YYYY-MM-DD..YYYY-MM-DD (both days included, UTC)"
        ),
    ] = None,
    current_denominator: Annotated[
        str | None, typer.Option(help="denominator column (current), for ratio metrics such as tokens / GPU-seconds")
    ] = None,
    baseline_denominator: Annotated[str | None, typer.Option(help="denominator column (baseline)")] = None,
    store: Annotated[Path | None, typer.Option(help="a fleet store (perfsleuth ingest) instead of FILE")] = None,
    metric: Annotated[
        str | None, typer.Option(help="--store: the fleet metric (tokens_per_s_per_gpu, mfu, step_time_ns, or any numeric records column)")
    ] = None,
    search_dims: Annotated[
        str | None,
        typer.Option(
            "--search-dims",
            help="--store: the dimensions to search, comma-separated (default: all the store's, except per-run identifiers)",
        ),
    ] = None,
    workload_dims: Annotated[
        str | None,
        typer.Option(
            help="dimensions that describe the workload (model, tp, pp, ...), comma-separated: culprits are compared like with like"
        ),
    ] = None,
    engine: Annotated[str, typer.Option(help="duckdb (embedded) or spark (PySpark; --master for a cluster)")] = "duckdb",
    master: Annotated[str | None, typer.Option(help="Spark master URL (default local[*])")] = None,
    bootstrap: Annotated[int, typer.Option(help="bootstrap resamples over runs for intervals and selection frequency")] = 20,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    format: Annotated[OutputFormat, typer.Option("--format", "-f", help=_FORMAT_HELP)] = OutputFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
) -> None:
    """Which machines, versions and configs explain a fleet change: mix vs rate, culprits with evidence.

    Two forms: localize FILE --current COL --baseline COL, or localize --store DIR --metric NAME
    --baseline YYYY-MM-DD..YYYY-MM-DD --current YYYY-MM-DD..YYYY-MM-DD [--search-dims a,b,...]."""
    from perfsleuth.commands.localize_cmd import localize_command, localize_store_command

    def names(text: str | None) -> list[str] | None:
        return None if text is None else [d.strip() for d in text.split(",") if d.strip()]

    problem = None
    if (file is None) == (store is None):
        problem = "give either FILE (a leaf table) or --store DIR, not both"
    elif current is None or baseline is None:
        problem = "--current and --baseline are required"
    elif store is not None and (metric is None or current_denominator or baseline_denominator):
        problem = "--store needs --metric (and takes no denominator columns)"
    elif file is not None and (metric or search_dims):
        problem = "--metric and --search-dims go with --store; a leaf table names its metric columns with --current/--baseline"
    if problem:
        typer.echo(f"perfsleuth: error: {problem}", err=True)
        raise typer.Exit(2)
    assert current is not None and baseline is not None  # the checks above, restated for the type checker
    if store is not None:
        assert metric is not None
        raise typer.Exit(
            localize_store_command(
                store,
                metric,
                baseline,
                current,
                names(search_dims),
                names(workload_dims),
                format.value,
                out,
                engine,
                bootstrap=bootstrap,
                seed=seed,
                master=master,
            )
        )
    assert file is not None
    raise typer.Exit(
        localize_command(
            file,
            current,
            baseline,
            current_denominator,
            baseline_denominator,
            format.value,
            out,
            engine,
            names(workload_dims),
            bootstrap=bootstrap,
            seed=seed,
            master=master,
        )
    )


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="jobs to add, each a directory of its signal files or one file")],
    store: Annotated[Path, typer.Option(help="the fleet store directory (created when missing)")],
    dims: Annotated[
        list[str] | None,
        typer.Option(
            "--dims",
            help="key=value dimensions of the runs (cluster=c1,node=n07); they win over a dims.json sidecar and the files' metadata",
        ),
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="the run's id (one PATH only; default: the trace's, else the PATH's name)")] = None,
    format: Annotated[DataFormat, typer.Option("--format", "-f", help="text or json")] = DataFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    engine: Annotated[str, typer.Option(help=_RANK_ENGINE_HELP)] = "local",
    master: Annotated[str | None, typer.Option(help=_RANK_MASTER_HELP)] = None,
    _progress: ShowProgress = None,
) -> None:
    """Add jobs to the fleet store (Parquet, partitioned by date and cluster); content already stored is skipped."""
    _require(*paths)
    from perfsleuth.commands.ingest_cmd import ingest_command

    raise typer.Exit(ingest_command(paths, store, dims or [], run_id, format.value, out, engine=engine, master=master))


@app.command()
def diff(
    baseline: Annotated[Path, typer.Argument(help="the baseline job's traces: a folder or a file (Kineto, nsys, JAX)")],
    candidate: Annotated[Path, typer.Argument(help="the candidate job's traces (any trace format)")],
    top: Annotated[int, typer.Option(help="rows to show in text, md and html")] = 15,
    threshold: Annotated[float, typer.Option(help="smallest relative change of a row that matters (0.02 = 2%)")] = 0.02,
    method: Annotated[str, typer.Option(help="interval over steps: auto (Welch t) or bootstrap")] = "auto",
    format: Annotated[OutputFormat, typer.Option("--format", "-f")] = OutputFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    workers: Annotated[int | None, typer.Option(help="processes (default: one per core)")] = None,
    engine: Annotated[str, typer.Option(help=_RANK_ENGINE_HELP)] = "local",
    master: Annotated[str | None, typer.Option(help=_RANK_MASTER_HELP)] = None,
    _progress: ShowProgress = None,
) -> None:
    """Which kernels, collectives and phases made CANDIDATE's steps slower (or faster) than BASELINE's."""
    _require(baseline, candidate)
    from perfsleuth import progress
    from perfsleuth.commands.diff_cmd import diff_command

    with progress.task(f"comparing {baseline.name} with {candidate.name}"):
        status = diff_command(baseline, candidate, format.value, out, top, threshold, method, workers, engine, master)
    raise typer.Exit(status)


@app.command()
def verify(
    before: Annotated[
        str,
        typer.Argument(
            help="the job with the finding: its files (what analyze takes) or, with --store, run id(s) of the store, comma-separated"
        ),
    ],
    after: Annotated[str, typer.Argument(help="the job after the fix: files or store run id(s)")],
    finding: Annotated[str | None, typer.Option(help="the fault of BEFORE's finding to verify (default: its largest)")] = None,
    store: Annotated[Path | None, typer.Option(help="a fleet store: sides may be its run ids, and the verdict is kept there")] = None,
    tolerance: Annotated[
        float, typer.Option(help="how far below the predicted saving a real saving still validates the finding (0.25 = 25%)")
    ] = 0.25,
    threshold: Annotated[float, typer.Option(help="smallest relative change that matters (0.02 = 2%)")] = 0.02,
    diff: Annotated[bool, typer.Option("--diff/--no-diff", help="diff the two sides' traces: what else changed")] = True,
    format: Annotated[str, typer.Option("--format", "-f", help="text or json")] = "text",
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    workers: Annotated[int | None, typer.Option(help="processes (default: one per core)")] = None,
    engine: Annotated[str, typer.Option(help=_RANK_ENGINE_HELP)] = "local",
    master: Annotated[str | None, typer.Option(help=_RANK_MASTER_HELP)] = None,
) -> None:
    """Did the fix save what BEFORE's finding predicted: validated, partly, not validated or inconclusive (exit 0 validated)."""
    from perfsleuth.commands.verify_cmd import verify_command

    raise typer.Exit(
        verify_command(
            before,
            after,
            finding=finding,
            store=store,
            tolerance=tolerance,
            threshold=threshold,
            diff=diff,
            format=format,
            out=out,
            workers=workers,
            engine=engine,
            master=master,
        )
    )


@app.command()
def watch(
    store: Annotated[Path, typer.Option(help="the fleet store to watch (state is kept in it)")],
    metric: Annotated[str, typer.Option(help="records column to watch")] = "tokens_per_s_per_gpu",
    alpha: Annotated[float, typer.Option(help="false-alarm rate of the change-point test, per series and watch")] = 0.01,
    threshold: Annotated[float, typer.Option(help="smallest regression that alerts (0.05 = 5%)")] = 0.05,
    lookback_days: Annotated[int, typer.Option(help="changes starting this many days before the newest run are new")] = 14,
    dedupe_days: Annotated[int, typer.Option(help="a change this close to one already raised for the series is the same")] = 3,
    format: Annotated[str, typer.Option("--format", "-f", help="jsonl (one alert a line), json, openmetrics or text")] = "jsonl",
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    openmetrics: Annotated[Path | None, typer.Option(help="also write OpenMetrics text here (a textfile collector's *.prom)")] = None,
) -> None:
    """Raise new regressions in the store's series, each once, with culprits (exit 1 on a new one), for cron or CI."""
    from perfsleuth.commands.watch_cmd import watch_command

    raise typer.Exit(
        watch_command(
            store,
            format=format,
            out=out,
            openmetrics=openmetrics,
            metric=metric,
            alpha=alpha,
            threshold=threshold,
            lookback_days=lookback_days,
            dedupe_days=dedupe_days,
        )
    )


fleet_app = typer.Typer(
    no_args_is_help=True, rich_markup_mode=None, cls=WholeSummaryGroup, help="The fleet page: trend, factor tree, culprits and their cost."
)
app.add_typer(fleet_app, name="fleet")


@fleet_app.command("report")
def fleet_report(
    store: Annotated[Path | None, typer.Option(help="the fleet store directory (made by perfsleuth ingest)")] = None,
    records: Annotated[
        Path | None,
        typer.Option(
            help="or a records table (CSV or Parquet): run_id, time_ns, dimension columns, tokens_per_s_per_gpu, gpu_seconds, ..."
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="the HTML page; per-run pages in runs/ beside it are linked")] = Path(
        "fleet.html"
    ),
    baseline: Annotated[
        str | None,
        typer.Option(
            help="baseline days FIRST..LAST (YYYY-MM-DD, both included); default: "
            "before the latest change point, else the 7 days before the last 7"
        ),
    ] = None,
    current: Annotated[
        str | None, typer.Option(help="current days FIRST..LAST; default: from the latest change point, else the last 7 days")
    ] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(help="price of one GPU-hour (default 2.0, illustrative)")] = None,
    currency: Annotated[str, typer.Option(help="currency of the price")] = "USD",
    engine: Annotated[str, typer.Option(help="duckdb (embedded) or spark (PySpark; --master for a cluster)")] = "duckdb",
    master: Annotated[str | None, typer.Option(help="Spark master URL (default local[2])")] = None,
    bootstrap: Annotated[int, typer.Option(help="bootstrap resamples for the culprits' selection frequency")] = 20,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    metric: Annotated[
        str,
        typer.Option(
            help="the top line: tokens (tokens/s/GPU, GPU-time weighted; needs tokens per step), "
            "step_time (step weighted) or mfu (GPU-time weighted)"
        ),
    ] = "tokens",
    _progress: ShowProgress = None,
) -> None:
    """Write the fleet page: GPU-hours and cost lost per cause, the trend and its change points, culprits with evidence."""
    from perfsleuth import progress
    from perfsleuth.commands.fleet_cmd import fleet_report_command

    with progress.task("writing the fleet page"):
        status = fleet_report_command(
            out,
            store=store,
            records=records,
            baseline=baseline,
            current=current,
            price_per_gpu_hour=price_per_gpu_hour,
            currency=currency,
            engine=engine,
            master=master,
            bootstrap=bootstrap,
            seed=seed,
            metric=metric,
        )
    raise typer.Exit(status)


cases_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    cls=WholeSummaryGroup,
    help="Labeled cases: make a simulated suite, or add an investigated real job.",
)
app.add_typer(cases_app, name="cases")


@cases_app.command("make")
def cases_make(
    out: Annotated[Path, typer.Argument(help="directory to write the suite into")],
    n: Annotated[int, typer.Option("--n", "-n", help="number of cases")] = 100,
    seed: Annotated[int, typer.Option(help="suite seed")] = 0,
    workers: Annotated[int | None, typer.Option(help="processes (default: one per core)")] = None,
    sources: Annotated[
        str,
        typer.Option(
            help="signals to simulate, comma-separated: trace, telemetry, nccl, steplog, inference, or all (classes balanced across them)"
        ),
    ] = "trace",
    from_real: Annotated[
        Path | None,
        typer.Option(
            "--from-real", help="instead of simulating: transform the real Kineto traces in this folder (job folders or trace files)"
        ),
    ] = None,
    _progress: ShowProgress = None,
) -> None:
    """Simulate N labeled cases (every fault class, magnitudes down to undetectable, pairs, healthy jobs), or with
    --from-real DIR transform real traces with faults of known size."""
    from perfsleuth import progress
    from perfsleuth.commands.cases_cmd import cases_make as run
    from perfsleuth.commands.cases_cmd import cases_make_real

    with progress.task(f"making cases in {out}"):
        status = cases_make_real(from_real, out, seed) if from_real is not None else run(out, n, seed, workers, sources)
    raise typer.Exit(status)


@cases_app.command("add")
def cases_add(
    trace_dir: Annotated[Path, typer.Argument(help="the investigated job's trace directory")],
    out: Annotated[Path, typer.Argument(help="the case directory to create")],
    fault: Annotated[str, typer.Option(help="the engineer's verdict: taxonomy id(s), comma-separated, or 'healthy'")],
    scope: Annotated[str | None, typer.Option(help="e.g. ranks=3 or ranks=0,1;steps=5-9")] = None,
    magnitude: Annotated[float | None, typer.Option(help="fraction of step time lost, if known")] = None,
    notes: Annotated[str, typer.Option(help="free text: how it was decided")] = "",
) -> None:
    """Turn an investigated real job into a labeled case."""
    from perfsleuth.commands.cases_cmd import cases_add as run

    raise typer.Exit(run(trace_dir, out, fault, scope, notes, magnitude))


@app.command()
def evaluate(
    cases: Annotated[list[Path], typer.Argument(help="case directories, or directories of cases")],
    format: Annotated[PageFormat, typer.Option("--format", "-f", help="text, json or html (one self-contained page)")] = PageFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    workers: Annotated[int | None, typer.Option(help="processes (default: one per core)")] = None,
    _progress: ShowProgress = None,
) -> None:
    """Score the diagnosis on labeled cases: per-class F1, confusion, misleading findings, calibration."""
    _require(*cases)
    from perfsleuth import progress
    from perfsleuth.commands.evaluate_cmd import evaluate_command

    with progress.task(f"evaluating the cases under {', '.join(c.name for c in cases[:3])}"):
        status = evaluate_command(cases, format.value, out, workers)
    raise typer.Exit(status)


@app.command()
def signals(
    cases: Annotated[list[Path], typer.Argument(help="case directories, or directories of cases")],
    format: Annotated[DataFormat, typer.Option("--format", "-f", help="text or json")] = DataFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
    workers: Annotated[int | None, typer.Option(help="processes (default: one per core)")] = None,
    _progress: ShowProgress = None,
) -> None:
    """Which signals to collect first: what each signal group buys in diagnosis quality, against its cost."""
    _require(*cases)
    from perfsleuth import progress
    from perfsleuth.commands.signals_cmd import signals_command

    with progress.task(f"ablating signal groups over the cases under {', '.join(c.name for c in cases[:3])}"):
        status = signals_command(cases, format.value, out, workers)
    raise typer.Exit(status)


@app.command()
def explain(
    fault: Annotated[
        str | None, typer.Argument(help="a fault id (exposed_communication, ...) or catalog reference (T1); none: list them")
    ] = None,
    format: Annotated[DataFormat, typer.Option("--format", "-f", help="text or json")] = DataFormat.text,
    out: Annotated[Path | None, typer.Option("--out", "-o")] = None,
) -> None:
    """What a fault class means, the direct evidence that proves it, and what it is told apart from."""
    from perfsleuth.commands.explain_cmd import explain_command

    raise typer.Exit(explain_command(fault, format.value, out))


@app.command()
def formats() -> None:
    """What perfsleuth can read."""
    from perfsleuth.ingest import adapters  # noqa: F401  (registration)
    from perfsleuth.ingest.corpus import covered
    from perfsleuth.ingest.source import ADAPTERS

    rows = [FORMATS[0], *((a.name, f"{a.description}  [analyze]") for a in ADAPTERS.values()), *FORMATS[1:]]
    width = max(len(n) for n, _ in rows) + 2
    for name, what in rows:
        typer.echo(f"{name:<{width}} {what}")
        if corpus := covered(name):
            typer.echo(f"{'':<{width}}   {corpus}")


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


def main() -> None:  # pragma: no cover - the console entry point
    """``perfsleuth``: the app, then the collector frozen on the way out, so the interpreter's last
    collection does not walk every object an analysis made (0.1 s of an 8-rank analyze's exit)."""
    try:
        app()
    finally:
        gc.freeze()
