"""The wall-clock rule: when a time in a table is a UTC epoch time, and how a run's profiler clock becomes one.

Traces carry their own clocks (Kineto's base-time offset, monotonic clocks, epoch microseconds). A time counts
as wall clock only when it lands between 2015 and 2100; anything else is another clock and stays unknown, so a
fleet is never ordered by a monotonic counter that looks like a date.
"""

from __future__ import annotations

from typing import Any

EPOCH_RANGE_NS = (1_420_070_400 * 10**9, 4_102_444_800 * 10**9)
"""2015-01-01 .. 2100-01-01 UTC: an epoch time outside it means the clock is not the wall clock."""


def is_wall_clock(ts_ns: int) -> bool:
    return EPOCH_RANGE_NS[0] <= ts_ns <= EPOCH_RANGE_NS[1]


def wall_clock_ns(ts_ns: int | None, run_dims: Any = None) -> int | None:
    """A runs-table time (profiler clock) as UTC epoch ns: plus the ``epoch_offset_ns`` the run's dims carry
    (the trace reader writes it); None when the result is not a wall-clock time (outside ``EPOCH_RANGE_NS``)."""
    if ts_ns is None:
        return None
    offset = dict(run_dims or []).get("epoch_offset_ns", "0")
    t = ts_ns + (int(offset) if str(offset).lstrip("-").isdigit() else 0)
    return t if is_wall_clock(t) else None
