"""The fleet page (``perfsleuth fleet report``) against a simulated fleet history with a known answer
(``cases.fleet_history``: one rack runs ``SLOWDOWN`` slower from ``CHANGE_DAY`` on). The rack's name is
hostile HTML, and so is the id of its slowest run, so every section that shows them also shows that they
are escaped.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from perfsleuth import engine
from perfsleuth.cli import app
from perfsleuth.errors import InputError
from perfsleuth.fleet.report import build_fleet_page, run_link
from perfsleuth.fleet.windows import Window, parse_window
from perfsleuth.report.fleet_html import render_fleet_html
from perfsleuth.sim.fleet_history import FleetHistory, write_history_store
from perfsleuth.sim.fleet_history import fleet_history as simulate_history
from tests.chromium_support import chromium, run_chromium

START = dt.date(2026, 3, 1)
DAYS = 28
CHANGE_DAY = 18  # 2026-03-19
SLOWDOWN = 0.35
BAD_RACK = 'c1-r02"><script>alert(1)</script>'
HOSTILE_RUN = "<img src=x onerror=alert('run')>"
NS_DAY = 86_400 * 10**9
EPOCH_DAY = (START - dt.date(1970, 1, 1)).days


def fleet_history(seed: int = 0, bad_rack: str = BAD_RACK, slowest_run_id: str | None = HOSTILE_RUN) -> pa.Table:
    return simulate_history(FleetHistory(START, DAYS, CHANGE_DAY, SLOWDOWN, bad_rack, seed), slowest_run_id)


@pytest.fixture(scope="module")
def history() -> pa.Table:
    return fleet_history()


@pytest.fixture(scope="module")
def fleet(history, tmp_path_factory):
    """The page built once for the module (bootstrap kept small: the tests check numbers, not the search)."""
    out_dir = tmp_path_factory.mktemp("fleet")
    runs = out_dir / "runs"
    runs.mkdir()
    (runs / f"{_second_slowest_of_bad_rack(history)}.html").write_text("<html></html>")  # a per-run diagnosis that exists
    con = engine.connect()
    page = build_fleet_page(engine.table(con, history), source="simulated.parquet", runs_dir=runs, bootstrap=8)
    html = render_fleet_html(page)
    (out_dir / "fleet.html").write_text(html, encoding="utf-8")
    return page, html, out_dir


def _second_slowest_of_bad_rack(history: pa.Table) -> str:
    now = history.filter(
        pc.and_(pc.equal(history["rack"], BAD_RACK), pc.greater_equal(history["time_ns"], (EPOCH_DAY + CHANGE_DAY) * NS_DAY))
    )
    return now.sort_by("tokens_per_s_per_gpu")["run_id"][1].as_py()


def _window_rows(history: pa.Table, w: Window) -> pa.Table:
    t = history["time_ns"]
    return history.filter(pc.and_(pc.greater_equal(t, w.start_ns), pc.less(t, w.end_ns)))


def test_change_point_of_the_trend_is_the_injected_day_and_splits_the_windows(fleet):
    page, _html, _ = fleet
    days = [page.daily[cp.index].day - EPOCH_DAY for cp in page.trend.change_points]
    assert days and abs(days[-1] - CHANGE_DAY) <= 1
    assert page.current.window.first_day == page.daily[page.trend.change_points[-1].index].day
    assert page.baseline.window.last_day == page.current.window.first_day - 1
    assert "latest change point" in page.windows_how


def test_gpu_hours_match_the_records_summed_by_hand(fleet, history):
    page, html, _ = fleet
    for totals in (page.baseline, page.current):
        rows = _window_rows(history, totals.window)
        assert totals.runs == rows.num_rows
        assert totals.gpu_hours == pytest.approx(pc.sum(rows["gpu_seconds"]).as_py() / 3600.0, rel=1e-9)
        by_hand = pc.sum(rows["tokens"]).as_py() / pc.sum(rows["gpu_seconds"]).as_py()
        assert totals.tokens_per_s_per_gpu == pytest.approx(by_hand, rel=1e-9)
    assert f"{page.current.gpu_hours:,.0f} GPU-hours" in html
    assert "2.00 USD per GPU-hour (the default" in html


def test_the_injected_culprit_and_its_lost_gpu_hours_are_found_within_the_interval(fleet, history):
    page, html, _ = fleet
    assert [c.evidence.elements for c in page.causes] == [(("rack", BAD_RACK),)]
    cause = page.causes[0]
    rows = _window_rows(history, page.current.window)
    rack_gpu_h = pc.sum(rows.filter(pc.equal(rows["rack"], BAD_RACK))["gpu_seconds"]).as_py() / 3600.0
    truth = SLOWDOWN * rack_gpu_h  # the same tokens at the healthy rate take (1 - SLOWDOWN) of the time
    lost = cause.lost_gpu_hours
    assert cause.gpu_hours_current == pytest.approx(rack_gpu_h, rel=1e-9)
    assert lost.low < truth < lost.high
    assert (lost.high - lost.low) < 0.05 * truth  # 8 cells of 160 runs each pin it down
    assert cause.lost_cost.value == pytest.approx(lost.value * 2.0)
    # the rest of the fleet did not change: what the culprit leaves is noise, inside the fleet's interval
    fleet_lost = page.rate_lost_gpu_hours
    assert fleet_lost.low < truth < fleet_lost.high
    assert abs(page.unexplained_gpu_hours) < 0.25 * truth
    assert f"{lost.value:,.0f}" in html


def test_factor_tree_puts_the_change_on_compute(fleet):
    page, html, _ = fleet
    parts = {c.name: c for c in page.attribution.parts}
    assert sum(c.share for c in page.attribution.parts) == pytest.approx(1.0, abs=1e-9)
    assert parts["compute"].share > 0.8  # only compute stretched on the slow rack
    assert parts["compute"].after > parts["compute"].before
    assert abs(parts["exposed_comm"].share) < 0.05 and abs(parts["idle_other"].share) < 0.05
    assert "Factor tree of the latest change" in html and "exposed communication" in html


def test_hostile_dimension_values_and_run_ids_are_escaped(fleet, history):
    _page, html, _ = fleet
    assert "<script>" not in html and "<img src=x" not in html and "onerror=alert(&#x27;run&#x27;)>" not in html
    assert "c1-r02&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html  # culprit table, summary, waterfall
    assert "&lt;img src=x onerror=alert(&#x27;run&#x27;)&gt;" in html  # the culprit's slowest run
    linked = _second_slowest_of_bad_rack(history)
    assert f'<a href="runs/{linked}.html">{linked}</a>' in html  # an existing per-run page is linked
    assert html.count('<a href="runs/') == html.count(f'<a href="runs/{linked}.html')  # and nothing else is


def test_run_links_only_for_plain_file_names_that_exist(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "ok-1.html").write_text("x")
    (tmp_path / "secret.html").write_text("x")
    assert run_link("ok-1", runs) == "runs/ok-1.html"
    assert run_link("missing", runs) is None
    for hostile in ("../secret", "..", "/etc/passwd", "a/b", ".hidden", "ok-1\n", "javascript:alert(1)"):
        assert run_link(hostile, runs) is None
    assert run_link("ok-1", None) is None


def test_missing_factor_and_gpu_time_columns_are_said_not_failed(history):
    slim = history.drop_columns(
        ["gpu_seconds", "tokens", "step_time_ns", "compute_fraction", "exposed_comm_fraction", "idle_other_fraction"]
    ).filter(pc.greater_equal(history["time_ns"], (EPOCH_DAY + 14) * NS_DAY))
    page = build_fleet_page(
        engine.table(engine.connect(), slim),
        bootstrap=0,
        baseline=parse_window("2026-03-15..2026-03-18", "--baseline"),
        current=parse_window("2026-03-19..2026-03-28", "--current"),
    )
    html = render_fleet_html(page)
    assert page.factors == () and page.attribution is None
    assert "the records have no factor columns" in html
    assert "no factor tree: the records need gpu_seconds and step_time_ns" in html
    assert "the records carry no GPU time, so hours and cost cannot be given" in html
    assert page.current.gpu_hours is None
    # unweighted: the plain mean of the runs' throughput
    rows = _window_rows(slim, page.current.window)
    assert page.current.tokens_per_s_per_gpu == pytest.approx(pc.mean(rows["tokens_per_s_per_gpu"]).as_py(), rel=1e-9)


def test_bad_input_is_a_clear_error(history):
    con = engine.connect()
    with pytest.raises(InputError, match="time_ns"):
        build_fleet_page(engine.table(con, history.drop_columns(["time_ns"])), source="r.parquet")
    with pytest.raises(InputError, match="--baseline .*not two YYYY-MM-DD dates"):
        parse_window("2026-03-01..soon", "--baseline")
    with pytest.raises(InputError, match="the last day is before the first"):
        parse_window("2026-03-09..2026-03-01", "--current")
    with pytest.raises(InputError, match="baseline window 2025-01-01..2025-01-07 holds no records"):
        build_fleet_page(
            engine.table(con, history),
            baseline=parse_window("2025-01-01..2025-01-07", "b"),
            current=parse_window("2026-03-20..2026-03-28", "c"),
            bootstrap=0,
        )


def test_cli_fleet_report_from_a_records_file_and_store_errors(history, tmp_path):
    rec = tmp_path / "records.parquet"
    pq.write_table(history.filter(pc.greater_equal(history["time_ns"], (EPOCH_DAY + 12) * NS_DAY)), rec)
    out = tmp_path / "page.html"
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "fleet",
            "report",
            "--records",
            str(rec),
            "--out",
            str(out),
            "--bootstrap",
            "0",
            "--baseline",
            "2026-03-13..2026-03-18",
            "--current",
            "2026-03-19..2026-03-28",
            "--price-per-gpu-hour",
            "3.5",
            "--currency",
            "EUR",
        ],
    )
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert "3.50 EUR per GPU-hour" in text and "the default" not in text.split("per GPU-hour")[1][:20]
    assert "given with --baseline and --current" in text
    res = runner.invoke(app, ["fleet", "report", "--store", str(tmp_path), "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "not a perfsleuth store" in res.output
    assert not (tmp_path / "x.html").exists()
    res = runner.invoke(app, ["fleet", "report", "--records", str(rec), "--current", "2026-03-19..2026-03-28"])
    assert res.exit_code == 2 and "give both --baseline and --current" in res.output


def _write_store(history: pa.Table, root: Path, first_day: int) -> pa.Table:
    return write_history_store(history, root, FleetHistory(START, DAYS, CHANGE_DAY, SLOWDOWN, BAD_RACK), first_day)


def test_cli_fleet_report_from_a_store(history, tmp_path):
    kept = _write_store(history, tmp_path / "store", 14)
    out = tmp_path / "site" / "fleet.html"
    out.parent.mkdir()
    res = CliRunner().invoke(
        app,
        [
            "fleet",
            "report",
            "--store",
            str(tmp_path / "store"),
            "--out",
            str(out),
            "--bootstrap",
            "0",
            "--baseline",
            "2026-03-15..2026-03-18",
            "--current",
            "2026-03-19..2026-03-28",
        ],
    )
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    cur = _window_rows(kept, parse_window("2026-03-19..2026-03-28", "c"))
    assert f"{pc.sum(cur['gpu_seconds']).as_py() / 3600:,.0f} GPU-hours" in text
    assert "rack=c1-r02&quot;&gt;&lt;script&gt;" in text  # the culprit, from the flattened dims map
    assert "date" not in text.split("dimensions</dt><dd>")[1].split("</dd>")[0]  # the partition is not a dimension


_chromium = chromium


def _screenshot(browser: str, page: Path, png: Path) -> str:
    """Render ``page`` headless (1280 x 2000) into ``png``; returns Chromium's log (console messages appear as ``CONSOLE``)."""
    return run_chromium(page, 1280, 2000, f"--screenshot={png}")


def _console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (Debian: apt-get install -y chromium)")
def test_page_renders_in_headless_chromium_without_console_errors(fleet, tmp_path):
    _page, _html, out_dir = fleet
    browser = _chromium()
    png = tmp_path / "fleet.png"
    log = _screenshot(browser, out_dir / "fleet.html", png)
    assert png.is_file(), log[-2000:]
    assert _console_lines(log) == []
    assert png.stat().st_size > 100_000  # a blank 1280×2000 page is ~10 KB; charts and tables make it far larger
    # the check can fail: a page that breaks its own CSP logs to the console
    bad = tmp_path / "bad.html"
    bad.write_text(_html.replace("</body>", '<img src="https://example.invalid/x.png"><script>undefinedFn()</script></body>'))
    assert _console_lines(_screenshot(browser, bad, tmp_path / "bad.png"))


def test_fleet_demo_finds_the_injected_rack_day_and_loss(tmp_path):
    """``perfsleuth demo --fleet``: the simulated rack, its day and its lost GPU-hours (truth printed beside
    the estimate, which must lie in its interval) come back, and the page and the store are written."""
    import re

    page = tmp_path / "fleet.html"
    res = CliRunner().invoke(app, ["demo", "--fleet", "--keep", str(tmp_path / "demo"), "--html", str(page)])
    assert res.exit_code == 0, res.output
    assert "change point(s) on 2026-03-19" in res.output
    (culprit,) = re.findall(r"culprit (\S+): ([\d,]+) \[([\d,]+), ([\d,]+)\] GPU-hours lost", res.output)
    truth = float(re.search(r"Injected loss: ([\d,]+) GPU-hours", res.output).group(1).replace(",", ""))
    low, high = (float(x.replace(",", "")) for x in culprit[2:])
    assert culprit[0] == "rack=c1-r02" and low - 1 <= truth <= high + 1
    assert page.exists() and (tmp_path / "demo" / "store" / "manifest.json").exists()
