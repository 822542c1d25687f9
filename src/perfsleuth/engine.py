"""The one place that connects perfsleuth to a query engine.

Fleet analyses are written once as Ibis expressions; this module hands them a backend. DuckDB is
the default (embedded, nothing to start). Spark runs the very same expressions: a local session
sized for a small machine (two cores in CI), or a cluster when ``master`` names one. Inputs become
Ibis tables here (a pyarrow table, or a CSV/Parquet path read by the engine itself), and small
results come back as Arrow. Nothing here computes a metric.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import ibis
import ibis.expr.operations as ops
import pyarrow as pa
from ibis.backends import BaseBackend

from perfsleuth.errors import InputError

ENGINES = ("duckdb", "spark")
DUCKDB_MEMORY_ENV = "PERFSLEUTH_DUCKDB_MEMORY_LIMIT"
"""DuckDB's memory_limit (e.g. 1GB): above it DuckDB spills to disk instead of growing (benchmarks/bench_memory.py)."""
# Local Spark tuned for a 2-core machine: few shuffle partitions (the default 200 costs seconds of task
# overhead on small tables), no UI, Arrow transfers, and adaptive execution to coalesce what is left.
SPARK_LOCAL_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "4g",
    "spark.sql.ansi.enabled": "false",
    "spark.sql.caseSensitive": "true",
}


def connect(
    engine: str = "duckdb",
    *,
    master: str | None = None,
    threads: int | None = None,
    spark_conf: dict[str, str] | None = None,
    spark_session: Any | None = None,
) -> BaseBackend:
    """An Ibis backend for ``engine``.

    DuckDB: an in-memory database (``threads`` caps its worker threads). Spark: ``spark_session`` when
    given (tests share one), else a session built for ``master`` (default ``local[2]``) with
    ``SPARK_LOCAL_CONF`` plus ``spark_conf``.
    """
    require(engine)
    if engine == "duckdb":
        con = ibis.duckdb.connect()
        if threads:
            con.raw_sql(f"SET threads = {int(threads)}")
        if limit := os.environ.get(DUCKDB_MEMORY_ENV, "").strip():  # else DuckDB's own: 80% of RAM
            try:
                con.raw_sql(f"SET memory_limit = '{limit.replace(chr(39), '')}'")
            except duckdb.Error as exc:
                raise InputError(None, f"{DUCKDB_MEMORY_ENV}={limit!r} is not a memory size ({exc})", hint="e.g. 2GB") from None
        return con
    session = spark_session or local_spark_session(master=master, conf=spark_conf)  # engine == "spark"
    con = ibis.pyspark.connect(session)
    return con


def require(engine: str) -> None:
    """An InputError unless ``engine`` is one of ``ENGINES`` (verbs check it before opening any file)."""
    if engine not in ENGINES:
        raise InputError(None, f"unknown engine {engine!r}", hint=f"use one of: {', '.join(ENGINES)}")


def local_spark_session(master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession (created once per process; Spark allows one active context)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise InputError(None, "the spark engine needs pyspark", hint="pip install 'ibis-framework[pyspark]'") from exc
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this interpreter
    builder = SparkSession.builder.master(master or "local[2]").appName("perfsleuth")
    for key, value in {**SPARK_LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, a cluster URL that does not answer, ...
        raise InputError(
            None,
            f"cannot start Spark ({master or 'local[2]'}): {str(exc).splitlines()[0]}",
            hint="Spark needs a Java 17 runtime (JAVA_HOME) and, for a cluster, a reachable master URL",
        ) from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def engine_name(con: BaseBackend) -> str:
    """``duckdb`` or ``spark`` for a backend made by ``connect``."""
    return "spark" if con.name == "pyspark" else con.name


def table(con: BaseBackend, data: pa.Table | str | Path, name: str | None = None) -> ibis.Table:
    """An Ibis table on ``con`` for an Arrow table, or for a CSV/Parquet file read by the engine."""
    if isinstance(data, pa.Table):
        name = name or _fresh_name()
        upload(con, name, data)
        return con.table(name)
    path = Path(data)
    if not path.exists():
        raise InputError(path, "no such file")
    is_parquet = path.is_dir() or _is_parquet(path)
    name = name or _fresh_name()
    try:
        raw = con.read_parquet(str(path), table_name=_fresh_name()) if is_parquet else con.read_csv(str(path), table_name=_fresh_name())
        # Engines read files lazily: decode every value now, so that a corrupt page or a bad CSV row is
        # reported here as this file's error, not as an engine error in the middle of an analysis.
        materialize(con, name, raw)
    except Exception as exc:  # engines raise their own types for unreadable files
        raise InputError(path, f"the {engine_name(con)} engine cannot read it: {str(exc).splitlines()[0]}") from None
    table = con.table(name)
    if any("\x00" in c for c in table.columns):  # DuckDB keeps it, Ibis's Arrow results then cannot find the column
        raise InputError(path, "a column name holds a NUL byte", place="header", hint="the file is corrupted")
    return table


def parquet_files(con: BaseBackend, files: list[str], name: str | None = None) -> ibis.Table:
    """An Ibis table over exactly these Parquet files, their columns united by name (older files may lack
    newer columns). A dataset's manifest, not a directory listing, says which files belong to it; no
    hive-path inference (partition values are columns inside the files). Engine errors propagate."""
    name = name or _fresh_name()
    if engine_name(con) == "duckdb":
        return con.read_parquet(files, table_name=name, union_by_name=True, hive_partitioning=False)
    _spark(con).read.option("mergeSchema", "true").parquet(*files).createOrReplaceTempView(name)
    return con.table(name)


def to_arrow(expr: ibis.Expr) -> pa.Table:
    """Run ``expr`` and return its (small) result as Arrow, typed as the expression's schema says.

    A table on DuckDB runs as its compiled SQL and its columns are cast here: Ibis's own DuckDB
    ``to_pyarrow`` imports pandas (0.2 s of a CLI run) only to define a converter Arrow results never use."""
    if isinstance(expr, ibis.Table) and not expr.op().find(_NEEDS_REGISTERING):
        con = backend_of(expr)
        if engine_name(con) == "duckdb":
            return _typed(run_sql(con, str(con.compile(expr))), expr.schema().to_pyarrow())
    return expr.to_pyarrow()


# What Ibis puts on the engine just before it runs an expression: such expressions go through Ibis's own execution.
_NEEDS_REGISTERING = (ops.InMemoryTable, ops.ScalarUDF, ops.AggUDF)


def _typed(result: pa.Table, schema: pa.Schema) -> pa.Table:
    """``result`` with each column cast to its type in ``schema`` (DuckDB returns e.g. a 128-bit integer
    for a sum of int64, which Ibis types int64); a column of nulls typed null stays all nulls."""
    if result.schema == schema:
        return result
    columns = [
        pa.nulls(len(result), field.type) if pa.types.is_null(field.type) else result.column(field.name).cast(field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def backend_of(expr: ibis.Expr) -> BaseBackend:
    """The backend an expression's tables live on."""
    return ibis.get_backend(expr)


def table_name(expr: ibis.Table) -> str | None:
    """The name when ``expr`` is a plain reference to a table on the engine (then its SQL can be cached)."""
    op = expr.op()
    return op.name if isinstance(op, ops.DatabaseTable) else None


# --- compiled once, run many times ------------------------------------------------------------------
# Ibis builds and compiles an expression in 10-150 ms, while the engine runs a query over a small
# table in a few. Searches that run the same query shape many times (per round, per instance of a
# benchmark) compile it once per backend and shape, against tables with fixed names that
# ``materialize`` replaces between runs. The SQL is still the Ibis expression's, compiled for the
# backend; only the text is reused.

_SQL_CACHE: dict[tuple, str] = {}


def compiled(con: BaseBackend, key: tuple, build: Callable[[], ibis.Expr]) -> str:
    """The SQL of ``build()`` on ``con`` (compiled on first use of ``key``, then reused)."""
    full_key = (engine_name(con), *key)
    sql = _SQL_CACHE.get(full_key)
    if sql is None:
        sql = str(con.compile(build()))
        if len(_SQL_CACHE) > 4096:
            _SQL_CACHE.clear()
        _SQL_CACHE[full_key] = sql
    return sql


def run_sql(con: BaseBackend, sql: str) -> pa.Table:
    """Run SQL compiled by ``compiled`` and return the (small) result as Arrow."""
    if engine_name(con) == "duckdb":
        return con.con.sql(sql).to_arrow_table()
    return con.raw_sql(sql).toArrow()


def materialize(con: BaseBackend, name: str, expr: ibis.Table | str, *, view: bool = False) -> None:
    """Compute ``expr`` (an expression, or SQL from ``compiled``) into the table ``name``, replacing it.

    DuckDB: a temporary table. Spark: a temporary view, cached so that the queries that follow read
    it from memory rather than recomputing it. With ``view`` nothing is computed: a cheap filter or
    projection that is read once or twice is not worth storing.
    """
    sql = expr if isinstance(expr, str) else str(con.compile(expr))
    if engine_name(con) == "duckdb":
        create = f'CREATE OR REPLACE TEMP {"VIEW" if view else "TABLE"} "{name}" AS {sql}'
        try:
            con.con.execute(create)
        except duckdb.CatalogException:  # a table where a view goes, or the reverse
            drop(con, name)
            con.con.execute(create)
    else:
        session = _spark(con)
        if session.catalog.tableExists(name):
            session.catalog.uncacheTable(name)
        session.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{name}` AS {sql}")
        if not view:
            session.catalog.cacheTable(name)


def upload(con: BaseBackend, name: str, data: pa.Table) -> None:
    """Put a small Arrow table on the engine under ``name`` (replacing it): parameters of a compiled query."""
    if engine_name(con) == "duckdb":
        con.con.register(name, data)
    else:  # straight from Arrow: a pandas detour would turn nulls into NaN, which Spark counts as values
        _spark(con).createDataFrame(_plain(data)).createOrReplaceTempView(name)


Columns = Mapping[str, tuple[str, Sequence[Any]]]
"""A small table as Python lists: column name -> (Ibis type name: int64, float64 or string; its values)."""
_DUCKDB_TYPES = {"int64": "BIGINT", "float64": "DOUBLE", "string": "VARCHAR"}
_ARROW_TYPES = {"int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}


def upload_columns(con: BaseBackend, name: str, columns: Columns) -> None:
    """Put a small table given as Python lists on the engine under ``name`` (replacing it), as ``upload`` does.

    DuckDB: a temporary table made by one statement that takes the lists as its parameters. No Arrow in
    between: pyarrow imports pandas (0.2-0.3 s) the first time it converts a Python list, and a CLI run
    needs nothing else of pandas."""
    if engine_name(con) != "duckdb":
        upload(con, name, pa.table({c: pa.array(list(v), _ARROW_TYPES[kind]) for c, (kind, v) in columns.items()}))
        return
    picks = ", ".join(f'UNNEST(${i}::{_DUCKDB_TYPES[kind]}[]) AS "{c}"' for i, (c, (kind, _v)) in enumerate(columns.items(), 1))
    create = f'CREATE OR REPLACE TEMP TABLE "{name}" AS SELECT {picks}'
    values = [list(v) for _kind, v in columns.values()]
    try:
        con.con.execute(create, values)
    except duckdb.CatalogException:  # ``upload`` left a view of that name
        drop(con, name)
        con.con.execute(create, values)


def drop(con: BaseBackend, name: str) -> None:
    """Forget a table made by ``materialize``."""
    if engine_name(con) == "duckdb":
        kinds = con.con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = ?", [name]).fetchall()
        for (kind,) in kinds:
            con.con.execute(f'DROP {"VIEW" if kind == "VIEW" else "TABLE"} IF EXISTS "{name}"')
    else:
        session = _spark(con)
        if session.catalog.tableExists(name):
            session.catalog.uncacheTable(name)
            session.catalog.dropTempView(name)


def _spark(con: BaseBackend) -> Any:
    """The SparkSession behind an Ibis PySpark backend (Ibis keeps it on the backend)."""
    return con._session


def _plain(data: pa.Table) -> pa.Table:
    """Dictionary-encoded columns decoded (Spark's Arrow reader takes plain types)."""
    fields = [pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in data.schema]
    return data.cast(pa.schema(fields))


def _is_parquet(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


_COUNTER = iter(range(1 << 62))


def _fresh_name() -> str:
    return f"perfsleuth_t{next(_COUNTER)}"
