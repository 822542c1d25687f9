"""How every verb hands over its result: to ``--out`` or to stdout, without damaging what is there.

``--out`` may name anything a user can type, including ``/dev/null``, a FIFO another program reads,
or a directory by mistake — and perfsleuth often runs as root. So what is written depends on what
the path is (:func:`write_output`):

- a regular file, or a path that does not exist yet: written whole to a temporary beside it, flushed,
  then renamed over it, so a reader (or a second perfsleuth writing the same path) sees the old file
  or one complete new one, never half of either; a replaced file keeps its mode (and owner, as root);
  if the write fails (a full disk, a file-size limit) the temporary is removed and the target is as it was;
- ``-``: standard output;
- a character device, a FIFO: opened for writing as it is (no create, no truncate) and written directly;
- a Unix socket: connected to, and the result sent;
- a symbolic link: what it points to, by these same rules (the link itself stays);
- a directory, a block device (a disk) or anything else: refused with an error naming it, untouched.

A path that cannot be written is a user error (status 2), never a traceback.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any

from perfsleuth.errors import OutputError, PerfsleuthError
from perfsleuth.files import replace_file
from perfsleuth.report.escape import json_document, terminal_block

STDOUT = "-"


def fail(message: str) -> int:
    """Print ``perfsleuth: error: ...`` to stderr and return the user-error status. The message may quote
    an input (a column name, a path), so control characters are made visible, not sent."""
    print(f"perfsleuth: error: {terminal_block(message)}", file=sys.stderr)
    return 2


def is_stdout(out: Path | str | None) -> bool:
    """True when the result goes to standard output: no ``--out``, or ``--out -``."""
    return out is None or str(out) == STDOUT


def write_output(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` in the way that fits what ``path`` is (see the module docstring).

    Raises :class:`OutputError` naming the path when it is refused or cannot be written."""
    if str(path) == STDOUT:
        _write_stdout(text)
        return
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        _replace_regular(path, target, text.encode("utf-8"), None)
        return
    except OSError as exc:
        raise _cannot(path, exc) from exc
    _write_existing(path, target, text.encode("utf-8"), st)


def _write_existing(path: Path, target: Path, data: bytes, st: os.stat_result) -> None:
    """Dispatch on the kind of file already at ``target``: only a regular file is ever replaced."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        _replace_regular(path, target, data, st)
    elif stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        _write_in_place(path, target, data)
    elif stat.S_ISSOCK(mode):
        _send_to_socket(path, target, data)
    elif stat.S_ISDIR(mode):
        raise OutputError(path, "is a directory", place="--out", hint=f"name a file inside it, e.g. {path}/report.html")
    elif stat.S_ISBLK(mode):
        raise OutputError(
            path,
            "is a block device (a disk); perfsleuth writes reports to files, pipes and character devices only",
            place="--out",
            hint="name a file",
        )
    else:
        raise OutputError(path, "is not a file, a pipe, a socket or a character device", place="--out", hint="name a file")


def _write_stdout(text: str) -> None:
    """``--out -``: the result on standard output, as if no ``--out`` had been given."""
    sys.stdout.write(text)
    sys.stdout.flush()


def _write_in_place(path: Path, target: Path, data: bytes) -> None:
    """A character device or FIFO: open it as it is — never created, truncated, renamed or chmod-ed —
    and write every byte (a FIFO blocks until someone reads it, as ``cat > fifo`` would)."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NOCTTY)
    except OSError as exc:
        raise _cannot(path, exc) from exc
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise _cannot(path, exc) from exc
    finally:
        os.close(fd)


def _send_to_socket(path: Path, target: Path, data: bytes) -> None:
    """A Unix socket: connect to its listener and send the result; the socket file is left alone."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(target))
            sock.sendall(data)
    except OSError as exc:
        raise _cannot(path, exc) from exc


def _replace_regular(path: Path, target: Path, data: bytes, old: os.stat_result | None) -> None:
    """Write ``data`` over ``target`` through ``files.replace_file``: a unique temporary (two perfsleuths writing
    one report never share it) with the replaced file's mode and owner, removed on any failure, so a full disk
    leaves ``target`` exactly as it was."""
    try:
        replace_file(target, data, old=old)
    except OSError as exc:
        raise _cannot(path, exc) from exc


def _cannot(path: Path, exc: OSError) -> OutputError:
    """The one-line error for an ``--out`` the system would not let us write."""
    return OutputError(
        path, f"cannot write: {exc.strerror or exc}", place="--out", hint="check the path, its permissions and the free space"
    )


def deliver(text: str, out: Path | str | None) -> int:
    """Send a rendered result to ``out`` or stdout; 0, or 2 when ``out`` cannot be written."""
    if not text.endswith("\n"):
        text += "\n"
    if out is None or is_stdout(out):
        _write_stdout(text)
        return 0
    try:
        write_output(out, text)
    except PerfsleuthError as exc:
        return fail(str(exc))
    return 0


def deliver_doc(doc: dict[str, Any], text: str, format: str, out: Path | str | None, title: str | None = None) -> int:
    """JSON of ``doc`` when ``format`` is json, the text rendering as a Markdown block or an HTML page
    (titled ``title``) for md and html, else the text itself, through :func:`deliver`."""
    if format == "json":
        return deliver(json_document(doc), out)
    from perfsleuth.report.text_pages import page

    return deliver(page(format, title or "perfsleuth", text), out)
