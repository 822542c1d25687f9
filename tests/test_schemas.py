"""Every JSON contract has a schema shipped in the package, and what the verbs write meets it: closed
top-level keys (an undocumented key fails), integer nanoseconds under every ``*_ns`` key."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from perfsleuth.cli import app
from perfsleuth.schemas import CONTRACTS, load, validate

REAL = Path(__file__).parent / "data"


def _ns_floats(doc, path="", under=False) -> list[str]:
    """Paths of numbers under a *_ns key that are not whole (the contract's promise, checked independently)."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _ns_floats(v, f"{path}.{k}", under or k.endswith("_ns"))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _ns_floats(v, f"{path}[{i}]", under)
    elif under and isinstance(doc, float):
        out.append(f"{path}={doc!r}")
    return out


def test_every_schema_is_a_valid_draft_2020_12_schema_in_the_package():
    for name in CONTRACTS:
        schema = load(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"]["const"] == f"perfsleuth.{name}/1"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict]:
    from perfsleuth.sim.demo import write_demo_job
    from perfsleuth.sim.suite import make_suite

    d = tmp_path_factory.mktemp("schemas")
    write_demo_job(d / "job_a", seed=7)
    write_demo_job(d / "job_b", seed=8)
    rng = np.random.default_rng(1)
    for name, mu in (("a", 100.0), ("b", 104.0)):
        with (d / f"{name}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["model", "node", "step_time_ms"])
            w.writerows([m, f"n{n}", mu * (1 + 0.01 * rng.standard_normal())] for m in ("x", "y") for n in range(4) for _ in range(5))
    with (d / "h.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([["v"], *([10 + (3 if i > 50 else 0) + rng.standard_normal()] for i in range(100))])
    with (d / "leaves.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["driver", "node", "real", "predict"])
        w.writerows([dr, f"n{n}", 100 * (0.7 if dr == "550" and n == 1 else 1.0), 100] for dr in ("535", "550") for n in range(4))
    cases = make_suite(d / "cases", 2, 0, workers=1)
    runner = CliRunner()

    def run(*argv: str) -> dict:
        res = runner.invoke(app, [*argv, "--format", "json"])
        assert res.exit_code in (0, 1), res.output
        return json.loads(res.stdout)

    ncu = next((REAL / "real" / "ncu").iterdir())
    return {
        "analysis (simulated 4 ranks)": run("analyze", str(d / "job_a"), "--workers", "1"),
        "analysis (real H200 trace)": run("analyze", str(REAL / "real_h200" / "torch" / "healthy")),
        "analysis (ncu alone)": run("analyze", str(ncu)),
        "compare": run("compare", str(d / "a.csv"), str(d / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node"),
        "compare --group-by": run(
            "compare", str(d / "a.csv"), str(d / "b.csv"), "--metric", "step_time_ms", "--cluster-by", "node", "--group-by", "model"
        ),
        "changes": run("changes", str(d / "h.csv")),
        "localize": run("localize", str(d / "leaves.csv"), "--current", "real", "--baseline", "predict", "--bootstrap", "0"),
        "diff": run("diff", str(d / "job_a"), str(d / "job_b"), "--workers", "1"),
        "evaluation": run("evaluate", *map(str, cases), "--workers", "1"),
        "case (simulated)": json.loads((cases[0] / "case.json").read_text()),
        "case (real H200)": json.loads((REAL / "real_h200" / "torch" / "gc_pause" / "case.json").read_text()),
    }


def test_every_output_meets_its_schema_with_integer_nanoseconds(outputs):
    for name, doc in outputs.items():
        validate(doc)
        assert not _ns_floats(doc), (name, _ns_floats(doc)[:5])


def test_the_schemas_refuse_what_the_contract_does_not_promise(outputs):
    doc = copy.deepcopy(outputs["analysis (simulated 4 ranks)"])
    doc["gpu_span"] = {}  # an undocumented top-level key
    with pytest.raises(jsonschema.ValidationError, match="gpu_span"):
        validate(doc)
    doc = copy.deepcopy(outputs["analysis (simulated 4 ranks)"])
    doc["ranks"][0]["step_time_ns"]["median"] = 615144500.5  # not a whole nanosecond
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    doc = copy.deepcopy(outputs["compare"])
    doc["comparisons"][0]["verdict"] = "worse"
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_versions_are_readable_in_the_analysis(outputs):
    run = outputs["analysis (real H200 trace)"]["run"]
    assert run["cuda"] == "13000" and run["software"]["cuda_runtime"] == "13.0"  # raw as written, and readable
    assert run["software"]["nvidia_driver"] is None  # a PyTorch trace does not name the NVIDIA driver
