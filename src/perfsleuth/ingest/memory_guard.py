"""Refuse a trace file that cannot fit in memory before reading it, instead of being killed by the OS.

A reader holds one rank's events in memory (Arrow columns), so what a file needs grows with its size.
``check_fits`` estimates that need as the file's decoded size times a factor per format, adds the
interpreter's own footprint, and compares it with the memory the process can still get: the system's
available memory (``MemAvailable``, which counts reclaimable page cache) and, when the process runs in a
container with a memory limit, the room left under that limit. An OOM kill loses the whole run and says
nothing; an ``InputError`` up front names the file, the need and what is available.

The factors are measured, not guessed: peak RSS (``ru_maxrss``) above the interpreter's baseline per
input byte, from ``benchmarks/bench_memory.py`` (a 2 GB Kineto file, a 1 GB Nsight Systems export) and
the same readers on smaller copies of those inputs (see "Bounded memory" in benchmarks/README.md):

- Kineto JSON: 0.64 and 0.66 (2.0 GB file, two runs), 0.72 (323 MB) -> 0.8;
- nsys SQLite: 2.28 (1.05 GB export, 15.5 M rows), 2.55 (150 MB, 2.3 M rows) -> 2.8.

Rounded up, and with the baseline taken as 250 MB where 120 MB was measured, the estimate is 27-43 %
above every measurement: real traces differ from the benchmark's in how many bytes an event takes.

Set ``PERFSLEUTH_SKIP_MEMORY_CHECK=1`` to read anyway (swap, or an estimate known to be pessimistic).
``release_free_memory`` is the one helper readers call to keep their peak down: it returns freed heap
pages to the OS between a reader's phases. This module does not read traces or limit what readers allocate.
"""

from __future__ import annotations

import ctypes
import functools
import gzip
import os
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from perfsleuth.errors import InputError

SKIP_ENV = "PERFSLEUTH_SKIP_MEMORY_CHECK"

BYTES_PER_INPUT_BYTE = {
    "json": 0.8,  # Kineto/Chrome-trace JSON text (uncompressed)
    "sqlite": 2.8,  # Nsight Systems SQLite export
}
"""Peak memory above the interpreter's baseline per byte of (decoded) input, by container format."""

BASELINE_BYTES = 250 * 10**6
"""The interpreter with numpy, pyarrow and perfsleuth imported (measured 120 MB), with headroom."""

SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_RATIO_FALLBACK = 12
"""Decoded / compressed size assumed when a gzip file's stored size cannot be trusted (over 4 GiB
wraps the 32-bit ISIZE field); Kineto JSON compresses 10-20x."""


@dataclass(frozen=True)
class MemoryNeed:
    """What reading one file is estimated to need, and how the estimate was made."""

    path: Path
    container: str  # json | sqlite
    decoded_bytes: int
    factor: float
    needed_bytes: int


def decoded_size(path: Path) -> tuple[str, int]:
    """The file's container format and its size once decompressed (gzip's stored size, else the file's)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(len(SQLITE_MAGIC))
        if head == SQLITE_MAGIC:
            return "sqlite", size
        if head[:2] != _GZIP_MAGIC or size < 18:
            return "json", size
        fh.seek(-4, os.SEEK_END)
        stored = struct.unpack("<I", fh.read(4))[0]  # ISIZE: decoded size mod 2**32 (last member only)
    return "json", stored if stored >= size else size * _GZIP_RATIO_FALLBACK


def estimate(path: str | Path) -> MemoryNeed:
    """The memory reading ``path`` is estimated to need (baseline included)."""
    path = Path(path)
    container, decoded = decoded_size(path)
    factor = BYTES_PER_INPUT_BYTE[container]
    return MemoryNeed(path, container, decoded, factor, int(BASELINE_BYTES + decoded * factor))


def available_bytes() -> int | None:
    """Memory this process can still get: the least of the system's available memory and the room left
    under a cgroup (v2 or v1) limit; None when neither can be read (then nothing is refused)."""
    candidates = [v for v in (_system_available(), _cgroup_room()) if v is not None]
    return min(candidates) if candidates else None


def _system_available() -> int | None:
    """The kernel's own estimate where there is /proc (what psutil reads there too; importing psutil and
    asking it took 20 ms, paid before the reader workers fork), else psutil's portable one."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil  # optional: present with the benchmark extras, and the portable way off Linux

        return int(psutil.virtual_memory().available)
    except ImportError:
        return None


_CGROUP_FILES = (  # (limit, usage): cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)
_NO_LIMIT = 1 << 60  # v1 writes a huge number (2**63 rounded to pages) when there is no limit


def _cgroup_room() -> int | None:
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit_text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if limit_text == "max" or not limit_text.isdigit() or int(limit_text) >= _NO_LIMIT:
            return None
        try:
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            usage = 0
        return max(int(limit_text) - usage, 0)
    return None


def _skipped() -> bool:
    return os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def check_fits(path: str | Path, *, concurrent: int = 1) -> MemoryNeed | None:
    """Raise ``InputError`` when reading ``path`` (``concurrent`` such files at once, one per worker)
    is estimated to need more memory than is available; return the estimate otherwise (None when the
    check is switched off or the file cannot be sized: its reader then reports what is wrong)."""
    if _skipped():
        return None
    try:
        need = estimate(path)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    free = available_bytes()
    total = need.needed_bytes * max(concurrent, 1)
    if free is not None and total > free:
        workers = f" ({concurrent} files at once, one per worker)" if concurrent > 1 else ""
        hint = (
            f"estimated as {need.decoded_bytes / 1e9:.2f} GB of {need.container} x {need.factor} + "
            f"{BASELINE_BYTES / 1e9:.2f} GB; free memory, run on a larger machine"
            + (", or pass --workers 1" if concurrent > 1 else ", or profile fewer steps per file")
            + f"; set {SKIP_ENV}=1 to read it anyway"
        )
        raise InputError(
            need.path,
            f"needs about {total / 1e9:.1f} GB of memory to read{workers}, {free / 1e9:.1f} GB available",
            place="memory check",
            hint=hint,
        )
    return need


def workers_that_fit(files: Sequence[Path] | Sequence[str], wanted: int) -> int:
    """How many of ``wanted`` workers can each hold the largest of ``files`` at once (at least 1: a file
    too big for one worker is refused by its reader's ``check_fits``). Fewer workers, not a refusal,
    when only the parallelism does not fit."""
    if wanted <= 1 or _skipped():
        return max(wanted, 1)
    try:
        largest = max(estimate(f).needed_bytes for f in files)
    except (OSError, EOFError, gzip.BadGzipFile, ValueError):
        return wanted
    free = available_bytes()
    return wanted if free is None else max(1, min(wanted, free // max(largest, 1)))


def release_free_memory() -> None:
    """Hand memory the process has freed back to the OS (glibc's ``malloc_trim``; nothing elsewhere).

    glibc keeps freed small blocks (a reader's per-chunk numpy columns and Python objects) in its heap,
    so without this the next large Arrow allocation lands on top of them and the peak RSS counts both."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim  # musl has no malloc_trim: AttributeError
    except (OSError, AttributeError):
        return None
