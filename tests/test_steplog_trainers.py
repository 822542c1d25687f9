"""torchtitan and Hugging Face Trainer step logs, and ``trainer_state.json``.

Real excerpts (tests/data/real/steplog/SOURCES.md); the known answers are the numbers in their lines.
"""

from __future__ import annotations

from pathlib import Path

from perfsleuth.ingest import steplog
from perfsleuth.ingest.source import detect_format

REAL = Path(__file__).parent / "data" / "real" / "steplog"
DATA = Path(__file__).parent / "data" / "steplog"


def table(path: Path):
    return steplog.read(path).tables["step_log"].to_pandas()


def test_torchtitan_steps_and_times_from_timestamps() -> None:
    t = table(REAL / "torchtitan_pr3393.log")
    assert list(t["step"]) == list(range(14, 22)) and set(t["rank"]) == {0}
    assert t["step_time_ns"].iloc[1] == 1_118_000_000  # 16:04:47,456 - 16:04:46,338
    assert t["loss"].iloc[-1] == 3.00867 and t["grad_norm"].iloc[0] == 0.8319
    assert t["tflops_per_gpu"].iloc[1] == 0.53
    assert dict(t["extra"].iloc[0])["tokens_per_s_per_gpu"] == 7282.0


def test_torchtitan_every_rank_printing_the_same_line() -> None:
    sd = steplog.read(REAL / "torchtitan_pr2389_all_ranks.log")
    t = sd.tables["step_log"].to_pandas()
    assert list(t["step"]) == [4, 5] and t["step_time_ns"].iloc[1] == 1_637_000_000


def test_hf_trainer_dict_lines() -> None:
    p = REAL / "hf_transformers_pr35207.log"
    assert detect_format(p).name == "steplog"
    sd = steplog.read(p)
    t = sd.tables["step_log"].to_pandas()
    assert list(t["loss"]) == [2.119, 1.6462, 1.5798, 1.6039, 1.2141, 1.1649]
    assert t["learning_rate"].iloc[5] == 2.5e-05 and dict(t["extra"].iloc[3])["epoch"] == 1.0
    assert "steps_by_order" in {c.code for c in sd.caveats} and sd.meta["framework"] == "hf_trainer"


def test_hf_trainer_final_dict_goes_to_settings(tmp_path: Path) -> None:
    p = tmp_path / "t.log"
    p.write_text(
        " 50%|#####     | 5/10 [00:05<00:05,  1.00it/s]\r{'loss': 1.5, 'grad_norm': 2.0, 'learning_rate': 1e-05, "
        "'epoch': 0.5}\n{'train_runtime': 10.5, 'train_samples_per_second': 7.6, 'train_steps_per_second': 0.95, "
        "'train_loss': 1.4, 'epoch': 1.0}\n"
    )
    sd = steplog.read(p)
    assert sd.tables["step_log"].column("loss").to_pylist() == [1.5]
    assert sd.meta["settings"]["train_runtime"] == "10.5"


def test_trainer_state_json() -> None:
    p = DATA / "hf_trainer_state.json"
    assert detect_format(p).name == "steplog"
    sd = steplog.read(p)
    t = sd.tables["step_log"].to_pandas()
    assert list(t["step"]) == [10, 20, 30] and list(t["loss"]) == [2.5, 2.0, 1.5]  # the eval entry is not a step
    assert list(t["iterations"]) == [10, 10, 10]
    assert sd.meta["settings"]["train_runtime"] == "60.0" and sd.meta["settings"]["global_step"] == "30"
