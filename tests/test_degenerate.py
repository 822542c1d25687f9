"""Degenerate data everywhere: every public analysis function, given empty, single-element, constant or
all-NaN input, either returns a result that says what limits it (a caveat, "inconclusive", an empty
answer with its reason) or raises ``PerfsleuthError`` with a message — never ZeroDivisionError,
IndexError, a numpy RuntimeWarning (turned into an error here) or a NaN that no caveat explains.

Each case is the smallest call that reaches the function's arithmetic; the kinds of input are built
the same way for all of them so a new function joins by adding one line to ``CASES``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth import engine
from perfsleuth.errors import PerfsleuthError
from perfsleuth.segment.localize import localize
from perfsleuth.segment.mixrate import LeafSpec
from perfsleuth.stats import quality, summary
from perfsleuth.stats.changes import changes, level_interval
from perfsleuth.stats.compare import compare, compare_groups

KINDS = ("empty", "single", "constant", "all_nan")


def values(kind: str, n: int = 30) -> np.ndarray:
    return {"empty": np.array([], dtype=float), "single": np.array([3.0]), "constant": np.full(n, 3.0),
            "all_nan": np.full(n, np.nan)}[kind]


def _arms(kind: str) -> tuple[pa.Table, pa.Table]:
    x = values(kind)
    node = [f"n{i % 4}" for i in range(len(x))]
    table = pa.table({"node": pa.array(node, pa.string()), "model": pa.array(["m"] * len(x), pa.string()),
                      "step_time_ms": pa.array(x, pa.float64())})
    return table, table


def _leaves(kind: str) -> Any:
    x = values(kind, n=8)
    t = pa.table({"node": pa.array([f"n{i}" for i in range(len(x))], pa.string()), "real": pa.array(x, pa.float64()),
                  "predict": pa.array(x, pa.float64())})
    return engine.table(engine.connect("duckdb"), t)


def _has_nan(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isnan(obj)
    if isinstance(obj, dict):
        return any(_has_nan(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(_has_nan(v) for v in obj)
    return False


def _caveats(result: Any) -> list[Any]:
    if isinstance(result, list):
        return result
    return list(getattr(result, "caveats", ()) or ())


def _stated(result: Any) -> bool:
    """The result says that the input limited it."""
    if result is None:  # "no answer" is an answer for helpers documented to return None
        return True
    verdict = getattr(result, "verdict", None)
    return bool(_caveats(result)) or verdict == "inconclusive"


CASES: dict[str, Callable[[str], Any]] = {
    "stats.compare.compare": lambda k: compare(*_arms(k), "step_time_ms"),
    "stats.compare.compare(cluster_by)": lambda k: compare(*_arms(k), "step_time_ms", cluster_by=["node"]),
    "stats.compare.compare_groups": lambda k: compare_groups(*_arms(k), ["step_time_ms"], ["model"]),
    "stats.changes.changes": lambda k: changes(values(k)),
    "stats.quality.check_samples": lambda k: quality.check_samples(values(k)),
    "stats.quality.check_series": lambda k: quality.check_series(values(k)),
    "segment.localize.localize": lambda k: localize(_leaves(k), LeafSpec(("node",), "real", "predict"), bootstrap=0),
}

# Plain answers that are complete for that input, each with the reason it needs no caveat (checked, not assumed).
PLAIN_ANSWERS: dict[tuple[str, str], tuple[str, Callable[[Any], bool]]] = {
    ("stats.compare.compare_groups", "empty"): ("no group exists, so nothing is compared", lambda r: r == []),
    ("stats.quality.check_samples", "constant"): ("equal values are not a quality problem; compare states what they "
                                                  "limit", lambda r: r == []),
    ("stats.quality.check_series", "constant"): ("a flat history has no warm-up or outlier", lambda r: r == []),
    ("segment.localize.localize", "single"): ("the fleet did not change: nothing to localize",
                                              lambda r: r.mix.baseline == r.mix.current and not r.culprits),
    ("segment.localize.localize", "constant"): ("the fleet did not change: nothing to localize",
                                                lambda r: r.mix.baseline == r.mix.current and not r.culprits),
}

# helpers with a documented "no answer" (None) or a plain number for degenerate input
HELPERS: dict[str, Callable[[str], Any]] = {
    "stats.summary.median_interval": lambda k: summary.median_interval(values(k), "ms"),
    "stats.quality.bimodal_split": lambda k: quality.bimodal_split(values(k)),
    "stats.quality.detect_warmup": lambda k: quality.detect_warmup(values(k)),
    "stats.quality.robust_scale": lambda k: quality.robust_scale(values(k)),
    "stats.changes.level_interval": lambda k: level_interval(values(k), "ms", 1.0),
}


def _run(call: Callable[[], Any]) -> tuple[Any, PerfsleuthError | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            return call(), None
        except PerfsleuthError as exc:
            return None, exc


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(CASES))
def test_analysis_states_what_degenerate_input_limits(name: str, kind: str) -> None:
    result, error = _run(lambda: CASES[name](kind))
    if error is not None:
        assert str(error).strip(), "an error must say why"
        return
    if (name, kind) in PLAIN_ANSWERS:
        reason, holds = PLAIN_ANSWERS[name, kind]
        assert holds(result), f"{name} on {kind} input: expected a plain answer ({reason}), got {result!r}"[:500]
        return
    items = result if isinstance(result, list) and result and not hasattr(result[0], "code") else [result]
    for item in items:
        assert _stated(item), f"{name} on {kind} input returned a result without a caveat: {item!r}"[:500]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(HELPERS))
def test_helpers_return_no_silent_nan_on_degenerate_input(name: str, kind: str) -> None:
    result, error = _run(lambda: HELPERS[name](kind))
    if error is not None:
        assert str(error).strip()
        return
    as_json = result.to_json() if hasattr(result, "to_json") else result
    assert not _has_nan(as_json), f"{name} on {kind} input returned NaN: {as_json!r}"
