"""Progress for the verbs that take more than a moment, on stderr, only where someone watches.

A verb says what it is doing with :func:`task` (a bar when the total is known, a spinner with the
elapsed time when not) and calls the returned ``advance``. Whether anything is drawn is decided
once per process by :func:`configure`: ``--progress`` always, ``--quiet`` never, by default only
when stderr is a terminal — so a pipe, a file or CI logs get nothing unless asked
(``PERFSLEUTH_PROGRESS=1`` asks too). The report itself (stdout, ``--out``) is never touched, and
Rich is imported only when a bar is actually drawn.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_MODE: list[bool | None] = [None]  # None: auto (stderr is a terminal); True: always; False: never
_LIVE: list[Any] = []  # the bar being drawn: a task inside another (bytes parsed within "analysing") joins it


def configure(show: bool | None) -> None:
    """``True`` (``--progress``), ``False`` (``--quiet``) or ``None`` (only on a terminal)."""
    _MODE[0] = show


def enabled() -> bool:
    if _MODE[0] is not None:
        return _MODE[0]
    if os.environ.get("PERFSLEUTH_PROGRESS", "").lower() in ("1", "true", "yes", "always"):
        return True
    return sys.stderr.isatty()


def _noop(n: float = 1) -> None:
    return None


def _size(n: float, unit: str) -> str:
    return f"{n / 1e6:,.1f} MB" if unit == "bytes" else f"{n:,.0f}{' ' + unit if unit else ''}"


def _lines(description: str, total: float | None, unit: str) -> Iterator[Callable[[float], None]]:
    done = [0.0]
    start = time.perf_counter()
    of = f" ({_size(total, unit)})" if total is not None and unit else ""
    print(f"perfsleuth: {description}{of} ...", file=sys.stderr, flush=True)

    def advance(n: float = 1) -> None:
        done[0] += n

    try:
        yield advance
    finally:
        count = f", {_size(done[0], unit)}" + (f" of {_size(total, unit)}" if total is not None else "") if done[0] else ""
        print(f"perfsleuth: {description}: done in {time.perf_counter() - start:.1f} s{count}", file=sys.stderr, flush=True)


@contextmanager
def task(description: str, total: float | None = None, unit: str = "") -> Iterator[Callable[[float], None]]:
    """Draw one task on stderr while the block runs; yields ``advance(n=1)``. ``unit="bytes"`` shows sizes."""
    if not enabled():
        yield _noop
        return
    if not sys.stderr.isatty():  # asked for on a pipe or a log: one line when it starts and one when it ends
        yield from _lines(description, total, unit)
        return
    if _LIVE:  # one live display at a time: a nested task is another line of the bar already drawn
        yield from _joined(_LIVE[-1], description, total, unit)
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Done(ProgressColumn):
        """How far: "3/8", or "120.4/375.0 MB" for bytes; nothing while the total is unknown."""

        def render(self, task: Task) -> Text:
            if task.total is None:
                return Text("")
            unit = task.fields.get("unit", "")
            done = (
                f"{task.completed / 1e6:,.1f}/{task.total / 1e6:,.1f} MB" if unit == "bytes" else f"{task.completed:,.0f}/{task.total:,.0f}"
            )
            return Text(done)

    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), Done(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        _LIVE.append(bar)
        try:
            yield from _joined(bar, description, total, unit)
        finally:
            _LIVE.pop()


def _joined(bar: Any, description: str, total: float | None, unit: str) -> Iterator[Callable[[float], None]]:
    """A task on a bar that is drawn already, removed from it when the block ends."""
    tid = bar.add_task(description, total=total, unit=unit)

    def advance(n: float = 1) -> None:
        bar.advance(tid, n)

    try:
        yield advance
    finally:
        bar.remove_task(tid)


def counted(results: Iterable[T], description: str, total: int) -> list[T]:
    """Collect ``results`` (a loop or a pool's ``map``), counting each one as it arrives: "3/40" on the bar."""
    out: list[T] = []
    with task(description, total=total) as advance:
        for r in results:
            out.append(r)
            advance(1)
    return out
