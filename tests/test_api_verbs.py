"""Every verb is a function in perfsleuth.api, listed in ``__all__``, answering what the command answers."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

import perfsleuth.api as api
from perfsleuth.cli import app


def test_all_lists_a_function_per_verb():
    verbs = {"analyze", "compare", "changes", "localize", "diff", "ingest", "evaluate", "signals", "make_cases", "fleet_report"}
    verbs |= {"explain", "verify", "watch"}
    assert verbs <= set(api.__all__)
    assert all(callable(getattr(api, name)) for name in api.__all__)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("api")
    rng = np.random.default_rng(2)
    for name, mu in (("a", 50.0), ("b", 56.0)):
        with (d / f"{name}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["node", "step_time_ms"])
            w.writerows([f"n{n}", mu * (1 + 0.01 * rng.standard_normal())] for n in range(4) for _ in range(6))
    with (d / "h.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([["v"], *([5 + (2 if i >= 40 else 0) + 0.3 * rng.standard_normal()] for i in range(80))])
    return d


def _cli_json(*argv: str) -> dict:
    res = CliRunner().invoke(app, [*argv, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout)


def test_compare_and_changes_functions_answer_as_the_commands(files):
    got = api.compare(files / "a.csv", files / "b.csv", "step_time_ms", cluster_by=["node"])
    cli = _cli_json("compare", str(files / "a.csv"), str(files / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node")
    assert [r.verdict for r in got] == [c["verdict"] for c in cli["comparisons"]] == ["regression"]
    assert got[0].ratio.value == pytest.approx(cli["comparisons"][0]["ratio"]["value"])
    doc = api.changes(files / "h.csv")
    assert doc == _cli_json("changes", str(files / "h.csv"))
    assert [cp["index"] for cp in doc["series"][0]["change_points"]] == [40]  # the shift built into the history


def test_a_report_renders_in_a_notebook_and_as_an_arrow_table(tmp_path):
    from perfsleuth.sim.demo import write_demo_job

    write_demo_job(tmp_path / "job", seed=7)
    report = api.analyze([tmp_path / "job"], workers=1)
    page = report._repr_html_()
    assert page.lstrip().lower().startswith("<!doctype html") and "<script" not in page.lower()
    table = report.findings_table()
    assert table.num_rows == len(report.diagnosis.findings) + len(report.diagnosis.not_assessed)
    assert set(table["fault"].to_pylist()) >= {f.fault for f in report.diagnosis.findings}


def test_an_option_error_from_ingest_says_where_once(tmp_path):
    """An unknown engine is an option, not a file: the error names ``<input>`` once, with the valid choices."""
    from perfsleuth.errors import InputError

    with pytest.raises(InputError) as info:
        api.ingest([str(tmp_path)], store=str(tmp_path / "store"), engine="ray")
    assert str(info.value).count("<input>") == 1 and "unknown engine 'ray'" in str(info.value) and "spark" in str(info.value)
    assert not (tmp_path / "store").exists()
