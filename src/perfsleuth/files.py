"""Replace a file's content so a reader, or a process killed half way, sees the old file or the whole new one.

The one way perfsleuth writes a file it may be replacing, for ``--out`` and for the fleet store alike: a
uniquely named temporary beside the target, flushed to disk, given the replaced file's mode (or what ``open``
would give a new file), renamed over the target. Any failure removes the temporary and raises the ``OSError``;
each caller turns it into its own error, naming the path the user gave.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

TMP_SUFFIX = ".tmp"


def _nothing() -> None:
    return None


def replace_file(
    target: Path,
    data: bytes,
    *,
    old: os.stat_result | None = None,
    checkpoint: Callable[[], None] = _nothing,
    sync_parent: bool = False,
) -> None:
    """Write ``data`` over ``target`` atomically. ``old`` is the replaced file's ``stat`` (its mode and owner are
    kept), None for a new file. ``checkpoint`` runs with half the bytes written, before the rename and after it
    (the store's kill tests stop the process there). ``sync_parent`` makes the rename itself durable."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            half = len(data) // 2
            fh.write(data[:half])
            fh.flush()
            checkpoint()  # a temporary holding half the bytes
            fh.write(data[half:])
            fh.flush()
            os.fsync(fh.fileno())
            copy_mode(fh.fileno(), old)
        checkpoint()
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    checkpoint()
    if sync_parent:
        sync_dir(target.parent)


def copy_mode(fd: int, old: os.stat_result | None) -> None:
    """Give the temporary the replaced file's permissions (and owner, where allowed); a new file gets
    what ``open()`` would have given it (0666 less the umask), not mkstemp's 0600."""
    if old is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        return
    with contextlib.suppress(PermissionError):
        os.fchown(fd, old.st_uid, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode))


def sync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a crash of the machine, not only of the process)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
