"""The fault taxonomy is part of the package: one module defines every id, the detectors, cases and
findings use only its ids, ``perfsleuth explain`` prints its entries, and docs/taxonomy.md is its page."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from perfsleuth import taxonomy
from perfsleuth.cli import app
from perfsleuth.schemas import validate

REPO = Path(__file__).resolve().parents[1]

# The ids as they stood before the module existed (cases/case.py's literal list, issue 12's two added):
# written out here so that renaming or dropping one fails a test, as the ids are a promise to users.
STABLE_IDS = {
    *["exposed_communication", "poor_overlap", "pipeline_bubble", "sequence_imbalance", "dataloader_stall", "checkpoint_stall"],
    *["host_launch_bound", "cpu_contention", "small_kernels", "gc_pause", "recompilation", "allocator_churn", "memory_fragmentation"],
    *["straggler_rank", "slow_node", "degraded_nvlink", "degraded_network", "pcie_downtraining", "thermal_throttling", "power_capping"],
    *["clock_capping", "gpu_hardware_errors", "nccl_algorithm_selection", "nccl_transport_fallback", "collective_hang"],
    *["numeric_anomaly", "restart_overhead", "kv_cache_preemption", "prefill_decode_interference", "low_batch_occupancy"],
    *["request_queueing", "host_bound_serving", "memory_bound_decode", "regression", "unattributed_host_stall", "unattributed_idle"],
}


def _words(text: str) -> str:
    """Text with its line wrapping and indentation undone, to find a wrapped sentence in the output."""
    return " ".join(text.split())


def test_the_ids_are_the_stable_ones_and_the_case_format_uses_them():
    from perfsleuth.cases.case import TAXONOMY_IDS

    assert taxonomy.IDS == STABLE_IDS
    assert TAXONOMY_IDS == taxonomy.IDS
    assert len({f.id for f in taxonomy.FAULTS}) == len(taxonomy.FAULTS) == len(STABLE_IDS)


def test_every_entry_is_complete_and_uses_the_vocabulary():
    refs = [f.ref for f in taxonomy.FAULTS if f.ref]
    assert refs == [f"T{i}" for i in range(1, 28)] + [f"I{i}" for i in range(1, 7)]  # the catalog's rows, in order
    for f in taxonomy.FAULTS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", f.id), f.id
        assert f.layer in taxonomy.LAYERS and f.kind in taxonomy.KINDS, f.id
        assert f.title and f.meaning and f.fix, f.id
        assert f.direct_evidence and all(f.direct_evidence), f.id
        assert f.signals and all(f.signals), f.id
    assert taxonomy.BY_ID["memory_bound_decode"].kind == taxonomy.REGIME
    assert {f.id for f in taxonomy.FAULTS if f.kind == taxonomy.UNATTRIBUTED} == {"unattributed_host_stall", "unattributed_idle"}


def test_every_told_apart_from_target_is_another_class():
    for f in taxonomy.FAULTS:
        targets = [d.fault for d in f.told_apart_from]
        assert set(targets) <= taxonomy.IDS, (f.id, set(targets) - taxonomy.IDS)
        assert f.id not in targets and len(targets) == len(set(targets)), f.id
        assert all(d.how for d in f.told_apart_from), f.id


def test_every_detector_names_a_taxonomy_id():
    from perfsleuth.diagnose.registry import load_detectors

    faults = {d.fault for d in load_detectors().values()}
    assert faults <= taxonomy.IDS, faults - taxonomy.IDS
    # every class a detector decides is there; the two without one are a cause no input of perfsleuth's shows
    # yet (host CPU counters) and the fleet's starting point, which compare/changes/localize answer
    assert taxonomy.IDS - faults == {"cpu_contention", "regression"}


def test_registering_a_detector_for_an_unknown_id_raises():
    from perfsleuth.diagnose.registry import DETECTORS, detector, load_detectors

    before = dict(load_detectors())
    with pytest.raises(ValueError, match="not a fault id of perfsleuth.taxonomy"):
        detector("exposed_comunication", needs=("a trace",), evidence=("gpu_kernels",))
    assert before == DETECTORS


def test_every_committed_case_labels_taxonomy_ids():
    labels = {f["fault"] for p in (REPO / "tests" / "data").rglob("case.json") for f in json.loads(p.read_text()).get("faults", [])}
    assert labels and labels <= taxonomy.IDS, labels - taxonomy.IDS


def test_explain_prints_the_meaning_evidence_and_distinctions_of_a_known_id():
    entry = taxonomy.BY_ID["allocator_churn"]
    res = CliRunner().invoke(app, ["explain", "allocator_churn"])
    assert res.exit_code == 0, res.output
    out = _words(res.stdout)
    assert out.startswith(f"allocator_churn — {entry.title}")
    for text in (entry.meaning, *entry.direct_evidence, *entry.signals, entry.fix):
        assert _words(text) in out
    for d in entry.told_apart_from:
        assert _words(f"{d.fault}: {d.how}") in out


def test_explain_takes_a_catalog_reference():
    by_ref = CliRunner().invoke(app, ["explain", "t12"])
    by_id = CliRunner().invoke(app, ["explain", "allocator_churn"])
    assert by_ref.exit_code == 0 and by_ref.stdout == by_id.stdout


def test_explain_of_an_unknown_id_exits_2_with_close_matches_and_the_valid_ids():
    res = CliRunner().invoke(app, ["explain", "exposed-comunication"])
    assert res.exit_code == 2
    assert res.stdout == ""
    err = res.stderr
    assert re.search(r"Did you mean: exposed_communication\b", err)
    valid = err.split("Valid ids:", 1)[1]
    assert all(i in valid for i in taxonomy.IDS)
    assert taxonomy.close_matches("gcpause") == ["gc_pause"]
    assert taxonomy.close_matches("zzzz") == []


def test_explain_shows_the_users_string_inert():
    res = CliRunner().invoke(app, ["explain", "gc\x1b]0;owned\x07_pause\u202e\n"])
    assert res.exit_code == 2
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", res.stderr)
    assert "gc?]0;owned?_pause" in res.stderr


def test_explain_without_an_id_lists_every_id_with_its_title():
    res = CliRunner().invoke(app, ["explain"])
    assert res.exit_code == 0
    rows = [line.split() for line in res.stdout.splitlines()[1 : 1 + len(taxonomy.FAULTS)]]
    assert [r[0] for r in rows] == [f.id for f in taxonomy.FAULTS]
    for f in taxonomy.FAULTS:
        assert re.search(rf"^{f.id}\s+{re.escape(f.layer)}\s+{re.escape(f.title)}$", res.stdout, re.M), f.id


def test_explain_json_is_the_module_entry_and_meets_its_schema():
    res = CliRunner().invoke(app, ["explain", "straggler_rank", "--format", "json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    validate(doc)
    assert doc == {"schema": "perfsleuth.explain/1", "faults": [taxonomy.BY_ID["straggler_rank"].to_json()], "sub_causes": []}
    every = json.loads(CliRunner().invoke(app, ["explain", "-f", "json"]).stdout)
    validate(every)
    assert [f["id"] for f in every["faults"]] == [f.id for f in taxonomy.FAULTS]
    bad = copy.deepcopy(doc)
    bad["faults"][0]["kind"] = "guess"  # the schema can fail
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


def test_explain_answers_without_loading_an_engine():
    probe = (
        "import sys\nfrom perfsleuth.cli import app\nsys.argv = ['perfsleuth', 'explain', 'gc_pause']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'pandas', 'pyarrow', 'duckdb', 'ibis', 'scipy', 'rich'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().endswith("[]"), done.stdout[-300:]


def test_the_docs_page_is_generated_from_the_module():
    page = (REPO / "docs" / "taxonomy.md").read_text(encoding="utf-8")
    assert page == taxonomy.render_markdown(), "docs/taxonomy.md is stale: run .venv/bin/python scripts/gen_taxonomy_doc.py"
    for f in taxonomy.FAULTS:
        assert f"\n## {f.id}\n" in page


def test_the_docs_page_renders_the_entries_literally():
    """Entries quote op and variable names (``__next__``, ``NCCL_*``): on the page they stay text, not emphasis."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(taxonomy.render_markdown())
    assert html.count("<strong>") == len(taxonomy.FAULTS)  # a bold title per class
    assert html.count("<h2>") == len(taxonomy.FAULTS) + 1  # a heading per class, and the sub-causes' section
    assert "<em>" not in html and html.count("<table>") == 2  # the classes' index and the sub-causes
    assert "enumerate(DataLoader)#...__next__" in html and "NCCL_* variables" in html


def test_the_api_function_answers_as_the_command():
    from perfsleuth import api
    from perfsleuth.errors import InputError

    assert "explain" in api.__all__
    assert api.explain("T14") is taxonomy.BY_ID["straggler_rank"]
    assert api.explain() == taxonomy.FAULTS
    with pytest.raises(InputError, match="did you mean gc_pause"):
        api.explain("gc-pause")


def test_the_evaluation_abbreviates_every_class():
    """The confusion matrix's column labels: a class added to the taxonomy needs one, and no label names a retired id."""
    from perfsleuth.commands.evaluate_cmd import SHORT

    assert set(SHORT) - {"none"} == taxonomy.IDS
    assert len(set(SHORT.values())) == len(SHORT)


def _alternative_names_in_source() -> dict[str, str]:
    """Every literal name a detector gives an ``Alternative``, with where it is written: read from the source, so a
    branch no test runs is checked too."""
    import ast

    names: dict[str, str] = {}
    for path in sorted((REPO / "src" / "perfsleuth").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "id", getattr(func, "attr", None)) == "Alternative":
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names[first.value] = f"{path.relative_to(REPO)}:{node.lineno}"
    return names


def test_every_alternative_a_detector_names_is_a_class_or_a_sub_cause():
    names = _alternative_names_in_source()
    assert len(names) > 30  # the walk sees the detectors' alternatives
    unknown = {n: where for n, where in names.items() if n not in taxonomy.ALTERNATIVE_IDS}
    assert not unknown, unknown
    # every sub-cause is named by some detector, and narrows a class without shadowing one
    assert {c.id for c in taxonomy.SUB_CAUSES} <= set(names)
    for c in taxonomy.SUB_CAUSES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", c.id) and c.id not in taxonomy.IDS, c.id
        assert c.parent in taxonomy.IDS and c.meaning and c.decided_by, c.id


def test_an_alternative_naming_an_unknown_cause_or_verdict_raises():
    from perfsleuth.model import Alternative

    assert Alternative("host_sync", "ruled_out", "r").fault == "host_sync"
    with pytest.raises(ValueError, match="not a fault or sub-cause id"):
        Alternative("idle link power saving", "ruled_out", "prose is not an id")
    with pytest.raises(ValueError, match="verdict 'maybe'"):
        Alternative("gc_pause", "maybe", "r")


def test_explain_prints_a_sub_cause_with_its_class():
    sub = taxonomy.SUB_CAUSE_BY_ID["fp16_overflow"]
    res = CliRunner().invoke(app, ["explain", "fp16_overflow"])
    assert res.exit_code == 0, res.output
    out = _words(res.stdout)
    assert out.startswith("fp16_overflow — a sub-cause of numeric_anomaly")
    assert _words(sub.meaning) in out and _words(sub.decided_by) in out
    doc = json.loads(CliRunner().invoke(app, ["explain", "fp16_overflow", "-f", "json"]).stdout)
    validate(doc)
    assert doc["faults"] == [taxonomy.BY_ID["numeric_anomaly"].to_json()] and doc["sub_causes"] == [sub.to_json()]
    parent = CliRunner().invoke(app, ["explain", "numeric_anomaly", "-f", "json"]).stdout
    assert [c["id"] for c in json.loads(parent)["sub_causes"]] == ["data_bug", "fp16_overflow", "optimizer_instability"]
    from perfsleuth import api

    assert api.explain("loader_jitter") is taxonomy.SUB_CAUSE_BY_ID["loader_jitter"]
    assert taxonomy.close_matches("loader-jiter") == ["loader_jitter"]
