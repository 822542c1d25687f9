"""nvidia-smi --query-gpu CSV with no ``index`` column: the GPU a row belongs to comes from its uuid or bus id, else
from its place among the rows of one timestamp, else (one snapshot) from its row number; each way says so in a
caveat. The files are built here, so the right GPU of every row is known by construction."""

from __future__ import annotations

from pathlib import Path

from perfsleuth.ingest.nvidia_smi import read_query


def _power(sd) -> list[tuple[int, float]]:
    df = sd.tables["samples"].to_pandas()
    p = df[df.metric == "power_w"]
    return list(zip(p["gpu"].astype(int), p["value"], strict=True))


def _codes(sd) -> set[str]:
    return {c.code for c in sd.caveats}


def test_uuid_numbers_gpus_by_first_appearance(tmp_path: Path) -> None:
    f = tmp_path / "q.csv"
    rows = ["uuid, power.draw [W]"]
    for k in range(3):  # a -l loop: both GPUs every sample, in nvidia-smi's order
        rows += [f"GPU-aaaa, {100 + k}.00 W", f"GPU-bbbb, {200 + k}.00 W"]
    f.write_text("\n".join(rows) + "\n")
    sd = read_query(f)
    assert sorted(_power(sd)) == sorted([(0, 100.0 + k) for k in range(3)] + [(1, 200.0 + k) for k in range(3)])
    assert "gpu_from_row_order" in _codes(sd)


def test_timestamp_groups_give_row_k_gpu_k(tmp_path: Path) -> None:
    f = tmp_path / "q.csv"
    rows = ["timestamp, power.draw [W]"]
    for s in range(2):
        rows += [f"2024/01/01 00:00:0{s}.000, {10 * s + g}.5 W" for g in range(4)]
    f.write_text("\n".join(rows) + "\n")
    sd = read_query(f)
    assert sorted(_power(sd)) == sorted((g, 10.0 * s + g + 0.5) for s in range(2) for g in range(4))


def test_a_bare_snapshot_reads_row_k_as_gpu_k(tmp_path: Path) -> None:
    f = tmp_path / "q.csv"
    f.write_text("name, power.draw [W]\nA, 1.00 W\nB, 2.00 W\nC, 3.00 W\n")
    sd = read_query(f)
    assert sorted(_power(sd)) == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert "one snapshot" in next(c.message for c in sd.caveats if c.code == "gpu_from_row_order")
