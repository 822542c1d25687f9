"""MIG slices on the real captures: the readers put the instance in ``samples.gpu_instance``, the store keeps it
(and reads an older store without the column as null), and the per-GPU telemetry views keep each slice apart."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from perfsleuth.diagnose.input_views import telemetry_view
from perfsleuth.diagnose.telemetry import build_grid
from perfsleuth.ingest import dcgm
from perfsleuth.store import JobData, Store, StoreWriter
from perfsleuth.store import write as store_write

REAL = Path(__file__).parent / "data" / "real" / "dcgm"
EXPORTER_MIG = ["dcgm_exporter_issue512_h100_mig.txt", "dcgm_exporter_issue317_a30_mig.txt", "dcgm_exporter_pr736_mixed_mig.txt"]
_SAMPLE = re.compile(r"^(DCGM_FI_\w+)\{(.*)\}\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _series_in_text(path: Path) -> dict[tuple[str, int, int | None], list[float]]:
    """(Hostname or hostname, gpu, GPU_I_ID or None) -> the values of the file's sample lines, read from the text itself."""
    out: dict[tuple[str, int, int | None], list[float]] = {}
    for ln in path.read_text().splitlines():
        if m := _SAMPLE.match(ln):
            labels = dict(_LABEL.findall(m.group(2)))
            mig = int(labels["GPU_I_ID"]) if labels.get("GPU_I_ID", "").isdigit() else None
            host = labels.get("Hostname") or labels.get("hostname") or ""
            out.setdefault((host, int(labels["gpu"]), mig), []).append(float(m.group(3)))
    return out


@pytest.mark.parametrize("name", EXPORTER_MIG)
def test_exporter_mig_samples_carry_their_gpu_i_id(name):
    path = REAL / name
    want = _series_in_text(path)
    assert any(k[2] is not None for k in want)  # the capture does show MIG slices
    df = dcgm.read(path).tables["samples"].to_pandas()
    got: dict[tuple[str, int, int | None], list[float]] = {}
    for r in df.itertuples():
        mig = None if r.gpu_instance != r.gpu_instance else int(r.gpu_instance)  # NaN: not a slice
        got.setdefault((r.host or "", int(r.gpu), mig), []).append(r.value)
    assert set(got) == set(want)
    for key, vals in want.items():
        assert sorted(v for v in got[key] if v == v) == sorted(v for v in vals if v < 0x7FFFFFF0), key


def test_exporter_mig_metric_names_stay_plain_and_profiles_are_kept():
    sd = dcgm.read(REAL / "dcgm_exporter_issue512_h100_mig.txt")
    assert not any("GPU_I" in m for m in sd.tables["samples"]["metric"].to_pylist())
    text = (REAL / "dcgm_exporter_issue512_h100_mig.txt").read_text()
    profiles = {(int(i), p) for p, i in re.findall(r'GPU_I_PROFILE="([^"]+)",GPU_I_ID="(\d+)"', text)}
    assert {(d["gpu_instance"], d["profile"]) for d in sd.meta["gpu_instances"]} == profiles


def test_dmon_gpu_i_rows_are_slices_without_a_parent_gpu():
    path = REAL / "dcgm_issue151_mig_gpu_i.txt"
    ids = [int(m.group(1)) for ln in path.read_text().splitlines() if (m := re.match(r"^GPU-I (\d+)\s", ln))]
    sd = dcgm.read_dmon(path)
    t = sd.tables["samples"]
    assert sorted(set(t["gpu_instance"].to_pylist())) == sorted(set(ids))
    assert t["gpu"].null_count == t.num_rows
    assert "mig_parent_unknown" in {c.code for c in sd.caveats}


@pytest.mark.parametrize("name", EXPORTER_MIG)
def test_telemetry_grid_and_view_have_one_row_per_slice(name):
    path = REAL / name
    want = _series_in_text(path)
    sd = dcgm.read(path)
    g = build_grid(sd.tables["samples"])
    assert g is not None
    assert sorted(zip(g.keys, g.instances, strict=True), key=str) == sorted((((h, gpu), i) for h, gpu, i in want), key=str)
    labelled = {g.label(i) for i, mig in enumerate(g.instances) if mig is not None}
    assert labelled == {f"{h}:{gpu}/GI {i}" for h, gpu, i in want if i is not None}
    view = telemetry_view(sd)
    assert view is not None
    names = [c.name for c in view.columns]
    at = names.index("MIG instance")
    assert sorted((r[names.index("GPU")], r[at]) for r in view.rows) == sorted((gpu, i) for _, gpu, i in want)


def test_dmon_slices_are_grid_rows_of_their_own():
    sd = dcgm.read_dmon(REAL / "dcgm_issue151_mig_gpu_i.txt")
    g = build_grid(sd.tables["samples"])
    assert g is not None and len(g.keys) == 7 and all(k[1] == -1 for k in g.keys)
    assert g.label(0) == ":GPU-I 21"


def _job(samples: pa.Table, run: str) -> JobData:
    n = samples.num_rows
    t = samples.append_column("date", pa.array(["2025-01-01"] * n)).append_column("cluster", pa.array([None] * n, pa.string()))
    return JobData(f"{run:0>64}", run, (run,), {}, {"samples": t})


def _mig_samples(run: str) -> pa.Table:
    t = dcgm.read(REAL / "dcgm_exporter_issue512_h100_mig.txt", run_id=run).tables["samples"]
    return t.set_column(0, "run_id", pa.array([run] * t.num_rows))


def test_store_keeps_gpu_instance_and_reads_a_store_written_before_it(tmp_path, duck, monkeypatch):
    old_schema = pa.schema([f for f in store_write.stored_schema("samples") if f.name != "gpu_instance"])
    old = tmp_path / "old"
    current = store_write.stored_schema
    with monkeypatch.context() as m:  # a perfsleuth from before the column: its parts lack it
        m.setattr(store_write, "stored_schema", lambda name: old_schema if name == "samples" else current(name))
        with StoreWriter(old) as w:
            w.add(_job(_mig_samples("a"), "a"))
    assert "gpu_instance" not in store_write.pq.read_schema(next(old.rglob("*.parquet"))).names
    only_old = Store(old).table(duck, "samples").to_pyarrow()
    assert only_old["gpu_instance"].null_count == only_old.num_rows > 0
    with StoreWriter(old) as w:
        w.add(_job(_mig_samples("b"), "b"))
    both = Store(old).table(duck, "samples").to_pyarrow().to_pandas()
    new_rows = both[both.run_id == "b"]
    assert both[both.run_id == "a"].gpu_instance.isna().all()
    want = _mig_samples("b").to_pandas()
    assert sorted(new_rows.gpu_instance.dropna().astype(int)) == sorted(want.gpu_instance.dropna().astype(int))
