"""The contract every non-trace adapter meets, and the registry that detects formats by content.

An adapter module (``perfsleuth.ingest.<format>``) exposes ``detect(path) -> bool`` (a cheap sniff of
the file's first bytes, never its extension) and ``read(path) -> SourceData``, and registers itself
here with ``register``. ``perfsleuth analyze`` hands every input file to ``detect_format``, so a job's
files can come in any mix and any name.

What an adapter returns, ``SourceData``, is part of the model (``perfsleuth.model.source``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfsleuth.errors import InputError
from perfsleuth.model.source import SourceData

SNIFF_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class Adapter:
    name: str
    description: str
    detect: Callable[[Path], bool]
    read: Callable[[Path], SourceData]
    series: bool = False  # periodic scrapes: a folder of them is one time series, read together


ADAPTERS: dict[str, Adapter] = {}


def register(
    name: str, description: str, detect: Callable[[Path], bool], read: Callable[[Path], SourceData], *, series: bool = False
) -> None:
    """``series=True``: the format comes as periodic scrapes, one file each; ``read`` also accepts the
    folder that holds them (and reads only its own files there), so rates between scrapes can be taken."""
    if name in ADAPTERS:
        raise ValueError(f"adapter {name} registered twice")
    ADAPTERS[name] = Adapter(name, description, detect, read, series)


def sniff(path: Path, n: int = SNIFF_BYTES) -> bytes:
    """The first ``n`` bytes of a file, gunzipped when it is gzip (a truncated archive sniffs what it has), without
    a UTF-8 byte-order mark."""
    import gzip
    import zlib

    with open(path, "rb") as fh:
        head = fh.read(n)
    if head[:2] == b"\x1f\x8b":
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, n)
        except zlib.error:
            return b""
    del gzip
    return head.removeprefix(UTF8_BOM)


UTF8_BOM = b"\xef\xbb\xbf"
"""Windows editors and PowerShell's ``Out-File`` start a UTF-8 file with it; detection and readers skip it."""


def sniff_text(path: Path, n: int = SNIFF_BYTES) -> str:
    return sniff(path, n).decode("utf-8", errors="replace")


def detect_format(path: Path) -> Adapter | None:
    """The registered adapter whose ``detect`` accepts this file (``adapters.FIRST`` first, then in
    registration order)."""
    from perfsleuth.ingest import adapters

    for adapter in sorted(ADAPTERS.values(), key=lambda a: a.name not in adapters.FIRST):
        try:
            if adapter.detect(path):
                return adapter
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from exc
    return None
