"""The baseline and current windows of a fleet page: parsed from ``YYYY-MM-DD..YYYY-MM-DD``, or chosen.

Chosen windows follow the data: the latest significant change point of the daily trend splits the
history (baseline from the change before it, or the start; current from it to the end); without one,
the last 7 days are set against the 7 before. Days are UTC calendar days; a window's end day is
included. Nothing here reads data: callers pass the days the history covers.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from perfsleuth.errors import InputError

NS_PER_DAY = 86_400 * 1_000_000_000
DEFAULT_DAYS = 7
EPOCH = dt.date(1970, 1, 1)


@dataclass(frozen=True, slots=True)
class Window:
    """Whole UTC days ``first_day``..``last_day`` (both included), as days since the epoch."""

    first_day: int
    last_day: int

    @property
    def start_ns(self) -> int:
        return self.first_day * NS_PER_DAY

    @property
    def end_ns(self) -> int:  # exclusive
        return (self.last_day + 1) * NS_PER_DAY

    @property
    def days(self) -> int:
        return self.last_day - self.first_day + 1

    def label(self) -> str:
        return f"{day_to_date(self.first_day).isoformat()}..{day_to_date(self.last_day).isoformat()}"

    def to_json(self) -> dict:
        return {"first_day": day_to_date(self.first_day).isoformat(), "last_day": day_to_date(self.last_day).isoformat(), "days": self.days}


def day_to_date(day: int) -> dt.date:
    return EPOCH + dt.timedelta(days=int(day))


def parse_window(text: str, option: str) -> Window:
    """``YYYY-MM-DD..YYYY-MM-DD`` (both days included; one date is a one-day window) as a Window; a clear
    error otherwise. The one parser of window options (``fleet report`` and ``localize --store``)."""
    parts = text.split("..")
    hint = f"{option} takes two dates, first..last (both included), e.g. 2026-03-01..2026-03-07"
    if len(parts) > 2:
        raise InputError(None, f"{option} {text!r} is not a range", hint=hint)
    try:
        first, last = (dt.date.fromisoformat(p.strip()) for p in (parts * 2)[:2])
    except ValueError:
        raise InputError(None, f"{option} {text!r}: not two YYYY-MM-DD dates", hint=hint) from None
    if last < first:
        raise InputError(None, f"{option} {text!r}: the last day is before the first (the window ends before it starts)", hint=hint)
    return Window((first - EPOCH).days, (last - EPOCH).days)


def choose_windows(first_day: int, last_day: int, change_days: list[int]) -> tuple[Window, Window, str]:
    """Baseline and current windows from the history's span and its change points (days, in order).

    Returns the windows and a sentence saying how they were chosen.
    """
    inside = [d for d in change_days if first_day < d <= last_day]
    if inside:
        split = inside[-1]
        start = inside[-2] if len(inside) > 1 else first_day
        how = (
            f"split at the latest change point of the daily trend ({day_to_date(split).isoformat()}): baseline "
            f"from {'the change before it' if len(inside) > 1 else 'the start of the history'}, current to the end"
        )
        return Window(start, split - 1), Window(split, last_day), how
    current = Window(max(first_day, last_day - DEFAULT_DAYS + 1), last_day)
    baseline = Window(max(first_day, current.first_day - DEFAULT_DAYS), current.first_day - 1)
    if baseline.last_day < baseline.first_day:
        raise InputError(
            None,
            "the history covers a single day: there is no baseline to compare with",
            hint="give --baseline and --current, or records from more days",
        )
    how = f"no significant change point in the daily trend: the last {current.days} days against the {baseline.days} before"
    return baseline, current, how
