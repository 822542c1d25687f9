"""The fleet store: canonical tables of many jobs as a partitioned Parquet dataset with a manifest.

``perfsleuth ingest`` adds jobs (``job`` reads one, ``write`` commits it under a lock, parts first and the
manifest last); ``Store`` reads it through an engine (DuckDB or Spark, the same Ibis expressions);
``fleet.leaf`` turns it into the leaf table ``localize --store`` searches. See ``layout`` for the directory form.
The store depends on the model, the engine and the errors only: the ingest command analyses a job and hands the
store its tables.
"""

from perfsleuth.store.reader import Store
from perfsleuth.store.write import JobData, StoreWriter

__all__ = ["JobData", "Store", "StoreWriter"]
