"""Rank files as Spark tasks: the per-file pipeline's other executor.

``map_ranks`` (``pipeline.job``) hands each trace file to a function that decodes its ranks and
reduces each to a small result where it was decoded. Locally that function runs in a process pool;
with ``engine="spark"`` it runs here instead, one Spark task per file: the driver sends file *paths*
(never bytes), each executor opens its file where it lies (a shared filesystem mounted at the same
path on every node), and only what the function returns (the rank's facts without events, and its
per-rank result) comes back to the driver, which then assembles the job exactly as it does locally.

The executors run the same Python code: perfsleuth must be installed in the Python Spark starts
there (``PYSPARK_PYTHON``; locally this interpreter). A bad file fails its task with the same
``InputError`` a local run raises (file, place, cause), not with a Java stack trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from perfsleuth.errors import InputError, InvalidArgument, PerfsleuthError

T = TypeVar("T")

RANK_ENGINES = ("local", "spark")
"""Where ``analyze`` and ``ingest`` run each rank file's parse and analysis: a local process pool, or Spark tasks."""


def require_rank_engine(engine: str) -> None:
    """An InputError unless ``engine`` is one of ``RANK_ENGINES`` (checked before any file is opened)."""
    if engine not in RANK_ENGINES:
        raise InputError(None, f"unknown engine {engine!r}", hint=f"use one of: {', '.join(RANK_ENGINES)}")


@dataclass(frozen=True, slots=True)
class _Failed:
    """A perfsleuth error raised in a task, carried back as plain fields (Spark would otherwise turn
    it into a Java stack trace; ``InputError`` itself does not pickle)."""

    kind: str  # "input" or "argument"
    message: str
    path: str | None = None
    place: str | None = None
    hint: str | None = None

    def raise_again(self) -> None:
        if self.kind == "input":
            raise InputError(self.path, self.message, place=self.place, hint=self.hint)
        raise InvalidArgument(self.message)


def _task(job: tuple[str, bool], fn: Callable[[tuple[str, bool]], T]) -> T | _Failed:
    """One Spark task: ``fn`` on one file, a perfsleuth error returned as a value."""
    try:
        return fn(job)
    except InputError as exc:
        return _Failed("input", exc.cause, exc.path, exc.place, exc.hint)
    except PerfsleuthError as exc:
        return _Failed("argument", str(exc))


def _session(master: str | None) -> Any:
    """The running SparkSession when there is one and no ``master`` is named (a script run by
    ``spark-submit`` that made its session first keeps its cluster), else one for ``master``."""
    from perfsleuth import engine as engines  # DuckDB, Ibis and Spark load only when Spark is asked for

    if master is None:
        try:
            from pyspark.sql import SparkSession
        except ImportError:  # local_spark_session says what to install
            pass
        else:
            if (active := SparkSession.getActiveSession()) is not None:
                return active
    return engines.local_spark_session(master=master)


def map_rank_files_spark(files: Sequence[Path], fn: Callable[[tuple[str, bool]], T], *, master: str | None = None) -> list[T]:
    """Apply ``fn((path, single_file))`` to every rank file as one Spark task per file, in the files'
    order (the same contract as ``ingest.kineto.map_rank_files``). ``master`` is a Spark master URL;
    without one, the running SparkSession, else a local one (``local[2]``, as the fleet verbs' ``--engine spark``)."""
    if not files:
        raise InputError(None, "no trace files given")
    session = _session(master)
    single = len(files) == 1
    jobs = [(str(f), single) for f in files]
    rdd = session.sparkContext.parallelize(jobs, numSlices=len(jobs))
    try:
        done = rdd.map(lambda job: _task(job, fn)).collect()
    except Exception as exc:  # a task Spark itself lost (an executor died, out of memory, no perfsleuth there)
        lines = [line for line in str(exc).splitlines() if line.strip()]
        cause = next((line.strip() for line in reversed(lines) if "Error" in line), lines[0] if lines else type(exc).__name__)
        raise InputError(
            None,
            f"a Spark task failed: {cause}",
            hint="the executors need perfsleuth installed and the trace files at the same path",
        ) from None
    out: list[T] = []
    for result in done:
        if isinstance(result, _Failed):
            result.raise_again()
        else:
            out.append(result)
    return out


__all__ = ["RANK_ENGINES", "map_rank_files_spark", "require_rank_engine"]
