"""Which signals to collect first: leave-one-out ablation of signal groups over labeled cases.

For every case the job is read once; then the diagnosis runs on all of its signals and once more
without each group of ``signal_costs.GROUPS`` (kernels, host ops, annotations, step markers,
collective metadata, memory events, all ranks but the first). Each run is graded exactly as
``evaluate`` grades (same rules, same scores), so a group's value is the quality lost without it:
macro F1 and each class's F1, and the classes that can no longer be assessed at all. Beside it
stands what the group costs to collect (measured, see ``signal_costs``). The ranking puts first the
groups whose loss hurts most; among equals, the cheaper one first.

A group may be worth nothing on a case set that never needs it (memory events on cases without a
fragmented allocator): the ranking is only as good as the cases are representative of the fleet.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from perfsleuth import progress
from perfsleuth.cases.case import Case, read_case
from perfsleuth.cases.evaluate import CaseResult, EvaluationReport, case_result, score
from perfsleuth.diagnose.signal_costs import GROUPS, SignalGroup

ALL = "all signals"
SCHEMA = "perfsleuth.signals/1"
MATTERS = 0.05
"""A class's F1 must drop by at least this much for the group to count as deciding it."""


@dataclass(frozen=True, slots=True)
class GroupValue:
    """What leaving one group out costs the diagnosis, and what collecting it costs."""

    group: SignalGroup
    report: EvaluationReport
    baseline: EvaluationReport

    @property
    def macro_f1_loss(self) -> float:
        return (self.baseline.macro_f1 or 0.0) - (self.report.macro_f1 or 0.0)

    @property
    def class_losses(self) -> dict[str, float]:
        """F1 lost per class (classes of the baseline), largest first; only losses of at least MATTERS."""
        out = {}
        for fault, base in self.baseline.per_class.items():
            without = self.report.per_class.get(fault)
            loss = base.f1 - (without.f1 if without else 0.0)
            if loss >= MATTERS:
                out[fault] = loss
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def new_false_alarms(self) -> int:
        return len(self.report.false_alarms_healthy) - len(self.baseline.false_alarms_healthy)

    @property
    def new_misleading(self) -> int:
        return len(self.report.misleading) - len(self.baseline.misleading)

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group.name,
            "what": self.group.what,
            "macro_f1_without": self.report.macro_f1,
            "macro_f1_loss": self.macro_f1_loss,
            "class_f1_loss": self.class_losses,
            "new_false_alarms_on_healthy": self.new_false_alarms,
            "new_misleading": self.new_misleading,
            "cost": self.group.cost.to_json(),
        }


@dataclass(frozen=True, slots=True)
class AblationReport:
    baseline: EvaluationReport
    values: tuple[GroupValue, ...]

    def ranking(self) -> list[GroupValue]:
        """Most valuable first: quality lost without the group (macro F1, then the largest class loss),
        then the cheaper group (worst-case overhead, then volume)."""
        return sorted(
            self.values,
            key=lambda v: (
                -round(v.macro_f1_loss, 4),
                -max(v.class_losses.values(), default=0.0),
                v.group.cost.worst_overhead,
                v.group.cost.bytes_launch_bound,
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "cases": len(self.baseline.cases),
            "macro_f1_all_signals": self.baseline.macro_f1,
            "matters": f"a class counts when its F1 drops by at least {MATTERS}",
            "ranking": [v.to_json() for v in self.ranking()],
        }


def _without(job: Any, group: SignalGroup) -> Any:
    from perfsleuth.trace.job import TraceJob

    events = group.drop(job.events)
    ranks = set(pc.unique(events["rank"]).to_pylist()) if events.num_rows else set()
    runs = job.runs
    if ranks and len(ranks) < len(job.rank_files):  # fewer rank files read: the runs table says so, as a real read would
        i = runs.schema.get_field_index("ranks_present")
        runs = runs.set_column(i, runs.schema.field(i), pa.array([len(ranks)] * runs.num_rows, pa.int32()))
    return TraceJob(runs, events, list(job.caveats), {r: f for r, f in job.rank_files.items() if r in ranks})


def _diagnosed(case: Case, job: Any) -> CaseResult:
    from perfsleuth.diagnose import diagnose
    from perfsleuth.errors import PerfsleuthError
    from perfsleuth.trace.analysis import analyze_job

    try:
        return case_result(case, diagnose(analyze_job(job)))
    except PerfsleuthError as e:
        return case_result(case, error=str(e))


def ablate_case(path: str, groups: Sequence[SignalGroup] = GROUPS) -> dict[str, CaseResult]:
    """One case graded on all its signals and without each group (keys: ALL and the group names)."""
    from perfsleuth.errors import PerfsleuthError
    from perfsleuth.pipeline import load_trace_job

    case = read_case(path)
    try:
        job = load_trace_job([case.path], workers=1)
    except PerfsleuthError as e:
        failed = case_result(case, error=str(e))
        return {ALL: failed, **{g.name: failed for g in groups}}
    out = {ALL: _diagnosed(case, job)}
    for g in groups:
        out[g.name] = _diagnosed(case, _without(job, g))
    return out


def ablate(case_dirs: Sequence[str | Path], *, groups: Sequence[SignalGroup] = GROUPS, workers: int | None = None) -> AblationReport:
    """Leave-one-out over every group on every case (cases in parallel, one process each)."""
    paths = [str(p) for p in case_dirs]
    workers = workers or min(len(paths), os.cpu_count() or 1) or 1
    ablating = f"ablating {len(groups)} signal groups on {len(paths)} case{'s' if len(paths) != 1 else ''}"
    if workers <= 1 or len(paths) <= 1:
        per_case = progress.counted((ablate_case(p, groups) for p in paths), ablating, len(paths))
    else:
        import multiprocessing as mp
        from functools import partial

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            per_case = progress.counted(pool.map(partial(ablate_case, groups=groups), paths, chunksize=1), ablating, len(paths))
    baseline = score([c[ALL] for c in per_case])
    values = tuple(GroupValue(g, score([c[g.name] for c in per_case]), baseline) for g in groups)
    return AblationReport(baseline, values)
