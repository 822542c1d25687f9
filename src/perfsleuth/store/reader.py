"""Reading a fleet store: the committed manifest says which parts exist, the engine reads them.

Readers take no lock and see one commit: the manifest is replaced whole, and parts are never changed
once a manifest names them (a repair rewrites identical bytes). Before a table is handed to the
engine its parts are checked by size (a stat each); a damaged part is named in the error, with the
job that wrote it, and the other tables stay readable. ``Store.records`` flattens the ``dims`` map into
one column per dimension, which is what ``localize --store`` and the fleet report group by.
"""

from __future__ import annotations

from pathlib import Path

import ibis.expr.types as ir
import pyarrow as pa
import pyarrow.parquet as pq
from ibis.backends import BaseBackend

from perfsleuth import engine as engines
from perfsleuth.errors import InputError
from perfsleuth.store import manifest as manifests
from perfsleuth.store.layout import MANIFEST, STORED_TABLES, inside
from perfsleuth.store.manifest import Manifest
from perfsleuth.store.write import Damage, find_damage, stored_schema


class Store:
    """A fleet store opened for reading (the manifest as committed when it was opened)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / MANIFEST).is_file():
            raise InputError(
                self.root, "not a perfsleuth store (no manifest.json)", hint="create one with: perfsleuth ingest JOB... --store DIR"
            )
        self.manifest: Manifest = manifests.load(self.root)

    @property
    def run_ids(self) -> list[str]:
        return [r for j in self.manifest.jobs for r in j.run_ids]

    def dimensions(self) -> tuple[str, ...]:
        """Every dimension a stored record carries, plus the partition columns."""
        keys = {k for j in self.manifest.jobs for k in j.dim_keys}
        return tuple(sorted(keys | {"cluster", "date"}))

    def damage(self, table: str | None = None, *, deep: bool = False) -> list[Damage]:
        """Parts that are missing or changed (``deep``: compare content hashes, reading every part)."""
        tables = [table] if table else list(STORED_TABLES)
        found = [d for t in tables for d in find_damage(self.root, self.manifest.parts(t), deep=deep)]
        if deep:
            found += [d for t in tables for d in self._unreadable(t) if d.path not in {x.path for x in found}]
        return found

    def table(self, con: BaseBackend, name: str) -> ir.Table:
        """The stored ``name`` table on the engine (an empty table with the stored schema when nothing is stored)."""
        if name not in STORED_TABLES:
            raise InputError(self.root, f"no table {name!r} in a store", hint=f"tables are: {', '.join(STORED_TABLES)}")
        parts = self.manifest.parts(name)
        if not parts:
            return engines.table(con, stored_schema(name).empty_table())
        self._raise_on(find_damage(self.root, parts, deep=False))
        try:
            return _with_columns_added(engines.parquet_files(con, [str(inside(self.root, p.path)) for p in parts]), name)
        except Exception as exc:  # the engine's own error types; name the part when one is to blame
            self._raise_on(self.damage(name, deep=True))
            raise InputError(
                self.root, f"the {engines.engine_name(con)} engine cannot read the {name} table: {str(exc).splitlines()[0]}"
            ) from None

    def records(self, con: BaseBackend) -> ir.Table:
        """The records with one string column per dimension (the ``dims`` map flattened; a dimension wins over
        a records column of the same name, e.g. ``gpu_sku``, where the run states it)."""
        t = self.table(con, "records")
        keys = [k for k in self.dimensions() if k not in ("date", "cluster")]
        flat = {k: (t.dims[k].fill_null(t[k].cast("string")) if k in t.columns else t.dims[k]) for k in keys}
        return t.mutate(**flat).drop("dims") if flat else t.drop("dims")

    def _unreadable(self, table: str) -> list[Damage]:
        out = []
        for part in self.manifest.parts(table):
            path = inside(self.root, part.path)
            try:
                pq.read_table(path)
            except (OSError, pa.ArrowException) as exc:
                out.append(Damage(part, path, f"unreadable Parquet: {str(exc).splitlines()[0]}"))
        return out

    def _raise_on(self, damage: list[Damage]) -> None:
        if not damage:
            return
        d = damage[0]
        job = next(j for j in self.manifest.jobs if d.part in j.parts)
        more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
        raise InputError(
            d.path,
            f"damaged store part: {d.problem}{more}",
            place=f"{d.part.table} of run {', '.join(job.run_ids)}",
            hint=f"re-ingest {job.source} to rewrite it; the other tables stay readable",
        )


def _with_columns_added(t: ir.Table, name: str) -> ir.Table:
    """``t`` with the stored schema's columns its parts lack, as typed nulls: parts written before a nullable
    column was added (``samples.gpu_instance``) read as if they had it, and the engine unites old and new parts by
    name."""
    import ibis

    missing = {f.name: ibis.null(ibis.dtype(f.type)) for f in stored_schema(name) if f.name not in t.columns}
    return t.mutate(**missing) if missing else t
