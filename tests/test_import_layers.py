"""The import graph flows one way, as ../shared/DESIGN.md draws it: adapters and the store stand on the model,
analyses on the model, detectors on the analyses, renderers on the findings, and the commands on top.

Read from the source with ``ast`` (every import, module level or inside a function), so a lazy import that runs
against the flow fails here as surely as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "perfsleuth"

# Bottom to top. A unit may import itself and any unit in a lower layer; units in one layer do not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "files", "lazy_import", "progress", "schemas", "taxonomy", "__init__"),
    ("engine",),
    ("model",),
    ("ingest", "store"),
    ("stats",),
    ("trace",),
    ("metrics",),
    ("segment",),
    ("diagnose",),
    ("fleet",),
    ("report",),
    ("pipeline",),
    ("cases",),
    ("sim",),
    ("commands",),
    ("api",),
    ("cli",),
    ("__main__",),
]
LEVEL = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# An analysis never reads a file format: only the pipeline and what stands on it drive the adapters.
NEVER_IMPORT_INGEST = ("stats", "trace", "metrics", "segment", "diagnose", "fleet", "report")
# The runtime never needs the simulators: only the demo and ``cases make`` (commands, api, cli) reach them.
RUNTIME = ("pipeline", "ingest", "store", "stats", "trace", "metrics", "segment", "diagnose", "fleet", "report", "cases")
SIMULATING_COMMANDS = {"commands/cases_cmd.py", "commands/fleet_demo.py"}


def _unit(module: str) -> str:
    """``perfsleuth.trace.job`` -> ``trace``; ``perfsleuth`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str | None = None) -> list[tuple[int, str]]:
    """(line, imported perfsleuth module) for every import in the file; ``from perfsleuth import x`` names x."""
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "perfsleuth"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "perfsleuth":
                continue
            if target == "perfsleuth":
                out += [
                    (node.lineno, f"perfsleuth.{a.name}")
                    for a in node.names
                    if (PACKAGE / a.name).exists() or (PACKAGE / f"{a.name}.py").exists()
                ]
                out += [
                    (node.lineno, "perfsleuth")
                    for a in node.names
                    if not ((PACKAGE / a.name).exists() or (PACKAGE / f"{a.name}.py").exists())
                ]
            else:
                out.append((node.lineno, target))
    return out


def _edges() -> list[tuple[str, int, str, str, str]]:
    """(file, line, importing unit, imported unit, imported module) for every import between two units."""
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit(_module_name(path)) if path.parent != PACKAGE or path.name != "__init__.py" else "__init__"
        for line, target in _imports(path):
            dst = _unit(target)
            if dst != src:
                edges.append((str(path.relative_to(PACKAGE)), line, src, dst, target))
    return edges


def test_every_unit_has_a_layer() -> None:
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert units - set(LEVEL) == set(), "a new module or subpackage needs a place in LAYERS"


def test_imports_flow_downwards_only() -> None:
    against = [f"{f}:{line}: {a} imports {m} ({b} is not below {a})" for f, line, a, b, m in _edges() if LEVEL[b] >= LEVEL[a]]
    assert against == [], "\n".join(against)


@pytest.mark.parametrize("unit", NEVER_IMPORT_INGEST)
def test_analyses_never_read_a_file_format(unit: str) -> None:
    assert [f"{f}:{line}: {m}" for f, line, a, b, m in _edges() if a == unit and b == "ingest"] == []


@pytest.mark.parametrize("unit", RUNTIME)
def test_runtime_never_imports_the_simulators(unit: str) -> None:
    assert [f"{f}:{line}: {m}" for f, line, a, b, m in _edges() if a == unit and b == "sim"] == []


def test_only_the_demo_and_cases_make_reach_the_simulators() -> None:
    reach = {f for f, _, a, b, _ in _edges() if b == "sim" and a == "commands"}
    assert reach <= SIMULATING_COMMANDS


def test_the_store_depends_only_on_model_engine_and_errors() -> None:
    assert {b for _, _, a, b, _ in _edges() if a == "store"} <= {"model", "engine", "errors", "files", "__init__", "progress"}


def test_the_walk_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function and a relative import are both seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from perfsleuth.report import text_report\n    from ..ingest import kineto\n")
    found = {_unit(m) for _, m in _imports(probe, "perfsleuth.trace.probe")}
    assert found == {"report", "ingest"}
