"""Launcher and logger wrappers around a line, removed before any line-based reader sees it.

Real logs rarely hold a tool's lines as the tool printed them. ``mpirun --tag-output`` puts
``[1,0]<stdout>:`` in front of every line (Open MPI 5 / PRRTE: ``[prterun-host-123@1,0]<stdout>: ``),
``--timestamp-output`` a ``ctime`` stamp before that, ``srun -l`` a task number (``0: ``), pdsh and
clush the host (``node07: ``), torchrun ``--tee`` / ``--log-dir`` the local or global rank
(``[default0]:``, ``[rank3]:``), ``kubectl logs --timestamps`` / docker an RFC 3339 time, journald and
``ts`` a syslog time, and terminals ANSI colour codes and CRLF. A reader that matched its own
patterns against the raw line would miss all of them, or each reader would grow its own partial
copy of these rules; so every line-based reader calls ``unwrap`` instead.

What a wrapper says is evidence, not noise: the rank or host it names is where the line was
written. ``unwrap`` returns it with the text, and ``WrapperStats`` gathers it for a file so the
adapter can keep it in ``SourceData.meta["wrappers"]`` (which ranks and hosts wrote lines, and
which rank ran on which host when one line names both).

A tool's own bracketed timestamp (Megatron's ``[2024-05-01 12:00:00]``, DeepSpeed's logger) is
part of its format and is left in place; only unbracketed stamps in front of the line are removed
(their time is returned as ``time_ns``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
"""CSI sequences (colours, cursor moves), OSC titles and two-byte escapes."""

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_CTIME = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<cmon>[A-Z][a-z]{2}) +(?P<cday>\d{1,2}) (?P<ctime>\d\d:\d\d:\d\d) (?P<cyear>\d{4})"
_MPI_TAG = re.compile(
    r"^(?:" + _CTIME + r")?"
    r"(?:\[(?P<prte>[^\],\[\]]*@)?(?P<job>\d+),(?P<rank>\d+)\])?<(?P<stream>stdout|stderr|stddiag)>:(?(prte) ?)"
)
"""Open MPI ``--tag-output`` / ``--timestamp-output`` (either or both), Open MPI 5 with a PRRTE job name."""
_MPI_BARE = re.compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\](?::|\s)")
"""``[1,0]:`` / ``[1,0] ``: the tag without the stream (older Open MPI ``--tag-output`` on some systems)."""
_MPICH_TAG = re.compile(r"^\[(?P<rank>\d+)\] (?!NCCL )")
"""MPICH / Intel MPI ``-prepend-rank``: ``[3] text``."""
_TORCHRUN = re.compile(r"^\[(?P<kind>default|rank)(?P<n>\d+)\]:")
"""torchrun ``--tee`` / ``--log-dir``: ``[default3]:`` (local rank) and, since 2.2, ``[rank3]:`` (global rank)."""
_HOST_RANK = re.compile(r"^\[(?P<host>[A-Za-z][A-Za-z0-9_.-]*):(?P<rank>\d+)\]:")
"""``[host:rank]:`` (site launch scripts, some torchrun wrappers)."""
_SRUN = re.compile(r"^ *(?P<task>\d{1,6}): ")
"""``srun --label``: the task number, right-aligned for wide jobs."""
_PDSH = re.compile(r"^(?P<host>[A-Za-z][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*): ")
"""pdsh / clush ``host: `` (a host name with a digit in it: ``INFO: `` is not a host)."""
_RANK_WORD = re.compile(r"(?i)rank_?(\d+)")
_RFC3339 = re.compile(r"^(?P<d>\d{4}-\d\d-\d\d)[T ](?P<t>\d\d:\d\d:\d\d)(?P<f>[.,]\d{1,9})?(?P<z>Z|[+-]\d\d:?\d\d)?[ \t]")
"""``kubectl logs --timestamps``, docker ``-t``, ``ts '%Y-%m-%d %H:%M:%S'``: an unbracketed stamp in front."""
_SYSLOG = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) (?P<t>\d\d:\d\d:\d\d)"
    r"(?P<f>\.\d+)?(?: (?P<host>[A-Za-z0-9][\w.-]*) (?P<prog>[\w./-]+)(?:\[(?P<pid>\d+)\])?:)? "
)
"""syslog / journald (``Nov 29 10:11:12 node07 python[123]: ``) and moreutils ``ts`` (``Nov 29 10:11:12 ``)."""

_LEVEL_WORDS = frozenset(
    {
        "info",
        "warning",
        "warn",
        "error",
        "debug",
        "trace",
        "note",
        "fatal",
        "critical",
        "notice",
        "traceback",
        "exception",
        "http",
        "https",
        "file",
        "id",
        "step",
        "epoch",
        "iteration",
    }
)


@dataclass(frozen=True, slots=True)
class Unwrapped:
    """A line with its wrappers removed, and what they said."""

    text: str
    prefix: str = ""  # the launcher tags as written, stripped and joined ('' when none); timestamps excluded
    rank: int | None = None  # global rank (mpirun, torchrun [rankN], srun task, [host:rank])
    local_rank: int | None = None  # torchrun [defaultN]
    host: str | None = None  # pdsh / clush / syslog / [host:rank]
    stream: str | None = None  # stdout / stderr / stddiag (mpirun)
    time_ns: int | None = None  # a wrapper timestamp (RFC 3339, ctime); syslog times have no year: None
    kinds: tuple[str, ...] = ()  # which wrappers were removed, outermost first

    @property
    def placement_rank(self) -> int | None:
        """The rank to file the line under: the global one when a wrapper names it, else the local one."""
        return self.rank if self.rank is not None else self.local_rank


def _epoch_ns(date: str, clock: str, frac: str | None, zone: str | None) -> int | None:
    try:
        t = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError:
        return None
    if zone and zone != "Z":
        z = zone.replace(":", "")
        sign = 1 if z[0] == "+" else -1
        offset = sign * (int(z[1:3]) * 3600 + int(z[3:5]) * 60)
    else:
        offset = 0
    ns = (int(t.replace(tzinfo=UTC).timestamp()) - offset) * 1_000_000_000
    if frac:
        ns += int(frac[1:].ljust(9, "0")[:9])
    return ns


def _ctime_ns(m: re.Match[str]) -> int | None:
    if not m.group("cmon"):
        return None
    month = _MONTHS.get(m.group("cmon"))
    if month is None:
        return None
    return _epoch_ns(f"{m.group('cyear')}-{month:02d}-{int(m.group('cday')):02d}", m.group("ctime"), None, None)


def _looks_like_host(name: str) -> bool:
    return any(ch.isdigit() for ch in name) and name.lower() not in _LEVEL_WORDS and not name.isdigit()


def terminal_text(line: str) -> str:
    """What a terminal would show: ANSI codes gone, a trailing CR gone, and for a line a progress bar
    redrew with bare CRs, the text after the last one that is not blank. A byte-order mark (a file's first line
    as a Windows editor saved it) goes too."""
    line = line.removeprefix("\ufeff")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    line = line.rstrip("\r\n")
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


def unwrap(line: str) -> Unwrapped:
    """Remove the wrappers in front of ``line`` (any number, any order: srun around torchrun, a
    timestamp around mpirun's tag) and return the text with what they named."""
    text = terminal_text(line)
    prefix: list[str] = []
    kinds: list[str] = []
    rank = local_rank = None
    host = stream = None
    time_ns = None
    for _ in range(6):
        if m := _MPI_TAG.match(text):
            kinds.append("mpirun_timestamp" if m.group("cmon") else "mpirun_tag")
            if m.group("rank") is not None:
                rank = int(m.group("rank"))
                kinds[-1] = "mpirun_tag"
                if m.group("cmon"):
                    kinds.append("mpirun_timestamp")
            stream = m.group("stream")
            time_ns = _ctime_ns(m) or time_ns
            tag = m.group(0)
            if m.group("cmon"):
                tag = tag[m.end("cyear") :]
            prefix.append(tag.strip())
        elif m := _TORCHRUN.match(text):
            kinds.append("torchrun")
            if m.group("kind") == "rank":
                rank = int(m.group("n"))
            else:
                local_rank = int(m.group("n"))
            prefix.append(m.group(0))
        elif m := _HOST_RANK.match(text):
            kinds.append("host_rank")
            host, rank = m.group("host"), int(m.group("rank"))
            prefix.append(m.group(0))
        elif m := _MPI_BARE.match(text):
            kinds.append("mpirun_tag")
            rank = int(m.group("rank"))
            prefix.append(m.group(0).strip())
        elif m := _RFC3339.match(text):
            kinds.append("timestamp")
            time_ns = _epoch_ns(m.group("d"), m.group("t"), m.group("f"), m.group("z"))
        elif m := _SYSLOG.match(text):
            kinds.append("syslog")
            if m.group("host"):
                host = m.group("host")
        elif m := _SRUN.match(text):
            kinds.append("srun_label")
            rank = int(m.group("task")) if rank is None else rank
            prefix.append(m.group(0).strip())
        elif (m := _PDSH.match(text)) and _looks_like_host(m.group("host")):
            if (r := _RANK_WORD.fullmatch(m.group("host"))) is not None:
                kinds.append("rank_label")
                rank = int(r.group(1)) if rank is None else rank
            else:
                kinds.append("pdsh")
                host = m.group("host")
            prefix.append(m.group(0).strip())
        elif (m := _MPICH_TAG.match(text)) and len(text) > m.end():
            kinds.append("mpich_rank")
            rank = int(m.group("rank"))
            prefix.append(m.group(0).strip())
        else:
            break
        text = text[m.end() :]
    return Unwrapped(text, "".join(prefix) if len(prefix) < 2 else " ".join(prefix), rank, local_rank, host, stream, time_ns, tuple(kinds))


def unwrap_all(lines: Iterable[str]) -> Iterator[Unwrapped]:
    for line in lines:
        yield unwrap(line)


@dataclass(slots=True)
class WrapperStats:
    """What a file's wrappers said, for ``SourceData.meta["wrappers"]``: placement evidence."""

    kinds: Counter[str] = field(default_factory=Counter)
    ranks: set[int] = field(default_factory=set)
    local_ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    lines: int = 0

    def add(self, u: Unwrapped) -> Unwrapped:
        if u.kinds:
            self.lines += 1
            self.kinds.update(u.kinds)
            if u.rank is not None:
                self.ranks.add(u.rank)
            if u.local_rank is not None:
                self.local_ranks.add(u.local_rank)
            if u.host:
                self.hosts.add(u.host)
                if u.rank is not None:
                    self.rank_hosts.setdefault(u.rank, u.host)
        return u

    def meta(self) -> dict[str, object] | None:
        """The evidence as plain data; None when no line was wrapped."""
        if not self.lines:
            return None
        out: dict[str, object] = {"lines": self.lines, "kinds": dict(sorted(self.kinds.items()))}
        if self.ranks:
            out["ranks"] = sorted(self.ranks)
        if self.local_ranks:
            out["local_ranks"] = sorted(self.local_ranks)
        if self.hosts:
            out["hosts"] = sorted(self.hosts)
        if self.rank_hosts:
            out["rank_hosts"] = {str(k): v for k, v in sorted(self.rank_hosts.items())}
        return out

    def into(self, meta: dict[str, object]) -> None:
        m = self.meta()
        if m is not None:
            meta["wrappers"] = m


def clean_text(text: str) -> tuple[str, WrapperStats]:
    """Every line of ``text`` unwrapped, joined again: for readers that parse a whole table at once
    (``dcgmi dmon``, ``nvidia-smi``). Fixed-width columns survive because a wrapper is removed whole."""
    stats = WrapperStats()
    out = [stats.add(unwrap(line)).text for line in text.splitlines()]
    return "\n".join(out) + ("\n" if text.endswith(("\n", "\r")) else ""), stats
