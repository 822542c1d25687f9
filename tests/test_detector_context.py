"""A trace detector reads the job's shared context without changing it, and, called alone without a
trace, answers what the engine's gate would have answered instead of failing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfsleuth.api import analyze
from perfsleuth.diagnose import DETECTORS, load_detectors
from perfsleuth.diagnose.detectors import TRACE_FAULTS
from perfsleuth.diagnose.job import Job
from perfsleuth.diagnose.kernels import small_kernels
from perfsleuth.diagnose.registry import NotAssessed, gate
from perfsleuth.diagnose.signals import JobSignals
from perfsleuth.model import Finding
from perfsleuth.sim.faults import SmallKernels
from perfsleuth.sim.kineto_writer import write_job
from perfsleuth.sim.simulator import SimConfig, simulate

load_detectors()


@pytest.mark.parametrize("fault", TRACE_FAULTS)
def test_a_trace_detector_called_alone_on_a_bundle_without_a_trace_says_what_it_needs(fault: str) -> None:
    out = DETECTORS[fault].fn(JobSignals())
    assert isinstance(out, NotAssessed)
    assert out.fault == fault


def test_without_a_trace_a_detector_called_alone_gives_the_engines_answer() -> None:
    job = Job.of(JobSignals())
    for fault in ("dataloader_stall", "allocator_churn", "small_kernels", "straggler_rank", "exposed_communication", "collective_hang"):
        assert DETECTORS[fault].fn(job) == gate(DETECTORS[fault], job) == NotAssessed(fault, DETECTORS[fault].needs[0])


def test_small_kernels_leaves_the_shared_rank_step_frame_as_it_was_built(tmp_path: Path) -> None:
    cfg = SimConfig(world_size=4, layers=4, steps=6, seed=5, measure_impact=False, faults=[SmallKernels(chain_length=16, kernel_ns=5000)])
    write_job(simulate(cfg), tmp_path)
    job = Job.of(analyze([tmp_path], workers=1).analysis, probe=False)
    assert job.ctx is not None
    before = {name: column.copy() for name, column in job.ctx.rs.columns.items()}
    assert isinstance(small_kernels(job), Finding)
    assert list(job.ctx.rs.columns) == list(before)
    for name, column in job.ctx.rs.columns.items():
        assert np.array_equal(column, before[name], equal_nan=column.dtype.kind == "f"), name
