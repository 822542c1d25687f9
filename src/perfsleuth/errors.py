"""Errors a user can cause, and warnings that travel with a result.

A traceback from perfsleuth means a bug in perfsleuth. Everything a user can cause (a file that is
not a trace, a truncated archive, ranks of two different jobs in one directory) raises an
``InputError`` that names the file, the place in it and the cause, so the CLI can print one line and
exit with status 2. Problems that still leave something to analyse become ``Caveat`` objects carried
in the output instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class PerfsleuthError(Exception):
    """Base class of every error perfsleuth raises on purpose."""


class InputError(PerfsleuthError):
    """Bad input: names the file, the place in it and the cause (and, when known, the fix)."""

    def __init__(self, path: str | Path | None, cause: str, *, place: str | None = None, hint: str | None = None):
        self.path = str(path) if path is not None else None
        self.place = place
        self.cause = cause
        self.hint = hint
        super().__init__(self.describe())

    def describe(self) -> str:
        where = self.path or "<input>"
        if self.place:
            where = f"{where} ({self.place})"
        text = f"{where}: {self.cause}"
        if self.hint:
            text += f" — {self.hint}"
        return text


class OutputError(InputError):
    """An ``--out`` perfsleuth will not or cannot write (a directory, a disk, a full or read-only
    filesystem): names the path and the cause, and the path is left as it was."""


class StoreWriteError(InputError):
    """A fleet store file the filesystem would not take (full, read-only, over a size limit): names the
    file; the store is left as it was committed, so the same ingest can run again."""


class InvalidArgument(PerfsleuthError, ValueError):
    """A caller passed a value a computation cannot use (a zero step time, no runs, an unknown top line).

    Not a fact of an input file, so it names no path; it is a ``ValueError`` for Python callers and a
    ``PerfsleuthError`` so that degenerate data reaching a formula gives one clear line, not a traceback."""


@dataclass(frozen=True, slots=True)
class Caveat:
    """A problem that did not stop the analysis but limits what it can claim.

    ``code`` is stable (tests and scripts match on it); ``message`` is for people.
    """

    code: str
    message: str
    path: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.message, "path": self.path}
