"""What one input file contributes to a job: the hand-off between an adapter and everything after it.

Adapters build it; the pipeline, the detectors and the metrics read it. It lives in the model so a reader of
these tables never has to import a reader of files.

``SourceData.tables`` holds canonical tables (``samples``, ``records``, ``steps``, ``events``) and
source-specific ones (``nccl_tests``, ``nccl_log``, ``kernel_metrics``, ...): each adapter documents
the schema of the tables it writes next to its reader, with units in column names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from perfsleuth.errors import Caveat


@dataclass(slots=True)
class SourceData:
    """What one input file contributed: its tables, by name, and what limits them."""

    format: str
    path: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    caveats: list[Caveat] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)  # host, gpu model, versions read from the file


def concat(tables: list[pa.Table]) -> pa.Table | None:
    """One table from several sources' parts (schemas unified), or None when there are none."""
    tables = [t for t in tables if t is not None]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")
