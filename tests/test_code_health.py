"""The house rules CI holds: ruff lint and format clean, mypy clean on src/ (strict on model, stats, trace and
segment, as pyproject.toml's ``[tool.mypy]`` says). Each runs the tool as a developer would, from the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["src", "tests", "scripts", "benchmarks", "fuzz"]


def _tool(name: str) -> list[str]:
    """The tool from this venv (next to the interpreter), else from PATH; skip when neither has it."""
    local = Path(sys.executable).with_name(name)
    if local.exists():
        return [str(local)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it comes with the test extra)")
    return [found]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_lint_is_clean() -> None:
    r = _run([*_tool("ruff"), "check", *CHECKED])
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_is_applied() -> None:
    r = _run([*_tool("ruff"), "format", "--check", *CHECKED, "examples"])
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_is_clean_on_src() -> None:
    r = _run([*_tool("mypy")])  # files and strictness come from pyproject.toml
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr
