"""NCCL_DEBUG=INFO logs -> ``nccl_log`` (one row per rank's communicator) and ``nccl_tuning``.

NCCL prefixes every line with ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO`` (src/debug.cc); lines of
many ranks and hosts arrive interleaved, sometimes behind an mpirun/srun tag or a timestamp, and
sometimes spliced into the middle of another program's line. The ``[n]`` is the CUDA device, not
the rank: a rank is learned from the communicator's ``comm 0x... rank R nRanks N ...`` and
``... Init COMPLETE`` lines, so facts are kept per (host, pid, device) and per communicator.

What is read (format strings from NVIDIA/nccl src/, versions 2.4 to 2.29): the NCCL version; the
network (``NET/IB : Using [0]mlx5_0:1/IB``, ``NET/IB : No device found.``, ``NET/Socket : Using``,
``Using network X``); GPUDirect RDMA (``GPU Direct RDMA Enabled/Disabled ...``, ``/GDRDMA`` on a
channel's NET transport, ``Connected all rings, use ring PXN p GDR g``); channels (``Channel 00/32 :``
ring listings, ``N coll channels, ...``); each channel's transport (``via P2P/IPC``,
``via NET/IB/0/GDRDMA``, ``via SHM/direct``, older ``Ring 00 : a -> b via ...``); the topology
(``nRanks .. nNodes .. localRanks``); ``NCCL_* set by environment to``; and the TUNING lines that
name the algorithm and protocol NCCL chose per call, in both the string form (2.24+) and the
numeric form of 2.20-2.23, decoded with the enums of src/include/device.h (stable since 2.7).

Unknown lines are counted, never fatal. A line that starts like a known one but does not parse is
a malformed line: counted and reported as a caveat with its line numbers. This module reads; it
does not judge transports (``diagnose.nccl`` does).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from perfsleuth.errors import Caveat, InputError
from perfsleuth.ingest.line_wrappers import WrapperStats, unwrap
from perfsleuth.ingest.source import register, sniff
from perfsleuth.model.collectives import canonical_collective
from perfsleuth.model.source import SourceData

NAME = "nccl_log"
DESCRIPTION = "NCCL_DEBUG=INFO log lines (init, transports, channels, TUNING choices), any ranks interleaved"

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
"""NCCL_ALGO_* codes 0..6 (src/include/device.h); 2 was plain ``CollNet`` before 2.14."""
PROTOCOLS = ("LL", "LL128", "Simple")
"""NCCL_PROTO_* codes 0..2."""

_ALGO_NAMES = {a.lower(): a for a in ALGORITHMS} | {
    "collnet": "CollNetDirect",
    "nvls_tree": "NVLSTree",
    "collnet_direct": "CollNetDirect",
    "collnet_chain": "CollNetChain",
}
_PROTO_NAMES = {p.lower(): p for p in PROTOCOLS}


def algorithm_name(token: str) -> str | None:
    """``1`` or ``RING`` or ``Ring`` -> ``Ring``; None when unknown."""
    t = token.strip()
    if t.isdigit():
        i = int(t)
        return ALGORITHMS[i] if i < len(ALGORITHMS) else None
    return _ALGO_NAMES.get(t.lower())


def protocol_name(token: str) -> str | None:
    t = token.strip()
    if t.isdigit():
        i = int(t)
        return PROTOCOLS[i] if i < len(PROTOCOLS) else None
    return _PROTO_NAMES.get(t.lower())


def _f(name: str, typ: pa.DataType, doc: str, unit: str | None = None) -> pa.Field:
    meta = {"doc": doc} | ({"unit": unit} if unit else {})
    return pa.field(name, typ, metadata=meta)


NCCL_LOG = pa.schema(
    [
        _f("run_id", pa.string(), "the log file (one job launch)"),
        _f("file", pa.string(), "path of the file read"),
        _f("host", pa.string(), "host name from the line prefix (None for lines without one)"),
        _f("pid", pa.int64(), "process id from the line prefix"),
        _f("cuda_dev", pa.int32(), "CUDA device from the line prefix's [n] (not the rank)"),
        _f("comm", pa.string(), "communicator pointer as printed (0x...), empty when the log never names it"),
        _f("rank", pa.int32(), "rank in this communicator"),
        _f("nranks", pa.int32(), "ranks in this communicator"),
        _f("nnodes", pa.int32(), "nodes in this communicator (NCCL 2.19+)"),
        _f("local_ranks", pa.int32(), "ranks of this communicator on this node"),
        _f("nccl_version", pa.string(), "e.g. 2.18.3"),
        _f("cuda_version", pa.string(), "CUDA NCCL was built for, e.g. 12.2"),
        _f(
            "network",
            pa.string(),
            "network transport: IB, Socket or a plugin's name (from its NET connections, else "
            "'Using network'); inter-node traffic uses it when nnodes > 1",
        ),
        _f("net_devices", pa.string(), "devices the network plugin listed, as printed (e.g. [0]mlx5_0:1/IB [1]mlx5_1:1/IB)"),
        _f("ib_device_found", pa.bool_(), "NET/IB listed at least one device (False after 'NET/IB : No device found.')"),
        _f("gdr", pa.bool_(), "GPUDirect RDMA in use for network transfers (None when not stated)"),
        _f("gdr_note", pa.string(), "why GDR is off when NCCL says: e.g. 'no module', 'distance 5 > 4'"),
        _f("pxn", pa.int32(), "PXN flag from 'Connected all rings, use ring PXN p GDR g'"),
        _f("channels", pa.int32(), "collective channels (rings) of the communicator"),
        _f("nvls_channels", pa.int32(), "NVLS channels (NCCL 2.18+)"),
        _f("p2p_channels", pa.int32(), "point-to-point channels"),
        _f("transports", pa.string(), "transports of the channel connections, sorted, comma-separated (NET/IB, P2P/IPC, SHM, ...)"),
        _f("net_connections", pa.int32(), "channel connections over the network"),
        _f("net_gdr_connections", pa.int32(), "of which with /GDRDMA"),
        _f("init_complete", pa.bool_(), "'Init COMPLETE' seen for this communicator"),
        _f("env", pa.map_(pa.string(), pa.string()), "NCCL_* variables NCCL reports as set by the environment"),
        _f("warnings", pa.int32(), "NCCL WARN lines of this process and device"),
        _f("first_line", pa.int32(), "first line of the file naming this communicator"),
    ],
    metadata={"table": "nccl_log", "schema_version": "1"},
)

NCCL_TUNING = pa.schema(
    [
        _f("run_id", pa.string(), "the log file"),
        _f("file", pa.string(), "path of the file read"),
        _f("host", pa.string(), "host name"),
        _f("pid", pa.int64(), "process id"),
        _f("cuda_dev", pa.int32(), "CUDA device"),
        _f("rank", pa.int32(), "rank of that process and device in its largest communicator (NCCL prints TUNING on rank 0)"),
        _f("collective", pa.string(), "allreduce, allgather, ... (None in NCCL 2.20-2.22, which did not print it)"),
        _f("bytes", pa.int64(), "bytes of the call as NCCL printed them (count x type size)", "bytes"),
        _f("algo", pa.string(), "algorithm NCCL chose: Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT"),
        _f("proto", pa.string(), "protocol NCCL chose: LL, LL128, Simple"),
        _f("channel_lo", pa.int32(), "first channel used (2.24+)"),
        _f("channel_hi", pa.int32(), "last channel used (2.24+)"),
        _f("model_time_us", pa.float64(), "NCCL's modelled time for the call (2.20-2.23)", "us"),
        _f("calls", pa.int64(), "calls with this choice"),
        _f("first_line", pa.int32(), "first line with this choice"),
    ],
    metadata={"table": "nccl_tuning", "schema_version": "1"},
)


# --- line prefix --------------------------------------------------------------------------------

_TAG = r"(?:\[\d+(?:,\d+)*\](?:<std(?:out|err)>)?:?\s*|\d+:\s+)?"  # mpirun --tag-output, srun --label
_STAMP = r"(?:\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s+)?"
PREFIX_RE = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d{1,19}):(?P<tid>\d+) \[(?P<dev>\d{1,10})\] "
    r"(?:(?P<where>\S+:\d+) )?NCCL (?P<level>INFO|WARN|TRACE|CALL) ?(?P<msg>.*)$"
)
BARE_RE = re.compile(r"^\s*" + _TAG + _STAMP + r"(?:\[(?P<dev>\d{1,10})\] )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
"""A line without the host:pid:tid prefix (some launchers and docs strip it)."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One NCCL line: where it came from and its message."""

    host: str | None
    pid: int | None
    dev: int | None
    level: str
    msg: str


_GLUED_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?(?=[A-Za-z])")
"""The tail of another stream's text glued to an NCCL line's host (``-1node07:123:123 [0] NCCL``)."""


def split_line(line: str, known_hosts: Collection[str] = ()) -> tuple[str, LogLine | None]:
    """(text before an NCCL line, the NCCL line or None). Ranks' output can splice an NCCL line into
    the middle of another line; the text before it is returned so the caller can read it. When that
    text ends in a number glued to the host (stdout and stderr merged without a newline between),
    the number goes back to the text: a host seen whole elsewhere in the file (``known_hosts``)
    decides where the host begins, else the host is taken to start at its first letter."""
    m = PREFIX_RE.search(line)
    if m:
        host, cut = m["host"], m.start()
        if cut > 0 and host not in known_hosts:
            tail = next((h for h in known_hosts if host.endswith(h) and len(h) < len(host)), None)
            if tail is not None:
                cut += len(host) - len(tail)
                host = tail
            elif g := _GLUED_NUMBER.match(host):
                cut += g.end()
                host = host[g.end() :]
        return line[:cut], LogLine(host, int(m["pid"]), int(m["dev"]), m["level"], m["msg"].rstrip())
    b = BARE_RE.match(line)
    if b:
        return "", LogLine(None, None, int(b["dev"]) if b["dev"] else None, b["level"], b["msg"].rstrip())
    return line, None


# --- messages -----------------------------------------------------------------------------------

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _int(text: str, limit: int = _INT32_MAX) -> int:
    """A number of a known line; ValueError (the caller counts the line as malformed) when it is larger than its
    column can hold: no rank, channel or byte count NCCL prints comes near these limits."""
    value = int(text)
    if value > limit:
        raise ValueError(f"{text[:20]} is out of range")
    return value


@dataclass(frozen=True, slots=True)
class Pattern:
    """A known message: ``trigger`` says the line is of this kind, ``full`` must then parse it."""

    kind: str
    trigger: re.Pattern[str]
    full: re.Pattern[str]


def _p(kind: str, trigger: str, full: str) -> Pattern:
    return Pattern(kind, re.compile(trigger), re.compile(full))


_INT = r"(\d+)"
PATTERNS: tuple[Pattern, ...] = (
    _p("version", r"^NCCL version\b", r"^NCCL version (\d+\.\d+\.\d+)\S*?(?:\+cuda(\d+\.\d+))?\s*$"),
    _p(
        "topology",
        r"^comm \S+ rank \S+ nRanks \S+ nNodes\b",
        r"^comm (0x[0-9a-fA-F]+|\(nil\)) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)",
    ),
    _p("init_start", r"\bInit START$", r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)"),
    _p(
        "init_complete",
        r"\bInit COMPLETE$",
        r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)?(?: busId ([0-9a-fA-F]+))?",
    ),
    _p("ib_using", r"^NET/IB ?: ?Using\b", r"^NET/IB ?: ?Using(.*?)(?:;\s*OOB.*)?$"),
    _p("ib_none", r"^NET/IB ?: ?No device found", r"^NET/IB ?: ?No device found\.?$"),
    _p("socket_using", r"^NET/Socket ?: ?Using\b", r"^NET/Socket ?: ?Using (\[\d+\].*)$"),
    _p("using_network", r"^Using network\b", r"^Using network (.+?)\s*$"),
    _p(
        "gdr",
        r"GPU Direct RDMA (?:Enabled|Disabled)",
        r"^(?:NET/(\S+?) ?: ?)?GPU Direct RDMA (Enabled|Disabled) for (?:GPU [0-9a-fA-F]+ / )?HCA (\d+)(?: '([^']*)')?"
        r"(?:\s*\((.*?)\))?",
    ),
    _p("ring_list", r"^Channel \d+(?:/\d+)? :\s*\d[\d\s]*$", r"^Channel (\d+)(?:/(\d+))? :((?:\s+\d+)+)\s*$"),
    _p(
        "transport",
        r"^(?:Channel|Ring) \d+\S* : .* via ",
        r"^(?:Channel|Ring) (\d+)(?:/(\d+))? : (\d+)(?:\[\w+\])? -> (\d+)(?:\[\w+\])? (?:\[(send|receive)\] )?via (.+?)\s*$",
    ),
    _p("connected_rings", r"^Connected all rings", r"^Connected all rings(?:, use ring PXN (\d+) GDR (\d+))?\s*$"),
    _p(
        "channels",
        r"^\d+ coll channels,",
        r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?(\d+) p2p channels, "
        r"(\d+) p2p channels per peer",
    ),
    _p("env", r"^NCCL_\w+ set (?:by environment )?to\b", r"^(NCCL_\w+) set (?:by environment )?to (.*?)\.?\s*$"),
    _p(
        "tuning",
        r"\bBytes -> Algo\b",
        r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?"
        r"(?: time (-?\d+(?:\.\d*)?(?:e[+-]?\d+)?))?\s*$",
    ),
)
KNOWN_NOISE = re.compile(
    r"^(Bootstrap|NET/Plugin|Plugin|cudaDriverVersion|Ring \d+ : \d+ -> \d+ -> \d+|Trees|Tree \d+|Pattern |"
    r"Connected all trees|Connected binomial|NVLS|Setting affinity|"
    r"comm 0x\S+ rank \d+ nranks \d+ cudaDev \d+ busId \S+ - Destroy|P2P Chunksize|threadThresholds|"
    r"Init timings|CC |Launch mode|Check P2P|MNNVL|NCCL_\w+ set to|ENV/Plugin|TUNER/|PROFILER/|RAS |"
    r"Assigned NET|Initialized NET|Failed to initialize NET|Topology detection|TOPO/|===|CPU/|GPU/|NET/|\+ |  |"
    r"Could not|Allocated|Using |DMA-BUF|ncclCommInitRank|Comm config|dlvsym|\s*\d+ : |ncclTopo|ncclP2p|\[Proxy|"
    r"CUDA Dev|include/|[\w./]+\.cc?:\d+ -> \d)"
)
"""Lines NCCL prints that the tables do not need: recognised so they are not counted as unknown."""


@dataclass(slots=True)
class _Comm:
    comm: str = ""
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    ring_total: int | None = None
    ring_ids: set[int] = field(default_factory=set)
    coll_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    transports: Counter = field(default_factory=Counter)
    net_names: Counter = field(default_factory=Counter)
    net_connections: int = 0
    net_gdr: int = 0
    using_network: str | None = None
    pxn: int | None = None
    ring_gdr: int | None = None
    complete: bool = False
    first_line: int = 0


@dataclass(slots=True)
class _Proc:
    """Facts of one process (host, pid): they hold for every device and communicator in it."""

    version: str | None = None
    cuda: str | None = None
    ib_devices: str | None = None
    ib_found: bool | None = None
    socket_devices: str | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Dev:
    comms: list[_Comm] = field(default_factory=list)
    current: _Comm | None = None
    gdr_enabled: int = 0
    gdr_disabled: int = 0
    gdr_note: str | None = None
    warnings: int = 0


@dataclass(frozen=True, slots=True)
class LogEvent:
    """What one NCCL line said, for callers that follow a run (nccl-tests output with INFO lines)."""

    kind: str
    groups: tuple[str | None, ...]
    line: LogLine


_TRANSPORT_KIND = re.compile(r"^(NET)/(.+?)/(\d+)(?:\(\d+\))?((?:/\w+|\(PCI\))*)|^(P2P)/(\w+)|^(SHM)|^(COLLNET)/(\S+?)/")


def transport_of(via: str) -> tuple[str, str | None, bool]:
    """``NET/IB/0/GDRDMA`` -> (``NET/IB``, ``IB``, True); ``P2P/IPC/read`` -> (``P2P/IPC``, None, False);
    older ``direct shared memory`` -> (``SHM``, None, False)."""
    m = _TRANSPORT_KIND.match(via)
    if m and m.group(1):
        return f"NET/{m.group(2)}", m.group(2), "GDRDMA" in (m.group(4) or "")
    if m and m.group(5):
        return f"P2P/{m.group(6)}", None, False
    if m and m.group(7):
        return "SHM", None, False
    if "shared memory" in via:
        return "SHM", None, False
    if "P2P" in via or "direct pointer" in via:
        return "P2P", None, False
    return via.split()[0] if via.split() else via, None, False


class LogParser:
    """Accumulates NCCL lines of one file; ``tables()`` gives ``nccl_log`` and ``nccl_tuning``."""

    def __init__(self, path: Path | str, run_id: str | None = None):
        self.path = str(path)
        self.run_id = run_id or Path(path).name
        self.procs: dict[tuple[str | None, int | None], _Proc] = {}
        self.devs: dict[tuple[str | None, int | None, int | None], _Dev] = {}
        self.tuning: dict[tuple, list] = {}
        self.lines = 0
        self.unknown = 0
        self.malformed: dict[str, list[int]] = {}

    # -- feeding ----------------------------------------------------------------------------------
    def feed(self, lineno: int, ln: LogLine) -> LogEvent | None:
        self.lines += 1
        if (ln.pid or 0) > _INT64_MAX or (ln.dev or 0) > _INT32_MAX:
            self.malformed.setdefault("prefix", []).append(lineno)
            return None
        key = (ln.host, ln.pid, ln.dev)
        dev = self.devs.setdefault(key, _Dev())
        proc = self.procs.setdefault((ln.host, ln.pid), _Proc())
        if ln.level == "WARN":
            dev.warnings += 1
            return None
        if ln.level != "INFO":
            return None
        for pat in PATTERNS:
            if not pat.trigger.search(ln.msg):
                continue
            m = pat.full.search(ln.msg)
            if m is None:
                self.malformed.setdefault(pat.kind, []).append(lineno)
                return None
            try:
                self._apply(pat.kind, m.groups(), lineno, proc, dev, key)
            except ValueError:  # a number too large for its column (handlers convert before they store anything)
                self.malformed.setdefault(pat.kind, []).append(lineno)
                return None
            return LogEvent(pat.kind, m.groups(), ln)
        if not KNOWN_NOISE.match(ln.msg):
            self.unknown += 1
        return None

    def _comm(self, dev: _Dev, lineno: int, ptr: str | None = None) -> _Comm:
        """The communicator a line of this process and device belongs to: the one being set up, or
        a new one when the line names another pointer."""
        cur = dev.current
        if cur is None or (ptr and cur.comm and cur.comm != ptr):
            found = next((c for c in dev.comms if ptr and c.comm == ptr and not c.complete), None)
            cur = found or _Comm(comm=ptr or "", first_line=lineno)
            if found is None:
                dev.comms.append(cur)
            dev.current = cur
        if ptr and not cur.comm:
            cur.comm = ptr
        return cur

    def _apply(self, kind: str, g: tuple, lineno: int, proc: _Proc, dev: _Dev, key: tuple) -> None:
        handler: Callable[..., None] | None = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(g, lineno, proc, dev, key)

    def _on_version(self, g, lineno, proc, dev, key):
        proc.version, proc.cuda = g[0], g[1]

    def _on_topology(self, g, lineno, proc, dev, key):
        numbers = _int(g[1]), _int(g[2]), _int(g[3]), _int(g[4])
        c = self._comm(dev, lineno, g[0])
        c.rank, c.nranks, c.nnodes, c.local_ranks = numbers

    def _on_init_start(self, g, lineno, proc, dev, key):
        rank, nranks = _int(g[1]), _int(g[2])
        c = self._comm(dev, lineno, g[0])
        c.rank, c.nranks = rank, nranks

    def _on_init_complete(self, g, lineno, proc, dev, key):
        rank, nranks = _int(g[1]), _int(g[2])
        c = self._comm(dev, lineno, g[0])
        c.rank, c.nranks, c.complete = rank, nranks, True
        dev.current = None

    def _on_ib_using(self, g, lineno, proc, dev, key):
        devices = g[0].replace("[RO]", "").strip()
        proc.ib_devices = devices or proc.ib_devices
        if re.search(r"\[\d+\]\S+", devices):
            proc.ib_found = True
        elif proc.ib_found is None:
            proc.ib_found = False

    def _on_ib_none(self, g, lineno, proc, dev, key):
        if proc.ib_found is not True:
            proc.ib_found = False

    def _on_socket_using(self, g, lineno, proc, dev, key):
        proc.socket_devices = g[0].strip()

    def _on_using_network(self, g, lineno, proc, dev, key):
        self._comm(dev, lineno).using_network = g[0]

    def _on_gdr(self, g, lineno, proc, dev, key):
        if g[0] == "Socket":
            return  # the socket transport never does RDMA; NCCL says so for every NIC
        if g[1] == "Enabled":
            dev.gdr_enabled += 1
        else:
            dev.gdr_disabled += 1
            dev.gdr_note = g[4] or dev.gdr_note

    def _on_ring_list(self, g, lineno, proc, dev, key):
        ring, total = _int(g[0], _INT32_MAX - 1), (_int(g[1]) if g[1] is not None else None)  # channels = last ring + 1
        c = self._comm(dev, lineno)
        c.ring_ids.add(ring)
        if total is not None:
            c.ring_total = max(c.ring_total or 0, total)

    def _on_transport(self, g, lineno, proc, dev, key):
        c = self._comm(dev, lineno)
        kind, net, gdr = transport_of(g[5])
        c.transports[kind] += 1
        if net is not None:
            c.net_names[net] += 1
            c.net_connections += 1
            c.net_gdr += int(gdr)

    def _on_connected_rings(self, g, lineno, proc, dev, key):
        pxn, ring_gdr = (_int(g[0]), _int(g[1])) if g[0] is not None else (None, None)
        c = self._comm(dev, lineno)
        if pxn is not None:
            c.pxn, c.ring_gdr = pxn, ring_gdr

    def _on_channels(self, g, lineno, proc, dev, key):
        coll, nvls, p2p = _int(g[0]), (_int(g[2]) if g[2] is not None else None), _int(g[3])
        c = self._comm(dev, lineno)
        c.coll_channels, c.nvls_channels, c.p2p_channels = coll, nvls, p2p

    def _on_env(self, g, lineno, proc, dev, key):
        proc.env[g[0]] = g[1].strip().strip('"')

    def _on_tuning(self, g, lineno, proc, dev, key):
        algo, proto = algorithm_name(g[2]), protocol_name(g[3])
        if algo is None or proto is None:
            self.malformed.setdefault("tuning", []).append(lineno)
            return
        coll = canonical_collective(g[0]) if g[0] else None
        lo = _int(g[4]) if g[4] is not None else None
        hi = _int(g[5]) if g[5] is not None else None
        k = (key, coll, _int(g[1], _INT64_MAX), algo, proto, lo, hi)
        model_time_us = float(g[6]) if g[6] is not None else None
        rec = self.tuning.get(k)
        if rec is None:
            self.tuning[k] = [1, lineno, model_time_us]
        else:
            rec[0] += 1

    # -- output -----------------------------------------------------------------------------------
    @staticmethod
    def _main_comm(dev: _Dev) -> _Comm | None:
        return max(dev.comms, key=lambda c: (c.nranks or 0, c.complete), default=None)

    def log_table(self) -> pa.Table:
        rows: list[dict] = []
        for key, dev in self.devs.items():
            host, pid, cdev = key
            proc = self.procs.get((host, pid), _Proc())
            comms = dev.comms or [_Comm(first_line=0)]
            proc_facts = (proc.version, proc.ib_found, proc.socket_devices, proc.env or None)
            if not dev.comms and all(x is None for x in proc_facts) and not dev.gdr_enabled + dev.gdr_disabled + dev.warnings:
                continue
            for c in comms:
                rows.append(self._row(host, pid, cdev, proc, dev, c))
        return pa.Table.from_pylist(rows, schema=NCCL_LOG)

    def _row(self, host, pid, cdev, proc: _Proc, dev: _Dev, c: _Comm) -> dict:
        if c.net_names:
            network: str | None = c.net_names.most_common(1)[0][0]
        elif c.using_network:
            network = c.using_network
        elif proc.ib_found:
            network = "IB"
        elif proc.socket_devices:
            network = "Socket"  # every NCCL version sets up its socket transport only when it is the one used
        else:
            network = None
        if c.net_connections and network not in (None, "Socket"):
            gdr: bool | None = c.net_gdr > 0
        elif c.ring_gdr is not None and network not in (None, "Socket"):
            gdr = bool(c.ring_gdr)
        elif network not in (None, "Socket") and (dev.gdr_enabled or dev.gdr_disabled):
            gdr = dev.gdr_enabled > 0
        else:
            gdr = None
        channels = c.ring_total or (max(c.ring_ids) + 1 if c.ring_ids else None) or c.coll_channels
        devices = proc.ib_devices if network == "IB" or (network is None and proc.ib_found) else proc.socket_devices
        return {
            "run_id": self.run_id,
            "file": self.path,
            "host": host,
            "pid": pid,
            "cuda_dev": cdev,
            "comm": c.comm,
            "rank": c.rank,
            "nranks": c.nranks,
            "nnodes": c.nnodes,
            "local_ranks": c.local_ranks,
            "nccl_version": proc.version,
            "cuda_version": proc.cuda,
            "network": network,
            "net_devices": devices,
            "ib_device_found": proc.ib_found,
            "gdr": gdr,
            "gdr_note": dev.gdr_note if gdr is not True else None,
            "pxn": c.pxn,
            "channels": channels,
            "nvls_channels": c.nvls_channels,
            "p2p_channels": c.p2p_channels,
            "transports": ",".join(sorted(c.transports)) or None,
            "net_connections": c.net_connections,
            "net_gdr_connections": c.net_gdr,
            "init_complete": c.complete,
            "env": list(proc.env.items()) or None,
            "warnings": dev.warnings,
            "first_line": c.first_line,
        }

    def tuning_table(self) -> pa.Table:
        rows = []
        for (key, coll, nbytes, algo, proto, lo, hi), (calls, first, t) in self.tuning.items():
            host, pid, cdev = key
            main = self._main_comm(self.devs[key]) if key in self.devs else None
            rows.append(
                {
                    "run_id": self.run_id,
                    "file": self.path,
                    "host": host,
                    "pid": pid,
                    "cuda_dev": cdev,
                    "rank": main.rank if main else None,
                    "collective": coll,
                    "bytes": nbytes,
                    "algo": algo,
                    "proto": proto,
                    "channel_lo": lo,
                    "channel_hi": hi,
                    "model_time_us": t,
                    "calls": calls,
                    "first_line": first,
                }
            )
        return pa.Table.from_pylist(rows, schema=NCCL_TUNING)

    def caveats(self) -> list[Caveat]:
        out = []
        for kind, lines in self.malformed.items():
            where = ", ".join(str(n) for n in lines[:5]) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
            out.append(
                Caveat(
                    "nccl_log_malformed_line", f"{len(lines)} '{kind}' line(s) did not parse (line {where}); they were skipped", self.path
                )
            )
        return out

    def into(self, data: SourceData) -> None:
        """Add this parser's tables, caveats and counts to ``data``."""
        if self.lines == 0:
            return
        log = self.log_table()
        if log.num_rows:
            data.tables["nccl_log"] = log
        if self.tuning:
            data.tables["nccl_tuning"] = self.tuning_table()
        data.caveats.extend(self.caveats())
        data.meta.update(
            {
                "nccl_lines": self.lines,
                "nccl_unknown_lines": self.unknown,
                "nccl_malformed_lines": sum(len(v) for v in self.malformed.values()),
            }
        )
        versions = sorted({p.version for p in self.procs.values() if p.version})
        if versions:
            data.meta["nccl_version"] = versions[0] if len(versions) == 1 else versions


# --- the adapter ----------------------------------------------------------------------------------

_SNIFF_RE = re.compile(r"\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN) ")


def _text_head(path: Path) -> str | None:
    head = sniff(path)
    if not head or b"\x00" in head[:4096]:
        return None
    return head.decode("utf-8", errors="replace")


def detect(path: Path) -> bool:
    """NCCL INFO/WARN lines in the first 64 KiB, and not nccl-tests output (whose reader takes its
    INFO lines too)."""
    try:
        text = _text_head(path)
    except OSError:
        return False
    if text is None or len(_SNIFF_RE.findall(text)) < 1:
        return False
    from perfsleuth.ingest.nccl_tests import looks_like_nccl_tests

    return not looks_like_nccl_tests(text)


def iter_lines(path: Path) -> Iterable[tuple[int, str]]:
    """Numbered lines of a text file, gzip or not, decoding bytes that are not UTF-8 as replacements."""
    import gzip

    with open(path, "rb") as fh:
        magic = fh.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as fh:
            for i, raw in enumerate(fh, 1):
                yield i, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    except (EOFError, gzip.BadGzipFile) as exc:
        raise InputError(path, f"truncated or corrupt gzip: {exc}") from exc


def read(path: Path) -> SourceData:
    path = Path(path)
    data = SourceData(NAME, str(path))
    parser = LogParser(path)
    wrappers = WrapperStats()
    other = 0
    try:
        for lineno, line in iter_lines(path):
            _before, ln = split_line(wrappers.add(unwrap(line)).text)
            if ln is None:
                other += 1
                continue
            parser.feed(lineno, ln)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if parser.lines == 0:
        raise InputError(
            path, "no NCCL log lines (host:pid:tid [dev] NCCL INFO ...)", hint="run the job with NCCL_DEBUG=INFO and keep its stdout/stderr"
        )
    parser.into(data)
    wrappers.into(data.meta)
    data.meta["other_lines"] = other
    if "nccl_log" not in data.tables:
        data.caveats.append(
            Caveat(
                "nccl_log_no_init",
                "NCCL lines but no communicator facts (version, network, channels): NCCL_DEBUG_SUBSYS may exclude INIT",
                str(path),
            )
        )
    return data


register(NAME, DESCRIPTION, detect, read)
