"""Terminal output never cuts a number: every verb's text at 80 and at 120 columns (``COLUMNS``, as a
user's shell sets it) has no ``…`` beside a digit, and the verbs that draw tables stay inside the width.

Numbers here are chosen wide on purpose (six-digit milliseconds, long group values and kernel names),
so a table that shrank a column would show it."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from perfsleuth.cli import app

ELIDED = re.compile(r"\d…|…\d|\d\.\.\.|\.\.\.\d")
WIDTHS = (80, 120)


def _write(path: Path, header: list[str], rows) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    from perfsleuth.sim.demo import write_demo_job

    d = tmp_path_factory.mktemp("width")
    write_demo_job(d / "job_a", seed=7)
    write_demo_job(d / "job_b", seed=8)
    rng = np.random.default_rng(5)
    groups = ["llama-3.1-405b-instruct-fp8-tp8-pp16-sequence-parallel", "mixtral-8x22b"]
    for name, scale in (("a", 1.0), ("b", 1.07)):
        _write(
            d / f"{name}.csv",
            ["model", "node", "step_time_ms"],
            [
                [g, f"node-{n:03d}", 615144.5 * scale * (1 + 0.01 * rng.standard_normal())]
                for g in groups
                for n in range(5)
                for _ in range(4)
            ],
        )
    _write(
        d / "history.csv", ["tokens_per_s"], [[1234567.8 + (-90000 if i >= 60 else 0) + 900 * rng.standard_normal()] for i in range(120)]
    )
    _write(
        d / "leaves.csv",
        ["driver", "node", "real", "predict"],
        [
            [dr, f"dgx-h100-rack{n:02d}-node{n:03d}", 98765.4 * (0.7 if dr == "550.54.15" and n == 1 else 1.0), 98765.4]
            for dr in ("535.104.12", "550.54.15")
            for n in range(4)
        ],
    )
    return d


def _cli(argv: list[str], width: int) -> str:
    res = CliRunner().invoke(app, argv, env={"COLUMNS": str(width)})
    assert res.exit_code in (0, 1), (argv, res.output)
    return res.stdout


def _check(text: str, width: int, tables: bool, verb: str) -> None:
    assert text.strip(), verb
    cut = [ln for ln in text.splitlines() if ELIDED.search(ln)]
    assert not cut, f"{verb} at {width}: {cut[:3]}"
    if tables:
        wide = [ln for ln in text.splitlines() if len(ln.rstrip()) > width]
        assert not wide, f"{verb} at {width}: {wide[:2]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_every_verb_keeps_its_numbers_whole(inputs, tmp_path, width):
    d = inputs
    rich_verbs = {
        "analyze": ["analyze", str(d / "job_a"), "--workers", "1"],
        "compare": ["compare", str(d / "a.csv"), str(d / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node"],
        "compare --group-by": [
            "compare",
            str(d / "a.csv"),
            str(d / "b.csv"),
            "--metric",
            "step_time_ms",
            "--cluster-by",
            "node",
            "--group-by",
            "model",
        ],
        "diff": ["diff", str(d / "job_a"), str(d / "job_b"), "--workers", "1"],
    }
    plain_verbs = {
        "changes": ["changes", str(d / "history.csv")],
        "localize": ["localize", str(d / "leaves.csv"), "--current", "real", "--baseline", "predict", "--bootstrap", "0"],
        "ingest": ["ingest", str(d / "job_a"), "--store", str(tmp_path / f"store{width}")],
        "formats": ["formats"],
    }
    for verb, argv in rich_verbs.items():
        _check(_cli(argv, width), width, True, verb)
    for verb, argv in plain_verbs.items():
        _check(_cli(argv, width), width, False, verb)


def test_case_verbs_keep_their_numbers_whole(inputs, tmp_path):
    """evaluate and signals: computed once on a small simulated suite, rendered at each width."""
    from perfsleuth.cases.ablation import ablate
    from perfsleuth.cases.evaluate import evaluate
    from perfsleuth.commands import evaluate_cmd, signals_cmd
    from perfsleuth.sim.suite import make_suite

    dirs = make_suite(tmp_path / "cases", 2, 0, workers=1)
    report, ablation = evaluate(dirs, workers=1), ablate(dirs, workers=1)
    for width in WIDTHS:
        for verb, render, result in (("evaluate", evaluate_cmd.render_text, report), ("signals", signals_cmd.render_text, ablation)):
            console = Console(width=width, record=True, highlight=False, file=open("/dev/null", "w"))  # noqa: SIM115
            render(result, console)
            _check(console.export_text(), width, True, verb)


def test_the_check_sees_a_cut_number():
    """The detector itself: Rich's own narrow table does cut numbers, and the pattern catches it."""
    from rich.table import Table

    t = Table()
    for h in ("rank", "step ms p50", "share"):
        t.add_column(h, no_wrap=True)
    t.add_row("0", "615,144.50", "63.8%")
    console = Console(width=20, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(t)
    assert ELIDED.search(console.export_text())


def test_fit_table_wraps_then_stacks():
    """Wide numbers: whole in a table when they fit, in two tables (key column repeated) when not, stacked
    as header-value pairs when not even that fits — and the values are the same strings in every form."""
    from perfsleuth.report.fit_table import Col, FitTable

    t = FitTable([Col("rank"), Col("kernel", numeric=False), *(f"metric {i}" for i in range(8))], title="T")
    values = [f"{615144.5 + i:,.2f}" for i in range(8)]
    t.add_row("3", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x256x64_warpgroupsize2x1x1", *values)
    for width, tables in ((200, 1), (80, 2), (24, 0)):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(t)
        text = console.export_text()
        assert all(v in text for v in values), (width, text)
        assert text.count("rank") == max(tables, 1), (width, text)
        assert max(len(ln.rstrip()) for ln in text.splitlines()) <= width
