"""Stragglers: which rank arrives last at collectives, how long the others wait, and what it costs.

From each collective instance's per-rank arrival (aligned kernel start): the last rank to arrive,
each rank's wait for it, and the last rank's lead over the next-to-last (the time the collective
would have saved had that rank not been late). A rank is called a straggler when it is last far
more often than chance (binomial test against 1/participants, Bonferroni over ranks) among the
*decisive* collectives — those whose last arrival leads the next by more than the clock skew left
after alignment (and 2 µs); in a back-to-back series of collectives only the first one after compute
is decisive, the others start together.

Counterfactual: the step time had the straggler run at the median rank's speed. Per step, the
savings are the straggler's leads summed over the step's collectives it was last at — because
ranks re-synchronise at every collective, the delays add up — capped at the other ranks' exposed
communication time in that step (waiting hidden behind compute costs nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from perfsleuth.model import Interval
from perfsleuth.stats.summary import median_interval
from perfsleuth.stats.tails import binom_at_least
from perfsleuth.trace import keyed
from perfsleuth.trace.collectives import ClockAlignment, collective_rows

RANK_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("instances", pa.int64()),
        ("decisive", pa.int64()),
        ("last_count", pa.int64()),
        ("last_share", pa.float64()),
        ("lateness_p50_ns", pa.float64()),
        ("wait_imposed_ns", pa.int64()),
        ("wait_suffered_ns", pa.int64()),
        ("p_value", pa.float64()),
    ]
)

ALPHA = 0.01
MIN_LEAD_NS = 2_000
"""A collective where the last rank leads the next by less than this (or than the clock skew) is a
tie: who was 'last' there is noise, so it does not count for or against anyone."""


@dataclass(frozen=True, slots=True)
class StragglerReport:
    per_rank: pa.Table
    straggler: int | None
    p_value: float | None
    lead_p50_ns: float | None
    per_step: pa.Table  # step, step_time_ns, savings_ns, counterfactual_ns
    step_time: Interval | None
    counterfactual_step_time: Interval | None
    saving_fraction: Interval | None
    note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "straggler": self.straggler,
            "p_value": self.p_value,
            "lead_p50_ns": self.lead_p50_ns,
            "per_rank": self.per_rank.to_pylist(),
            "step_time_ns": self.step_time.to_json() if self.step_time else None,
            "counterfactual_step_time_ns": self.counterfactual_step_time.to_json() if self.counterfactual_step_time else None,
            "saving_fraction": self.saving_fraction.to_json() if self.saving_fraction else None,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class _Arrivals:
    """The collective rows of ``with_arrivals`` (point-to-point left out) as arrays, with each row's
    lateness (arrival minus its instance's median arrival) and whether its instance is decisive."""

    instance: np.ndarray  # dense ids
    rank: np.ndarray
    step: np.ndarray
    participants: np.ndarray
    wait: np.ndarray
    lead: np.ndarray
    is_last: np.ndarray
    lateness: np.ndarray
    decisive: np.ndarray

    @classmethod
    def of(cls, rows: pa.Table, skew: float) -> _Arrivals:
        inst = keyed.dense(rows["instance"].to_numpy())
        arrival = rows["arrival_ns"].to_numpy()
        lead = rows["lead_over_next_ns"].to_numpy()
        return cls(
            inst,
            rows["rank"].to_numpy(),
            rows["step"].to_numpy(),
            rows["participants"].to_numpy(),
            rows["wait_ns"].to_numpy(),
            lead,
            rows["is_last"].to_numpy(zero_copy_only=False),
            arrival - keyed.median(inst, arrival)[inst],
            keyed.maxes(inst, lead)[inst] > max(skew, MIN_LEAD_NS),
        )


def _per_rank(arr: _Arrivals) -> pa.Table:
    """Per rank, in group-bys over (instance, rank) rows: linear in ranks × collectives.

    A rank's imposed wait is the others' wait summed over the decisive collectives it arrived last
    at; its own wait there is zero (it was the last), so that is the instance's total wait."""
    ranks, at = keyed.distinct(arr.rank)
    k = len(ranks)
    dec = arr.decisive
    n = np.bincount(at[dec], minlength=k)
    last = np.bincount(at[dec & arr.is_last], minlength=k).astype(np.int64)
    chance = np.bincount(at[dec], weights=1.0 / arr.participants[dec], minlength=k) / np.maximum(n, 1)
    # binomial test, one-sided (more often last than chance): P(X >= last) for X ~ Bin(n, chance)
    p = np.where(n > 0, binom_at_least(last, n, chance), 1.0)
    lateness = np.nan_to_num(keyed.median(at[dec], arr.lateness[dec], k), nan=0.0)  # 0 where no decisive row
    suffered = keyed.sums(at[dec], arr.wait[dec], k)
    total_wait = keyed.sums(arr.instance[dec], arr.wait[dec], int(arr.instance.max()) + 1)
    last_rows = dec & arr.is_last
    imposed = keyed.sums(at[last_rows], total_wait[arr.instance[last_rows]], k)
    return pa.table(
        {
            "rank": pa.array(ranks.astype(np.int32)),
            "instances": pa.array(np.bincount(at, minlength=k).astype(np.int64)),
            "decisive": pa.array(n.astype(np.int64)),
            "last_count": pa.array(last),
            "last_share": pa.array(np.where(n > 0, last / np.maximum(n, 1), 0.0)),
            "lateness_p50_ns": pa.array(lateness.astype(float)),
            "wait_imposed_ns": pa.array(imposed.astype(np.int64)),
            "wait_suffered_ns": pa.array(suffered.astype(np.int64)),
            "p_value": pa.array(np.minimum(1.0, p.astype(float) * k)),
        },
        schema=RANK_SCHEMA,
    )


def _not_judged(steps: pa.Table, reason: str) -> StragglerReport:
    """The report when no collective can say who is slow: empty tables and the reason."""
    return StragglerReport(RANK_SCHEMA.empty_table(), None, None, None, steps, None, None, None, reason)


def analyze_stragglers(arrivals: pa.Table, steps: pa.Table, alignment: ClockAlignment) -> StragglerReport:
    """See the module docstring. ``arrivals`` comes from ``collectives.with_arrivals``."""
    empty = pa.table(
        {
            "step": pa.array([], pa.int32()),
            "step_time_ns": pa.array([], pa.int64()),
            "savings_ns": pa.array([], pa.int64()),
            "counterfactual_ns": pa.array([], pa.int64()),
        }
    )
    if arrivals.num_rows == 0:
        return _not_judged(empty, "no collective seen on two or more ranks: straggler analysis needs traces of several ranks")
    rows = collective_rows(arrivals)
    if rows.num_rows == 0:
        return _not_judged(empty, "only point-to-point (pipeline) transfers matched across ranks: no collective to judge stragglers by")
    skew = alignment.residual_p90_ns if np.isfinite(alignment.residual_p90_ns) else 0.0
    arr = _Arrivals.of(rows, skew)
    per_rank = _per_rank(arr)
    share, p_value, lateness = (per_rank[c].to_numpy() for c in ("last_share", "p_value", "lateness_p50_ns"))
    # among equal shares the stronger evidence first: last at 32 of 32 beats last at 4 of 4 (a rank
    # whose group peers were mostly not traced has few decisive collectives)
    best = per_rank.slice(int(np.lexsort((-lateness, p_value, -share))[0]), 1).to_pylist()[0]
    lead = arr.lead[arr.is_last & arr.decisive & (arr.rank == best["rank"])]
    lead_p50 = float(np.median(lead)) if len(lead) else 0.0
    is_straggler = bool(best["p_value"] < ALPHA and best["last_share"] >= 0.5 and lead_p50 > skew)
    straggler = int(best["rank"]) if is_straggler else None
    if is_straggler:
        note = (
            f"rank {straggler} arrives last at {best['last_share']:.0%} of the {int(best['decisive'])} collectives "
            f"(of {int(best['instances'])}) where the last arrival is clearly last "
            f"(chance would be {float(np.mean(1 / arr.participants)):.0%}); median lead over the next rank "
            f"{lead_p50 / 1e3:.0f} µs vs residual clock skew {skew / 1e3:.0f} µs"
        )
    else:
        note = (
            f"no straggler: the most frequent last arrival, rank {int(best['rank'])}, is last at "
            f"{best['last_share']:.0%} of {int(best['decisive'])} decisive collectives (adjusted p={best['p_value']:.2g}), median lead "
            f"{lead_p50 / 1e3:.0f} µs vs residual skew {skew / 1e3:.0f} µs"
        )
    per_step, st, cf, frac = _counterfactual(arr, steps, int(best["rank"]))  # the straggler, when there is one
    if not is_straggler:
        cf = frac = None
    return StragglerReport(per_rank, straggler, float(best["p_value"]), lead_p50, per_step, st, cf, frac, note)


def _counterfactual(arr: _Arrivals, steps: pa.Table, rank: int) -> tuple[pa.Table, Interval | None, Interval | None, Interval | None]:
    step, step_rank = steps["step"].to_numpy(), steps["rank"].to_numpy()
    rows = step >= 0 if (step >= 0).any() else np.ones(len(step), dtype=bool)
    numbers = np.unique(step[rows])
    step_time = _median_per_step(numbers, step[rows], steps["step_time_ns"].filter(pa.array(rows)))
    others = rows & (step_rank != rank)
    exposed = np.nan_to_num(_median_per_step(numbers, step[others], steps["exposed_communication_ns"].filter(pa.array(others))), nan=0.0)
    mine = arr.is_last & (arr.rank == rank)
    known = np.isin(arr.step[mine], numbers)
    lead = keyed.sums(np.searchsorted(numbers, arr.step[mine][known]), arr.lead[mine][known].astype(np.int64), len(numbers))
    savings = np.minimum(lead.astype(float), exposed)
    cf = step_time - savings
    per_step = pa.table(
        {
            "step": numbers.astype(np.int32),
            "step_time_ns": step_time.astype(np.int64),
            "savings_ns": savings.astype(np.int64),
            "counterfactual_ns": cf.astype(np.int64),
        }
    )
    st = median_interval(step_time, "ns")
    cfi = median_interval(cf, "ns")
    frac = median_interval(savings / step_time, "fraction")
    return per_step, st, cfi, frac


def _median_per_step(numbers: np.ndarray, step: np.ndarray, values: pa.ChunkedArray) -> np.ndarray:
    """Per step of ``numbers`` (sorted), the median of its non-null ``values`` (NaN where it has none)."""
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    v = values.fill_null(0).to_numpy().astype(float)[valid]
    return keyed.median(np.searchsorted(numbers, step[valid]), v, len(numbers))


def wait_imposed(instances: pa.Table) -> tuple[dict[tuple[int, int], list[int]], list[int], list[int]]:
    """The wait each rank imposed on the others, per (rank, step), for the report's heat map: [summed wait
    of the other ranks at collectives this rank arrived last at, collectives it was last at, collectives it
    took part in], with the ranks and steps seen. Pipeline send/recv are left out, as the straggler analysis
    leaves them out: their order is by design."""
    cells: dict[tuple[int, int], list[int]] = {}
    if instances.num_rows == 0:
        return cells, [], []
    cols = ["instance", "op", "step", "rank", "wait_ns", "is_last"]
    if any(c not in instances.column_names for c in cols):
        return cells, [], []
    rows = collective_rows(instances).select(cols).to_pylist()
    total_wait: dict[int, int] = {}
    last_rank: dict[int, tuple[int, int]] = {}
    for r in rows:
        step, rank = int(r["step"] if r["step"] is not None else -1), int(r["rank"])
        total_wait[r["instance"]] = total_wait.get(r["instance"], 0) + int(r["wait_ns"] or 0)
        cells.setdefault((rank, step), [0, 0, 0])[2] += 1
        if r["is_last"]:
            last_rank[r["instance"]] = (rank, step)
    for inst, key in last_rank.items():
        cell = cells[key]
        cell[0] += total_wait.get(inst, 0)
        cell[1] += 1
    ranks = sorted({k[0] for k in cells})
    steps = sorted({k[1] for k in cells})
    return cells, ranks, steps
