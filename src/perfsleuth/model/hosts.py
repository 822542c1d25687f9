"""When two host names are one machine: the rule that joins traces, placement files and telemetry by host.

Schedulers, profilers and exporters spell a host differently (``node07``, ``NODE07``, ``node07.cluster.local``);
every join by host goes through here so a rank and its GPU's telemetry meet under one rule.
"""

from __future__ import annotations


def short_host(host: str) -> str:
    """The host name without its domain, lower case."""
    return host.split(".", 1)[0].lower()


def same_host(a: str, b: str) -> bool:
    return a == b or short_host(a) == short_host(b)


def match_hosts(placed: list[str], seen: list[str]) -> dict[str, str]:
    """Placement host -> the telemetry's spelling of it: the same name, else the same short name (``node07`` and
    ``node07.cluster.local`` are one host), case-insensitive; a short name two telemetry hosts share matches neither."""
    short: dict[str, list[str]] = {}
    for s in seen:
        short.setdefault(short_host(s), []).append(s)
    out = {}
    for h in placed:
        if h in seen:
            out[h] = h
        elif len(short.get(short_host(h), [])) == 1:
            out[h] = short[short_host(h)][0]
    return out
