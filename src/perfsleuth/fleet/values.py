"""Values in a records or leaf table that are no measurement, found in the engine and counted per column.

The engine twin of ``model.usable``: a NaN, an infinity or a value beyond ±1e300 (a float that
overflowed, a sentinel) in one run would make every sum it enters NaN or infinite, and a fleet page
or a culprit search built on it would say nothing. So the table inputs read such values as missing,
and say per column how many rows held one (``values_unusable`` caveats) instead of failing with
"the totals are not finite" or charting an infinity. A quantity that cannot be negative (GPU-seconds,
tokens, steps, a step time) is unusable below 0 too, and a time is unusable outside the plausible
epoch range (2015..2100, ``model.clock.EPOCH_RANGE_NS``). Every count comes from one aggregate query.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import ibis
import ibis.expr.types as ir

from perfsleuth.engine import to_arrow
from perfsleuth.errors import Caveat
from perfsleuth.model import MAX_MEASUREMENT
from perfsleuth.model.clock import EPOCH_RANGE_NS

NON_NEGATIVE = frozenset(
    {"gpu_seconds", "gpu_s", "tokens", "tokens_per_s_per_gpu", "steps", "step_time_ns", "gpus", "tokens_per_step", "model_flops_per_step"}
)
"""Records columns that are amounts or durations: a negative value in them is damage, not a measurement."""

NOT_A_NUMBER = "NaN, infinity or a value beyond ±1e300"
NOT_AN_AMOUNT = "NaN, infinity, a negative value or one beyond ±1e300"
NOT_A_TIME = "a time outside 2015..2100 as epoch nanoseconds"


def unusable(value: ir.NumericValue, *, non_negative: bool = False) -> ir.BooleanValue:
    """True where a present value is no measurement (False where it is null: missing is not damage)."""
    v = value.cast("float64")
    # ``v - v != 0`` too: DuckDB 2.0 folds ISNAN/ISINF to false from Parquet statistics, which leave NaN out,
    # when it reads several files by name (a store); the difference is NaN for NaN and ±inf, and not folded
    bad = v.isnan() | v.isinf() | ((v - v) != 0) | (v.abs() > MAX_MEASUREMENT)
    if non_negative:
        bad = bad | (v < 0)
    return bad.fill_null(False)


def implausible_time(value: ir.IntegerValue) -> ir.BooleanValue:
    """True where an epoch-ns time is present but no wall clock gives it (before 2015, after 2100)."""
    return ((value < EPOCH_RANGE_NS[0]) | (value > EPOCH_RANGE_NS[1])).fill_null(False)


def column_check(table: ir.Table, column: str) -> tuple[ir.BooleanValue, str]:
    """The unusable-value test for a records column and the words that say what it caught."""
    return unusable(table[column], non_negative=column in NON_NEGATIVE), what_is_unusable(column)


def what_is_unusable(column: str) -> str:
    """The words for what ``column_check`` catches in ``column``."""
    return NOT_AN_AMOUNT if column in NON_NEGATIVE else NOT_A_NUMBER


def count_flags(table: ir.Table, flags: Mapping[str, ir.BooleanValue]) -> dict[str, int]:
    """How many rows each flag is true on, in one query."""
    if not flags:
        return {}
    aggs = {f"bad_{i}": ibis.ifelse(flag, 1, 0).sum() for i, flag in enumerate(flags.values())}
    row = to_arrow(table.aggregate(**aggs)).to_pylist()[0]
    return {name: int(row[f"bad_{i}"] or 0) for i, name in enumerate(flags)}


def unusable_caveat(column: str, rows: int, what: str, effect: str, source: str | Path | None, unit: str = "row") -> Caveat:
    """One caveat naming the column, how many rows, what they held and what was done with them."""
    plural = "" if rows == 1 else "s"
    return Caveat(
        "values_unusable",
        f"column {column}: {rows} {unit}{plural} held {what} and {'was' if rows == 1 else 'were'} {effect}",
        None if source is None else str(source),
    )
