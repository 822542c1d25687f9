"""The one place that lists the non-trace adapters: importing this module registers every one.

Order matters only where two formats could both accept a file: the more specific sniff goes first.
"""

from __future__ import annotations
