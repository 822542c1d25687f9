"""``fleet report --metric``: the fleet page following the step time (step weighted) or the MFU (GPU-time
weighted) instead of tokens/s/GPU, on the simulated fleet history of ``test_fleet_report`` (one rack runs
35 % slower from day 18), with the columns a step-time or MFU page needs added by construction:
steps = GPU-seconds / (tp × pp × step time) and MFU = tokens/s/GPU / 3000 (so the MFU page must equal the
tokens page divided by 3000, and price the same GPU-hours lost)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from perfsleuth import engine
from perfsleuth.cli import app
from perfsleuth.errors import InputError
from perfsleuth.fleet.report import build_fleet_page
from perfsleuth.report.fleet_html import render_fleet_html
from tests.test_fleet_report import BAD_RACK, CHANGE_DAY, EPOCH_DAY, _window_rows, fleet_history

MFU_SCALE = 3000.0


@pytest.fixture(scope="module")
def records() -> pa.Table:
    h = fleet_history(slowest_run_id=None)
    gpus = pc.multiply(pc.cast(h["tp"], pa.float64()), pc.cast(h["pp"], pa.float64()))
    steps = pc.round(pc.divide(h["gpu_seconds"], pc.multiply(pc.divide(h["step_time_ns"], 1e9), gpus)))
    h = h.append_column("steps", pc.cast(steps, pa.int64()))
    return h.append_column("mfu", pc.divide(h["tokens_per_s_per_gpu"], MFU_SCALE))


def _page(records: pa.Table, metric: str):
    return build_fleet_page(engine.table(engine.connect(), records), source="r.parquet", bootstrap=4, metric=metric)


@pytest.fixture(scope="module")
def pages(records):
    return {m: _page(records, m) for m in ("tokens", "step_time", "mfu")}


def test_step_time_page_is_step_weighted_and_finds_the_slow_rack(pages, records):
    page = pages["step_time"]
    for totals in (page.baseline, page.current):
        rows = _window_rows(records, totals.window)
        ms = pc.divide(rows["step_time_ns"], 1e6)
        by_hand = pc.sum(pc.multiply(ms, rows["steps"])).as_py() / pc.sum(rows["steps"]).as_py()
        assert totals.value == pytest.approx(by_hand, rel=1e-9)
        assert totals.gpu_hours == pytest.approx(pc.sum(rows["gpu_seconds"]).as_py() / 3600, rel=1e-9)  # still GPU time
    assert page.current.value > page.baseline.value  # the slow rack makes steps longer
    days = [page.daily[cp.index].day - EPOCH_DAY for cp in page.trend.change_points]
    assert days and abs(days[-1] - CHANGE_DAY) <= 1
    assert [c.evidence.elements for c in page.causes] == [(("rack", BAD_RACK),)]
    assert page.causes[0].lost_gpu_hours is None  # runs weigh by steps: no GPU-hours are priced
    # the slowest runs are the longest steps
    values = [r.value for r in page.slowest_runs]
    assert values == sorted(values, reverse=True)
    cur = _window_rows(records, page.current.window)
    assert values[0] == pytest.approx(pc.max(cur["step_time_ns"]).as_py() / 1e6, rel=1e-9)
    html = render_fleet_html(page)
    assert "ms per step" in html and "step weighted" in html and "tokens/s/GPU" not in html.split('id="factors"')[0]


def test_mfu_page_is_the_tokens_page_scaled(pages):
    tok, mfu = pages["tokens"], pages["mfu"]
    assert mfu.current.value == pytest.approx(tok.current.value / MFU_SCALE, rel=1e-9)
    assert mfu.baseline.value == pytest.approx(tok.baseline.value / MFU_SCALE, rel=1e-9)
    assert [c.evidence.elements for c in mfu.causes] == [c.evidence.elements for c in tok.causes]
    assert mfu.causes[0].lost_gpu_hours.value == pytest.approx(tok.causes[0].lost_gpu_hours.value, rel=1e-9)
    assert mfu.attribution is None and "--metric tokens" in mfu.attribution_note
    assert "Fleet MFU went from" in render_fleet_html(mfu)


def test_a_metric_without_its_columns_is_a_clear_error(records):
    with pytest.raises(InputError) as e:
        _page(records.drop_columns(["steps"]), "step_time")
    assert "--metric step_time" in str(e.value) and "'steps'" in str(e.value)
    with pytest.raises(InputError) as e:
        _page(records.drop_columns(["tokens_per_s_per_gpu", "tokens"]), "tokens")
    assert "tokens_per_step" in str(e.value) and "--metric step_time|mfu" in str(e.value)
    with pytest.raises(InputError, match="unknown metric"):
        _page(records, "latency")


def test_cli_metric_option(records, tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "r.parquet"
    pq.write_table(records, path)
    out = tmp_path / "fleet.html"
    r = CliRunner().invoke(app, ["fleet", "report", "--records", str(path), "--out", str(out), "--metric", "step_time", "--bootstrap", "4"])
    assert r.exit_code == 0, r.output
    assert "ms per step" in out.read_text(encoding="utf-8")
    r = CliRunner().invoke(app, ["fleet", "report", "--records", str(path), "--out", str(out), "--metric", "latency"])
    assert r.exit_code == 2 and "not a fleet metric" in r.output


def test_api_fleet_report_takes_the_metric(records, tmp_path):
    import pyarrow.parquet as pq

    from perfsleuth import api

    path = tmp_path / "r.parquet"
    pq.write_table(records, path)
    page = api.fleet_report(records=path, metric="mfu", bootstrap=2)
    assert page.columns.metric.name == "mfu"
    rows = _window_rows(records, page.current.window)
    by_hand = pc.sum(pc.multiply(rows["mfu"], rows["gpu_seconds"])).as_py() / pc.sum(rows["gpu_seconds"]).as_py()
    assert page.current.value == pytest.approx(by_hand, rel=1e-9)
