"""``perfsleuth demo --fleet``: the fleet layer on a simulated fleet, no data needed.

Simulates four weeks of per-run records in which one rack turns slow on a known day
(``cases.fleet_history``), stores them as ``perfsleuth ingest`` would, builds the fleet page from the
store (change point, culprits, lost GPU-hours) and prints what was found next to what was injected.
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

from perfsleuth import engine as engines
from perfsleuth.commands.output import deliver, fail
from perfsleuth.errors import PerfsleuthError
from perfsleuth.fleet.report import build_fleet_page
from perfsleuth.fleet.windows import day_to_date
from perfsleuth.report.fleet_html import render_fleet_html
from perfsleuth.sim.fleet_history import FleetHistory, fleet_history, lost_gpu_hours, write_history_store
from perfsleuth.store import Store


def fleet_demo(out: Path | None, html: Path, seed: int = 0) -> int:
    """Run the fleet demo; writes the page to ``html`` and keeps the store in ``out`` when given."""
    h = FleetHistory(seed=seed)
    with tempfile.TemporaryDirectory(prefix="perfsleuth-fleet-demo-") as tmp:
        root = (out or Path(tmp)) / "store"
        try:
            history = fleet_history(h)
            write_history_store(history, root, h)
            page = build_fleet_page(Store(root).records(engines.connect("duckdb")), source=str(root), bootstrap=8, seed=seed)
        except PerfsleuthError as exc:
            return fail(str(exc))
        status = deliver(render_fleet_html(page), html)
    if status:
        return status
    changed = h.start + dt.timedelta(days=h.change_day)
    print(
        f"Simulated {history.num_rows:,} runs of {len(set(history['node'].to_pylist()))} nodes over {h.days} days into a fleet store"
        f"{f' at {root}' if out else ''}. Injected: rack {h.bad_rack} runs {h.slowdown:.0%} slower from {changed}."
    )
    points = page.trend.change_points if page.trend is not None else ()
    found_day = ", ".join(str(day_to_date(page.daily[p.index].day)) for p in points) or "none"
    print(f"Found: change point(s) on {found_day}; compared {page.baseline.window.label()} with {page.current.window.label()}.")
    for cause in page.causes:
        lost = cause.lost_gpu_hours
        where = cause.evidence.label
        interval = "" if lost is None or lost.low is None else f" [{lost.low:,.0f}, {lost.high:,.0f}]"
        print(f"  culprit {where}: {lost.value:,.0f}{interval} GPU-hours lost" if lost is not None else f"  culprit {where}")
    print(f"Injected loss: {lost_gpu_hours(history, h):,.0f} GPU-hours. Fleet page: {html.resolve()}", file=sys.stdout)
    return 0
