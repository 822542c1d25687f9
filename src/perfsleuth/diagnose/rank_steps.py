"""The job's rank-step table as numpy columns: one row per (rank, step), with per-step and per-rank reductions.

Every trace detector reads this table (``JobContext.rs``) and reduces it over ranks per step (the job
waits for its worst rank) or over steps per rank. These are a handful of group reductions on a table
of ranks x steps rows, so they are numpy on the columns (``trace.keyed``) rather than a data frame
library: ``perfsleuth analyze`` then never loads pandas, which cost it 0.2 s of its start-up, about a
sixth of its whole run on eight 54 MB traces.

A subset of rows (``rows``) keeps the job's step and rank numbering, so what a detector reduces over
a few ranks still lines up with the job's steps: a step without rows in the subset gets the
reduction's empty value (NaN; 0 for sums and counts), as a pandas group-by re-indexed to the job's
steps gives it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.trace import keyed


@dataclass(frozen=True, slots=True)
class RankSteps:
    """Columns of equal length (``columns``), the job's sorted step ids and ranks, and per row the
    index of its step and its rank among them."""

    columns: Mapping[str, np.ndarray]
    steps: np.ndarray
    ranks: np.ndarray
    step_of: np.ndarray
    rank_of: np.ndarray

    @classmethod
    def of(cls, columns: Mapping[str, np.ndarray]) -> RankSteps:
        """The table of these columns (which hold ``rank`` and ``step``), numbered by its own steps and ranks."""
        steps, step_of = keyed.distinct(columns["step"])
        ranks, rank_of = keyed.distinct(columns["rank"])
        return cls(dict(columns), steps, ranks, step_of, rank_of)

    @classmethod
    def empty_table(cls) -> RankSteps:
        none = np.zeros(0, dtype=np.int64)
        return cls({"rank": none, "step": none}, none, none, none, none)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __len__(self) -> int:
        return len(self.step_of)

    @property
    def empty(self) -> bool:
        return len(self) == 0

    def with_columns(self, **columns: np.ndarray) -> RankSteps:
        """A copy with these columns added or replaced (the shared table itself never changes)."""
        return RankSteps({**self.columns, **columns}, self.steps, self.ranks, self.step_of, self.rank_of)

    def rows(self, mask: np.ndarray) -> RankSteps:
        """The rows where ``mask`` holds, numbered by the job's steps and ranks still."""
        return RankSteps({k: v[mask] for k, v in self.columns.items()}, self.steps, self.ranks, self.step_of[mask], self.rank_of[mask])

    def of_ranks(self, ranks: Iterable[int]) -> RankSteps:
        return self.rows(np.isin(self.columns["rank"], np.fromiter(ranks, dtype=np.int64)))

    def values(self, column: str | np.ndarray) -> np.ndarray:
        return self.columns[column] if isinstance(column, str) else column

    def per_step(self, column: str | np.ndarray, how: str = "max") -> np.ndarray:
        """Per job step (``steps``), a reduction over its rows (``keyed.reduce``)."""
        return keyed.reduce(self.step_of, self.values(column), len(self.steps), how)

    def per_rank(self, column: str | np.ndarray, how: str = "sum") -> np.ndarray:
        """Per job rank (``ranks``), a reduction over its rows (``keyed.reduce``)."""
        return keyed.reduce(self.rank_of, self.values(column), len(self.ranks), how)

    def present_steps(self) -> np.ndarray:
        """Indices (into ``steps``) of the steps these rows have, in step order."""
        return np.unique(self.step_of)

    def grid(self, column: str | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Steps x ranks: the column's first value on each (step, rank) of these rows, over the job's
        steps and the ranks these rows have (returned beside it); NaN where a rank has no such step."""
        present = np.unique(self.rank_of)
        where = np.searchsorted(present, self.rank_of)
        out = np.full((len(self.steps), len(present)), np.nan)
        rows = np.arange(len(self))[::-1]  # the first row of a (step, rank) is written last
        out[self.step_of[rows], where[rows]] = self.values(column).astype(float)[rows]
        return out, self.ranks[present]


def left_join(
    left: Mapping[str, np.ndarray], right: pa.Table | Mapping[str, np.ndarray], *, skip: Iterable[str] = ()
) -> dict[str, np.ndarray]:
    """``left``'s columns and, per row, the columns of the ``right`` row with the same (rank, step): a
    left join where ``right`` has one row per (rank, step), as the signals and waits tables do (with
    repeated keys one of the rows is taken, where pandas would repeat the left row). Rows without a
    match get NaN (integer columns become floats), as pandas' left merge gives them; a column with
    missing values in ``right`` does too."""
    right_cols = numpy_columns(right) if isinstance(right, pa.Table) else dict(right)
    key = keyed.group_ids(
        np.r_[left["rank"], right_cols["rank"]].astype(np.int64), np.r_[left["step"], right_cols["step"]].astype(np.int64)
    )
    left_key, right_key = key[: len(left["rank"])], key[len(left["rank"]) :]
    order = np.argsort(right_key, kind="stable")
    at, found = keyed.lookup(right_key[order], left_key)
    out = dict(left)
    for name, column in right_cols.items():
        if name in ("rank", "step") or name in skip:
            continue
        if not found.all():  # (every row misses when right has none)
            out[name] = np.full(len(left_key), np.nan) if not len(order) else np.where(found, column[order[at]].astype(float), np.nan)
        else:
            out[name] = column[order[at]]
    return out


def numpy_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """An Arrow table's numeric columns as numpy: integers with nulls as floats with NaN (pandas' way)."""
    out = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type):
            out[name] = _to_numpy(column)
    return out


def _to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count:
        return column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return column.to_numpy()


def descending(values: np.ndarray) -> np.ndarray:
    """Positions that sort ``values`` largest first, ties in their order, NaN last (pandas'
    ``sort_values(ascending=False)`` on a short series)."""
    return np.lexsort((np.arange(len(values)), -np.asarray(values, dtype=float)))


def nanmedian(values: np.ndarray, axis: int | None = None) -> Any:
    """The median without missing values (NaN where there are none), as pandas' ``median`` skips them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(np.asarray(values, dtype=float), axis=axis)


def nanmean(values: np.ndarray, axis: int | None = None) -> Any:
    """The mean without missing values (NaN where there are none), as pandas' ``mean`` skips them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(values, dtype=float), axis=axis)


def nanmax(values: np.ndarray, axis: int | None = None) -> Any:
    """The largest value without missing values (NaN where there are none)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(np.asarray(values, dtype=float), axis=axis)
