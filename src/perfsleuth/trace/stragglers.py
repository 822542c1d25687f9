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

from perfsleuth.lazy_import import pandas as pd
from perfsleuth.model import Interval
from perfsleuth.stats.summary import median_interval
from perfsleuth.stats.tails import binom_at_least
from perfsleuth.trace.collectives import P2P_OPS, ClockAlignment

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


def _per_rank(arr: pd.DataFrame) -> pa.Table:
    """Per rank, in group-bys over (instance, rank) rows: linear in ranks × collectives.

    A rank's imposed wait is the others' wait summed over the decisive collectives it arrived last
    at; its own wait there is zero (it was the last), so that is the instance's total wait."""
    n_ranks = arr["rank"].nunique()
    by_rank = arr.groupby("rank", sort=True)
    n_all = by_rank.size()
    dec = arr[arr["decisive"]]
    g = dec.groupby("rank")
    n = g.size().reindex(n_all.index, fill_value=0)
    last = g["is_last"].sum().reindex(n_all.index, fill_value=0).astype(np.int64)
    chance = (1.0 / dec["participants"]).groupby(dec["rank"]).mean().reindex(n_all.index, fill_value=0.0)
    # binomial test, one-sided (more often last than chance): P(X >= last) for X ~ Bin(n, chance)
    p = np.where(n > 0, binom_at_least(last, n, chance), 1.0)
    lateness = g["lateness_ns"].median().reindex(n_all.index, fill_value=0.0)
    suffered = g["wait_ns"].sum().reindex(n_all.index, fill_value=0).astype(np.int64)
    total_wait = dec.groupby("instance")["wait_ns"].sum()
    last_rows = dec[dec["is_last"]]
    imposed = last_rows["instance"].map(total_wait).groupby(last_rows["rank"]).sum().reindex(n_all.index, fill_value=0).astype(np.int64)
    nn = n.to_numpy()
    return pa.table(
        {
            "rank": pa.array(n_all.index.to_numpy().astype(np.int32)),
            "instances": pa.array(n_all.to_numpy().astype(np.int64)),
            "decisive": pa.array(nn.astype(np.int64)),
            "last_count": pa.array(last.to_numpy()),
            "last_share": pa.array(np.where(nn > 0, last.to_numpy() / np.maximum(nn, 1), 0.0)),
            "lateness_p50_ns": pa.array(lateness.to_numpy(dtype=float)),
            "wait_imposed_ns": pa.array(imposed.to_numpy()),
            "wait_suffered_ns": pa.array(suffered.to_numpy()),
            "p_value": pa.array(np.minimum(1.0, p.astype(float) * n_ranks)),
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
    arr = arrivals.to_pandas()
    # pipeline sends/receives are ordered by design (the receiver waits for the sender): they align
    # clocks but say nothing about who is slow
    arr = arr[~arr["op"].isin(P2P_OPS)]
    if arr.empty:
        return _not_judged(empty, "only point-to-point (pipeline) transfers matched across ranks: no collective to judge stragglers by")
    med = arr.groupby("instance")["arrival_ns"].transform("median")
    arr["lateness_ns"] = arr["arrival_ns"] - med
    skew = alignment.residual_p90_ns if np.isfinite(alignment.residual_p90_ns) else 0.0
    lead = arr.groupby("instance")["lead_over_next_ns"].transform("max")
    arr["decisive"] = lead > max(skew, MIN_LEAD_NS)
    per_rank = _per_rank(arr)
    pr = per_rank.to_pandas()
    # among equal shares the stronger evidence first: last at 32 of 32 beats last at 4 of 4 (a rank
    # whose group peers were mostly not traced has few decisive collectives)
    best = pr.sort_values(["last_share", "p_value", "lateness_p50_ns"], ascending=[False, True, False], kind="stable").iloc[0]
    lead = arr.loc[arr["is_last"] & arr["decisive"] & (arr["rank"] == best["rank"]), "lead_over_next_ns"]
    lead_p50 = float(np.median(lead)) if len(lead) else 0.0
    is_straggler = bool(best["p_value"] < ALPHA and best["last_share"] >= 0.5 and lead_p50 > skew)
    straggler = int(best["rank"]) if is_straggler else None
    if is_straggler:
        note = (
            f"rank {straggler} arrives last at {best['last_share']:.0%} of the {int(best['decisive'])} collectives "
            f"(of {int(best['instances'])}) where the last arrival is clearly last "
            f"(chance would be {float(np.mean(1 / arr['participants'])):.0%}); median lead over the next rank "
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


def _counterfactual(arr: pd.DataFrame, steps: pa.Table, rank: int) -> tuple[pa.Table, Interval | None, Interval | None, Interval | None]:
    sdf = steps.to_pandas()
    sdf = sdf[sdf["step"] >= 0] if (sdf["step"] >= 0).any() else sdf
    step_time = sdf.groupby("step")["step_time_ns"].median()
    others = sdf[sdf["rank"] != rank]
    exposed = others.groupby("step")["exposed_communication_ns"].median()
    lead = arr[arr["is_last"] & (arr["rank"] == rank)].groupby("step")["lead_over_next_ns"].sum()
    savings = lead.reindex(step_time.index).fillna(0)
    cap = exposed.reindex(step_time.index).fillna(0)
    savings = np.minimum(savings, cap)
    cf = step_time - savings
    per_step = pa.table(
        {
            "step": step_time.index.to_numpy().astype(np.int32),
            "step_time_ns": step_time.to_numpy().astype(np.int64),
            "savings_ns": savings.to_numpy().astype(np.int64),
            "counterfactual_ns": cf.to_numpy().astype(np.int64),
        }
    )
    st = median_interval(step_time.to_numpy(), "ns")
    cfi = median_interval(cf.to_numpy(), "ns")
    frac = median_interval((savings / step_time).to_numpy(), "fraction")
    return per_step, st, cfi, frac


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
    rows = [r for r in instances.select(cols).to_pylist() if r["op"] not in P2P_OPS]
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
