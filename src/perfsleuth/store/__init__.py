"""The fleet store: canonical tables of many jobs as a partitioned Parquet dataset with a manifest.

``perfsleuth ingest`` adds jobs (``job`` reads one, ``write`` commits it under a lock, parts first and the
manifest last); ``Store`` reads it through an engine (DuckDB or Spark, the same Ibis expressions);
``leaf`` turns it into the leaf table ``localize --store`` searches. See ``layout`` for the directory form.
"""

from perfsleuth.store.reader import Store
from perfsleuth.store.write import JobData, StoreWriter

__all__ = ["JobData", "Store", "StoreWriter"]
