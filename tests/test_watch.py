"""``perfsleuth watch``: the fleet simulator replayed day by day into a store, with a watch after each day.
Every injected regression is raised once, on its day (± 1), in every series it touches, with its
culprit; nothing is raised on healthy days; two watches at once raise each alert once between them."""

from __future__ import annotations

import datetime as dt
import json
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.fleet.watch import watch_store
from perfsleuth.sim.fleet_replay import Replay, affected, fleet_nodes, series_of, write_day

runner = CliRunner()
SCENARIO = Replay(days=22)


def _series(a) -> tuple[str, str, str, str]:
    s = dict(a.series)
    return s["workload"], s["cluster"], s["tp"], s["pp"]


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, object]]:
    root = tmp_path_factory.mktemp("replay") / "store"
    raised = []
    for day in range(SCENARIO.days):
        write_day(SCENARIO, root, day)
        raised += [(day, a) for a in watch_store(root).alerts]
    return raised


def test_every_injected_regression_is_raised_once_on_its_day_with_its_culprit(replay: list) -> None:
    truth = affected(SCENARIO)
    for i, reg in enumerate(SCENARIO.regressions):
        injected = SCENARIO.start + dt.timedelta(days=reg.day)
        for series in truth[i]:
            mine = [(day, a) for day, a in replay if _series(a) == series]
            assert len(mine) == 1, (series, mine)
            day, a = mine[0]
            assert abs((dt.date.fromisoformat(a.change_day) - injected).days) <= 1
            assert 0 <= day - reg.day <= 1  # raised with the first watch whose data can show it, or the next
            nodes = [n for n in fleet_nodes() if series_of(n) == series]
            share = sum(all(n.get(k) == v for k, v in reg.where) for n in nodes) / len(nodes)
            assert a.relative_change.low <= -reg.slowdown * share <= a.relative_change.high < 0  # by construction
            elements = [dict(c.element) for c in a.culprits]
            assert elements and all(e and e.items() <= dict(reg.where).items() for e in elements[:1]), elements


def test_no_alert_on_healthy_days_or_in_untouched_series(replay: list) -> None:
    truth = affected(SCENARIO)
    days = {reg.day for reg in SCENARIO.regressions} | {reg.day + 1 for reg in SCENARIO.regressions}
    touched = set().union(*truth.values())
    assert all(day in days for day, _ in replay), [(d, a.series_key) for d, a in replay]
    assert all(_series(a) in touched for _, a in replay)
    assert len(replay) == sum(len(s) for s in truth.values())


@pytest.fixture
def store_after_first_regression(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    for day in range(12):
        write_day(SCENARIO, root, day)
    return root


def test_two_watches_at_once_raise_each_alert_once(store_after_first_regression: Path) -> None:
    root, results, start = store_after_first_regression, [], threading.Barrier(2)

    def one() -> None:
        start.wait()
        results.append(watch_store(root))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    raised = [a.series_key for r in results for a in r.alerts]
    assert sorted(raised) == sorted({*raised}) and len(raised) == len(affected(SCENARIO)[0])
    assert sorted(len(r.alerts) for r in results) == [0, len(raised)]
    assert watch_store(root).alerts == ()


def test_cli_emits_json_lines_openmetrics_and_an_exit_status(store_after_first_regression: Path, tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    root, prom = store_after_first_regression, tmp_path / "watch.prom"
    res = runner.invoke(app, ["watch", "--store", str(root), "--openmetrics", str(prom)])
    assert res.exit_code == 1, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(lines) == 2 and {x["series"]["cluster"] for x in lines} == {"c1"}
    assert all(x["schema"] == "perfsleuth.alert/1" and x["culprits"][0]["element"] == {"rack": "c1-r02"} for x in lines)
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    samples = families["perfsleuth_watch_regression"].samples
    assert len(samples) == 2 and all(s.value < -0.05 and s.labels["culprit"] == "rack=c1-r02" for s in samples)
    assert families["perfsleuth_watch_alerts"].samples[0].value == 2
    again = runner.invoke(app, ["watch", "--store", str(root), "-f", "openmetrics"])
    assert again.exit_code == 0 and "perfsleuth_watch_new_alerts 0" in again.stdout
    bad = runner.invoke(app, ["watch", "--store", str(root), "--metric", "no_such_column"])
    assert bad.exit_code == 2 and "no_such_column" in bad.stderr


def test_the_fleet_demo_history_raises_its_slow_rack_from_its_day_and_nothing_before(tmp_path: Path) -> None:
    """The simulator ``perfsleuth demo --fleet`` uses (one rack 35% slower from day 18), replayed days 11-22: every
    alert names the rack and dates the change to its day (± 1); the series that run mostly on the rack (>= 50% of
    their runs, 6-8 runs a day) are raised by the next day; nothing is raised before the change."""
    from dataclasses import replace

    from perfsleuth.sim.fleet_history import FleetHistory, fleet_history, write_history_store

    h = FleetHistory()
    history, root = fleet_history(h), tmp_path / "store"
    write_history_store(history, root, replace(h, days=11))
    raised = []
    for day in range(11, h.change_day + 5):
        write_history_store(history, root, replace(h, days=day + 1), first_day=day)
        raised += [(day, a) for a in watch_store(root).alerts]
    changed = h.start + dt.timedelta(days=h.change_day)
    assert raised and all(day >= h.change_day for day, _ in raised)
    for _, a in raised:
        assert abs((dt.date.fromisoformat(a.change_day) - changed).days) <= 1
        assert [dict(c.element) for c in a.culprits][:1] == [{"rack": h.bad_rack}]
    rows = history.to_pandas()
    on_rack = rows.assign(bad=rows["rack"] == h.bad_rack).groupby(["model", "cluster", "tp", "pp"])
    share, per_day = on_rack["bad"].mean(), on_rack.size() / h.days
    mostly = {k for k in share.index if share[k] >= 0.5 and per_day[k] >= 6}
    assert len(mostly) == 2  # llama-8b (60% on the rack) and llama-70b tp8 pp2 (50%)
    first = {_series(a): day for day, a in raised}
    assert all(first.get(k, 99) <= h.change_day + 1 for k in mostly), first
    assert len(first) == len(raised)  # each raised once
