"""``perfsleuth fleet report``: the fleet page, from a store (``--store DIR``) or a records file (``--records FILE``),
following ``--metric`` tokens (tokens/s/GPU), step_time or mfu (``fleet.columns.METRICS``).

It only parses options, opens the records on the chosen engine, and hands them to
``fleet.report.build_fleet_page``; ``report.fleet_html`` renders the page, written whole to ``--out``
(per-run diagnosis pages in a ``runs/`` folder beside it become links).
"""

from __future__ import annotations

import sys
from pathlib import Path

from perfsleuth import engine as engines
from perfsleuth.commands.output import deliver, fail
from perfsleuth.errors import InputError, PerfsleuthError
from perfsleuth.fleet.columns import METRICS
from perfsleuth.fleet.report import build_fleet_page
from perfsleuth.fleet.windows import parse_window
from perfsleuth.report.fleet_html import render_fleet_html
from perfsleuth.segment.localize import check_bootstrap

RUNS_DIR = "runs"


def fleet_report_command(
    out: Path,
    *,
    store: Path | None = None,
    records: Path | None = None,
    baseline: str | None = None,
    current: str | None = None,
    price_per_gpu_hour: float | None = None,
    currency: str = "USD",
    engine: str = "duckdb",
    master: str | None = None,
    bootstrap: int = 20,
    seed: int = 0,
    metric: str = "tokens",
) -> int:
    """Write the fleet page to ``out``; returns the exit status (0 done, 2 bad input or options)."""
    try:
        page = _build(Path(out), store, records, baseline, current, price_per_gpu_hour, currency, engine, master, bootstrap, seed, metric)
    except PerfsleuthError as exc:
        return fail(str(exc))
    status = deliver(render_fleet_html(page), Path(out))
    if status == 0:
        print(
            f"perfsleuth: fleet report written to {out} ({page.current.runs:,} runs in the current window, {len(page.causes)} culprit(s))",
            file=sys.stderr,
        )
    return status


def _build(
    out: Path,
    store: Path | None,
    records: Path | None,
    baseline: str | None,
    current: str | None,
    price: float | None,
    currency: str,
    engine: str,
    master: str | None,
    bootstrap: int,
    seed: int,
    metric: str = "tokens",
):
    if (store is None) == (records is None):
        raise InputError(None, "give exactly one of --store DIR and --records FILE")
    if metric not in METRICS:
        raise InputError(None, f"--metric {metric!r}: not a fleet metric", hint=f"one of {', '.join(METRICS)}")
    engines.require(engine)
    check_bootstrap(bootstrap)
    if (baseline is None) != (current is None):
        raise InputError(None, "give both --baseline and --current, or neither")
    windows = (parse_window(baseline, "--baseline"), parse_window(current, "--current")) if baseline and current else (None, None)
    con = engines.connect(engine, master=master)
    opened = None
    if store is not None:
        from perfsleuth.store import Store

        opened = Store(store)
        table, source = opened.records(con), str(store)
    elif records is not None:
        table, source = engines.table(con, Path(records)), str(records)
    else:  # never: exactly one of the two was checked above
        raise InputError(None, "give exactly one of --store DIR and --records FILE")
    page = build_fleet_page(
        table,
        source=source,
        baseline=windows[0],
        current=windows[1],
        price_per_gpu_hour=price,
        currency=currency,
        runs_dir=out.parent / RUNS_DIR,
        bootstrap=bootstrap,
        seed=seed,
        metric=metric,
    )
    if opened is None:
        return page
    from dataclasses import replace

    from perfsleuth.fleet.outcomes import store_outcomes

    return replace(page, outcomes=store_outcomes(opened, con, page.current.window))
