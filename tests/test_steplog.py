"""Step logs as tables: Megatron-LM, DeepSpeed and JSON Lines forms, real excerpts, sessions, bad input.

Expected values are read off the fixture lines by hand (see tests/data/steplog/README.md).
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from perfsleuth.errors import InputError
from perfsleuth.ingest import steplog
from perfsleuth.ingest.source import ADAPTERS
from perfsleuth.model import RECORDS
from perfsleuth.stats.changes import changes

DATA = Path(__file__).parent / "data" / "steplog"


def epoch_ns(text: str) -> int:
    return round(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1e6) * 1000


def rows(path: Path) -> list[dict]:
    return steplog.read(path).tables["step_log"].to_pylist()


def codes(sd) -> set[str]:
    return {c.code for c in sd.caveats}


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def megatron_line(
    step: int,
    ms: float,
    *,
    ts: str | None = None,
    loss: float = 2.0,
    extra: str = "",
    skipped: int = 0,
    nan: int = 0,
    scale: float = 1.0,
    total: int = 1000,
) -> str:
    stamp = f" [{ts}]" if ts else ""
    return (
        f"{stamp} iteration {step:8d}/{total:8d} | consumed samples: {step * 16:12d} | elapsed time per iteration (ms): "
        f"{ms:.1f} | learning rate: 1.000000E-04 | global batch size:    16 | lm loss: {loss:.6E} |{extra} loss scale: "
        f"{scale:.1f} | grad norm: 0.500 | number of skipped iterations: {skipped:3d} | number of nan iterations: {nan:3d} |"
    )


# --- real excerpts --------------------------------------------------------------------------------------


def test_adapter_is_registered_and_detects_every_real_excerpt() -> None:
    assert ADAPTERS["steplog"].read is steplog.read
    for p in sorted(DATA.glob("*.log")):
        assert steplog.detect(p), p.name


def test_megatron_2024_line_every_field_by_key() -> None:
    r = rows(DATA / "megatron_lm_issue756.log")
    assert [x["step"] for x in r] == [71, 72, 73]
    first = r[0]
    assert first["time_ns"] == epoch_ns("2024-04-06 03:02:12")
    assert first["step_time_ns"] == 5_361_600_000
    assert first["tflops_per_gpu"] == pytest.approx(243.6)
    assert first["learning_rate"] == pytest.approx(1.42e-5)
    assert first["samples"] == 128
    assert first["loss"] == pytest.approx(1.818812)  # 'lm loss', not the MoE auxiliary loss
    assert dict(first["extra"])["load_balancing_loss"] == pytest.approx(1.013377)
    assert dict(first["extra"])["num zeros"] == 0.0
    assert first["loss_scale"] == 1.0 and first["grad_norm"] == pytest.approx(1.3)
    assert first["skipped"] == 0 and first["nan"] == 0 and first["rank"] == -1
    assert [x["iterations"] for x in r] == [1, 1, 1]  # an excerpt: the first row covers one log interval


def test_megatron_v1_keys_without_colons_and_one_line_timers() -> None:
    sd = steplog.read(DATA / "megatron_lm_issue5_v1.log")
    r = sd.tables["step_log"].to_pylist()
    assert [x["step"] for x in r] == [100, 200, 300, 400]
    assert [x["step_time_ns"] for x in r] == [334_900_000, 313_100_000, 310_500_000, 319_900_000]
    assert r[0]["learning_rate"] == pytest.approx(1.01e-6) and r[0]["loss"] == pytest.approx(10.2002)
    assert dict(r[0]["extra"])["nsp loss"] == pytest.approx(0.5515259)
    assert all(x["time_ns"] is None for x in r)
    assert [x["iterations"] for x in r] == [100, 100, 100, 100]
    timers = sd.tables["step_log_timers"].to_pandas()
    first = timers[timers["step"] == 100].set_index("timer")
    assert first.loc["forward", "max_ns"] == pytest.approx(132.49e6)
    assert first.loc["batch generator", "min_ns"] == pytest.approx(45.29e6)
    assert len(timers) == 4 * 5


def test_timers_before_the_first_iteration_line_have_step_minus_one() -> None:
    sd = steplog.read(DATA / "megatron_lm_nccl_issue743.log")
    (r,) = sd.tables["step_log"].to_pylist()
    assert r["step"] == 30 and r["skipped"] == 1 and r["loss_scale"] == 16384.0
    assert r["loss"] == pytest.approx(10.12573) and dict(r["extra"])["sop loss"] == pytest.approx(0.6911852)
    timers = sd.tables["step_log_timers"].to_pandas()
    assert set(timers["step"]) == {-1} and len(timers) == 15
    assert timers.set_index("timer").loc["optimizer", "max_ns"] == pytest.approx(57.5e6)


def test_megatron_deepspeed_mix_keeps_the_megatron_rows_and_the_deepspeed_timers() -> None:
    sd = steplog.read(DATA / "megatron_deepspeed_issue3742.log")
    assert sd.meta["framework"] == "megatron+deepspeed"
    (r,) = sd.tables["step_log"].to_pylist()
    assert r["step"] == 34 and r["step_time_ns"] == 4_103_100_000
    assert r["samples_per_s"] == pytest.approx(7.799) and r["tflops_per_gpu"] == pytest.approx(112.9)
    assert r["loss"] == pytest.approx(11.18665)
    timers = sd.tables["step_log_timers"].to_pandas()
    ranked = timers[timers["timer_rank"] == 0].set_index("timer")
    assert ranked.loc["forward_microstep", "max_ns"] == pytest.approx(652.42e6)
    assert ranked.loc["step", "max_ns"] == pytest.approx(1172.13e6)
    assert timers[timers["timer_rank"] == -1].set_index("timer").loc["batch generator", "max_ns"] == pytest.approx(0.83e6)


def test_deepspeed_2022_lines_make_one_row_per_step_with_per_row_skips() -> None:
    sd = steplog.read(DATA / "deepspeed_issue1825.log")
    r = sd.tables["step_log"].to_pylist()
    assert [x["step"] for x in r] == [40, 50, 60]
    assert [x["skipped"] for x in r] == [2, 0, 0]  # cumulative 2, 2, 2 in the log
    assert r[0]["time_ns"] == epoch_ns("2022-03-11 02:06:58") + 985_000_000
    assert r[0]["samples_per_s"] == pytest.approx(83.48609168106144) and r[0]["learning_rate"] == 5e-5
    assert r[0]["rank"] == 0 and all(x["step_time_ns"] is None for x in r)
    assert "no_batch_size" in codes(sd)


def test_deepspeed_2020_running_average_gives_interval_step_times() -> None:
    sd = steplog.read(DATA / "deepspeed_cifar10_tutorial.log")
    assert sd.meta["settings"]["train_batch_size"] == "4"
    r = {x["step"]: x for x in sd.tables["step_log"].to_pylist()}
    assert 0 not in r  # 'step=0' is the engine's report while it initialises
    # elapsed(k) = (k - 2) * batch / running_average(k): the mean step between two lines is their difference
    expected = ((100 - 2) * 4 / 1303.6726433398537 - (50 - 2) * 4 / 1292.6411179579866) / 50
    assert r[100]["step_time_ns"] == pytest.approx(expected * 1e9, rel=1e-6)
    assert r[100]["iterations"] == 50 and r[50]["step_time_ns"] is None
    assert r[50]["stream"] == "worker-0:" and r[50]["rank"] == -1
    assert r[50]["time_ns"] == epoch_ns("2020-02-06 19:53:56")
    assert sd.tables["step_log"].column("session").to_pylist() == [0] * 13


# --- the Megatron forms -----------------------------------------------------------------------------------


def test_timer_blocks_saves_settings_and_the_records_row(tmp_path: Path) -> None:
    text = (
        "\n".join(
            [
                "using world size: 8, data-parallel size: 8, tensor-model-parallel size: 1, pipeline-model-parallel size: 1",
                "------------------------ arguments ------------------------",
                "  global_batch_size ............................... 16",
                "  save_interval ................................... 2",
                "  seq_length ...................................... 2048",
                "-------------------- end of arguments ---------------------",
                "> building GPT model ...",
                megatron_line(1, 9000.0, ts="2024-05-01 12:00:09.000000"),
                "(min, max) time across ranks (ms):",
                "    forward-backward ...............................: (850.10, 900.25)",
                "    optimizer ......................................: (10.00, 12.50)",
                megatron_line(2, 1000.0, ts="2024-05-01 12:00:10.000000"),
                "[2024-05-01 12:00:10.100000] saving checkpoint at iteration       2 to /ckpt in torch_dist format",
                "  [2024-05-01 12:00:15.100000] successfully saved checkpoint from iteration       2 to /ckpt [ t 1/1, p 1/1 ]",
                "(min, max) time across ranks (ms):",
                "    save-checkpoint ................................: (4990.00, 5000.00)",
                megatron_line(3, 1000.0, ts="2024-05-01 12:00:16.000000"),
                "max time across ranks (ms):",
                "    forward-backward ...............................: 910.00",
                megatron_line(4, 1000.0, ts="2024-05-01 12:00:17.000000"),
                "times across ranks (ms):",
                "  forward-backward:",
                "     rank  0: 905.00",
                "     rank  1: 920.50",
                megatron_line(5, 1000.0, ts="2024-05-01 12:00:18.000000"),
            ]
        )
        + "\n"
    )
    sd = steplog.read(write(tmp_path, "job-7.log", text))
    assert not sd.caveats
    timers = sd.tables["step_log_timers"].to_pandas()
    fb = timers[timers["timer"] == "forward-backward"].sort_values(["line", "timer_rank"])
    assert fb["step"].tolist() == [1, 3, 4, 4]
    assert fb["min_ns"].iloc[0] == pytest.approx(850.10e6) and fb["max_ns"].iloc[0] == pytest.approx(900.25e6)
    assert np.isnan(fb["min_ns"].iloc[1]) and fb["max_ns"].iloc[1] == pytest.approx(910e6)
    assert fb["timer_rank"].tolist()[2:] == [0, 1] and fb["max_ns"].iloc[3] == pytest.approx(920.5e6)
    save = timers[timers["timer"] == "save-checkpoint"]
    assert save["step"].tolist() == [2] and save["max_ns"].iloc[0] == pytest.approx(5e9)
    ev = sd.tables["step_log_events"].to_pandas()
    saves = ev[ev["kind"].isin(["checkpoint_save", "checkpoint_saved"])]
    assert saves["step"].tolist() == [2, 2]
    assert saves["time_ns"].tolist() == [epoch_ns("2024-05-01 12:00:10.100000"), epoch_ns("2024-05-01 12:00:15.100000")]
    assert set(ev.loc[ev["kind"] == "start", "session"]) == {0}
    st = sd.tables["step_log_settings"].to_pydict()
    settings = dict(zip(st["key"], st["value"], strict=True))
    assert settings["seq_length"] == "2048" and settings["world_size"] == "8"
    rec = sd.tables["records"]
    assert rec.schema.equals(RECORDS, check_metadata=False)
    (r,) = rec.to_pylist()
    assert r["run_id"] == "job-7" and r["unit"] == "run"
    assert r["step_time_ns"] == 1e9  # the median of the rows after the first (which carries start-up)
    assert r["tokens_per_s_per_gpu"] == pytest.approx(16 * 2048 / 1.0 / 8)  # 4096 tokens/s/GPU
    assert r["time_ns"] == epoch_ns("2024-05-01 12:00:09")
    assert dict(r["dims"])["source_format"] == "megatron"


def test_optional_fields_any_subset_and_unknown_fields_kept(tmp_path: Path) -> None:
    lines = [
        " iteration       10/     100 | elapsed time per iteration (ms): 500.0 | lm loss: 3.000000E+00 |",
        " iteration       20/     100 | consumed samples:          320 | elapsed time per iteration (s): 0.5500 | "
        "my new metric: 42.5 | mtp_1 loss: 1.0E+00 | number of nan iterations:   2 | energy per GPU (J/iter/GPU): 310.2 |",
    ]
    r = rows(write(tmp_path, "a.log", "\n".join(lines) + "\n"))
    assert r[0]["step_time_ns"] == 500_000_000 and r[0]["loss"] == 3.0 and r[0]["skipped"] is None
    assert r[1]["step_time_ns"] == 550_000_000 and r[1]["nan"] == 2 and r[1]["loss"] is None
    extra = dict(r[1]["extra"])
    assert extra["my new metric"] == 42.5 and extra["mtp_1 loss"] == 1.0 and extra["energy per GPU (J/iter/GPU)"] == 310.2


def test_a_second_start_opens_a_session_counted_from_the_loaded_checkpoint(tmp_path: Path) -> None:
    head = ["------------------------ arguments ------------------------", "> building GPT model ..."]
    text = (
        "\n".join(
            [
                *head,
                *(megatron_line(s, 1000.0) for s in (10, 20, 30)),
                "saving checkpoint at iteration      30 to /ckpt",
                "  successfully saved checkpoint at iteration      30 to /ckpt",
                megatron_line(40, 1000.0),
                megatron_line(50, 1000.0),
                *head,
                " loading checkpoint from /ckpt at iteration 30",
                "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 30",
                megatron_line(35, 1000.0),
                megatron_line(45, 1000.0),
                megatron_line(55, 1000.0),
            ]
        )
        + "\n"
    )
    sd = steplog.read(write(tmp_path, "r.log", text))
    r = sd.tables["step_log"].to_pylist()
    assert [x["session"] for x in r] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert [x["iterations"] for x in r] == [10, 10, 10, 10, 10, 5, 10, 10]
    ev = sd.tables["step_log_events"].to_pandas()
    loads = ev[ev["kind"] == "checkpoint_load"]
    assert loads["step"].tolist() == [30, 30] and set(loads["session"]) == {1}
    assert sd.meta["sessions"] == 2


def test_iteration_numbers_going_back_without_any_start_line_is_a_restart(tmp_path: Path) -> None:
    text = "\n".join(megatron_line(s, 1000.0) for s in (10, 20, 30, 40, 50, 60, 20, 30, 40)) + "\n"
    r = rows(write(tmp_path, "b.log", text))
    assert [x["session"] for x in r] == [0] * 6 + [1] * 3


def test_launcher_prefixes_give_rank_and_stream(tmp_path: Path) -> None:
    text = (
        "\n".join(
            [
                "[default7]:" + megatron_line(10, 1000.0, ts="2024-05-01 12:00:00"),
                "[lrdn3321:3]:" + megatron_line(10, 1100.0, ts="2024-05-01 12:00:00"),
                "[1,5]<stdout>:" + megatron_line(10, 1200.0),
                "12: " + megatron_line(10, 1300.0),
            ]
        )
        + "\n"
    )
    r = rows(write(tmp_path, "p.log", text))
    assert [(x["rank"], x["stream"]) for x in r] == [(7, "[default7]:"), (3, "[lrdn3321:3]:"), (5, "[1,5]<stdout>:"), (12, "12:")]
    assert [x["step_time_ns"] for x in r] == [1e9, 1.1e9, 1.2e9, 1.3e9]


def test_epoch_nanoseconds_stay_exact_next_to_missing_times(tmp_path: Path) -> None:
    text = megatron_line(10, 5.0, ts="2024-05-01 12:00:00.123456789") + "\n" + megatron_line(20, 5.0) + "\n"
    assert [x["time_ns"] for x in rows(write(tmp_path, "ns.log", text))] == [epoch_ns("2024-05-01 12:00:00") + 123_456_789, None]


# --- bad input --------------------------------------------------------------------------------------------


def test_interleaved_ranks_without_prefix_are_kept_once_per_step_with_a_caveat(tmp_path: Path) -> None:
    lines = []
    for s in (10, 20, 30, 40):
        lines += [megatron_line(s, 1000.0), megatron_line(s, 1040.0)]  # two ranks print the same iteration
    sd = steplog.read(write(tmp_path, "i.log", "\n".join(lines) + "\n"))
    r = sd.tables["step_log"].to_pylist()
    assert [x["step"] for x in r] == [10, 20, 30, 40] and all(x["step_time_ns"] == 1_040_000_000 for x in r)
    assert [x["session"] for x in r] == [0, 0, 0, 0]
    assert "interleaved_ranks" in codes(sd)


def test_interleaved_ranks_with_prefixes_are_kept_per_rank(tmp_path: Path) -> None:
    lines = []
    for s in (10, 20, 30):
        lines += [f"[default{k}]:" + megatron_line(s, 1000.0 + k) for k in (0, 1)]
    sd = steplog.read(write(tmp_path, "k.log", "\n".join(lines) + "\n"))
    r = sd.tables["step_log"].to_pandas()
    assert r.groupby("rank")["step"].apply(list).to_dict() == {0: [10, 20, 30], 1: [10, 20, 30]}
    assert "interleaved_ranks" not in codes(sd)


def test_a_cut_off_last_line_is_dropped_with_a_caveat(tmp_path: Path) -> None:
    full = megatron_line(10, 1000.0) + "\n" + megatron_line(20, 1000.0) + "\n"
    cut = full + megatron_line(30, 1000.0)[:90]
    sd = steplog.read(write(tmp_path, "t.log", cut))
    assert [x["step"] for x in sd.tables["step_log"].to_pylist()] == [10, 20]
    assert "truncated_line" in codes(sd)
    whole_but_no_newline = steplog.read(write(tmp_path, "u.log", full + megatron_line(30, 1000.0)))
    assert [x["step"] for x in whole_but_no_newline.tables["step_log"].to_pylist()] == [10, 20, 30]


def test_garbled_numbers_are_left_empty_and_counted(tmp_path: Path) -> None:
    good = megatron_line(10, 1000.0)
    bad_time = megatron_line(20, 1000.0).replace("1000.0", "10x0.0")
    bad_step = megatron_line(30, 1000.0).replace("      30/", "     3O/")
    bad_loss = megatron_line(40, 1000.0).replace("2.000000E+00", "2.0000#0E+00")
    sd = steplog.read(write(tmp_path, "g.log", "\n".join([good, bad_time, bad_step, bad_loss]) + "\n"))
    r = sd.tables["step_log"].to_pylist()
    assert [x["step"] for x in r] == [10, 20, 40]
    assert r[1]["step_time_ns"] is None and r[1]["loss"] == 2.0
    assert r[2]["loss"] is None and r[2]["step_time_ns"] == 1e9
    assert {"garbled_value", "unparsed_line"} <= codes(sd)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\x01\x02\x03" * 100,
        gzip.compress(b"\x00binary\x01" * 50),
        b"hello world\nthis is not a training log\n",
        b"node,step_time_ms\nn0,100\n",
        b'{"traceEvents": [{"name": "x", "ph": "X", "ts": 1, "dur": 2}]}',
        b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n',  # JSON Lines without any step time
    ],
)
def test_other_files_are_not_step_logs(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "x.log"
    p.write_bytes(content)
    assert steplog.detect(p) is False


def test_reading_a_file_without_iterations_names_the_file(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "setup-only.log",
        "------------------------ arguments ------------------------\n"
        "  seq_length ...................................... 2048\n> building GPT model ...\n",
    )
    with pytest.raises(InputError) as err:
        steplog.read(p)
    assert "setup-only.log" in str(err.value) and "no iteration lines" in str(err.value)
    with pytest.raises(InputError, match="empty"):
        steplog.read(write(tmp_path, "empty.log", ""))


def test_gzip_logs_read_like_plain_ones(tmp_path: Path) -> None:
    src = (DATA / "megatron_lm_issue756.log").read_bytes()
    p = tmp_path / "train.log.gz"
    p.write_bytes(gzip.compress(src))
    assert steplog.detect(p)
    sd = steplog.read(p)
    assert [x["step"] for x in sd.tables["step_log"].to_pylist()] == [71, 72, 73]
    assert sd.tables["records"].column("run_id").to_pylist() == ["train"]


def test_a_cut_gzip_archive_keeps_what_it_holds(tmp_path: Path) -> None:
    text = "".join(megatron_line(s, 1000.0) + "\n" for s in range(10, 410, 10))
    blob = gzip.compress(text.encode())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(blob[: len(blob) * 2 // 3])
    sd = steplog.read(p)
    steps = [x["step"] for x in sd.tables["step_log"].to_pylist()]
    assert "truncated_line" in codes(sd) and 10 <= len(steps) < 40 and steps == list(range(10, 10 * len(steps) + 1, 10))


# --- JSON Lines ----------------------------------------------------------------------------------------------


def jsonl(tmp_path: Path, docs: list, name: str = "s.jsonl") -> Path:
    return write(tmp_path, name, "\n".join(d if isinstance(d, str) else json.dumps(d) for d in docs) + "\n")


def test_jsonl_documented_keys_and_units(tmp_path: Path) -> None:
    p = jsonl(
        tmp_path,
        [
            {"event": "start", "time": "2024-05-01T12:00:00Z"},
            {
                "step": 1,
                "step_time_s": 0.5,
                "tokens": 4096,
                "samples": 8,
                "loss": 2.3,
                "time": 1714564800.5,
                "gpus": 4,
                "lr": 1e-4,
                "grad_norm": 0.7,
                "loss_scale": 1024,
                "skipped": False,
                "nan": 0,
                "tflops_per_gpu": 300.1,
                "mfu_guess": 0.4,
            },
            {"step": 2, "step_time_ms": 510.0, "time": "2024-05-01T12:00:01.010000", "tokens": 4096},
            {"step": 3, "step_time_ns": 490_000_000, "time_ns": 1714564801500000000, "skipped": True, "rank": 2, "tokens": 4096},
            {"step": 4, "step_time_s": 0.5, "time": 1714564802000, "tokens": 4096},  # epoch milliseconds
            {"event": "checkpoint_save", "step": 4, "time": 1714564802.1, "duration_s": 3.5},
        ],
    )
    sd = steplog.read(p)
    assert not sd.caveats
    r = sd.tables["step_log"].to_pylist()
    assert [x["step_time_ns"] for x in r] == [500_000_000, 510_000_000, 490_000_000, 500_000_000]
    assert r[0]["time_ns"] == epoch_ns("2024-05-01 12:00:00") + 500_000_000
    assert r[1]["time_ns"] == epoch_ns("2024-05-01 12:00:01.010000")
    assert r[2]["time_ns"] == 1714564801500000000 and r[2]["skipped"] == 1 and (r[2]["rank"], r[2]["stream"]) == (2, "rank 2")
    assert r[3]["time_ns"] == epoch_ns("2024-05-01 12:00:02")
    assert r[0]["tokens"] == 4096 and r[0]["samples"] == 8 and r[0]["learning_rate"] == 1e-4 and r[0]["skipped"] == 0
    assert dict(r[0]["extra"]) == {"mfu_guess": 0.4}
    ev = sd.tables["step_log_events"].to_pandas()
    save = ev[ev["kind"] == "checkpoint_save"].iloc[0]
    assert save["step"] == 4 and save["duration_ns"] == 3_500_000_000
    (rec,) = sd.tables["records"].to_pylist()
    assert dict(rec["dims"])["world_size"] == "4"
    # steady rows: not the first of a stream (rank 2's row is a stream of its own): 510 and 500 ms
    assert rec["step_time_ns"] == 505_000_000
    assert rec["tokens_per_s_per_gpu"] == pytest.approx(4096 / 0.505 / 4)


def test_jsonl_wrong_types_are_left_empty_with_caveats(tmp_path: Path) -> None:
    p = jsonl(
        tmp_path,
        [
            {"step": 1, "step_time_s": 0.5, "loss": 2.0},
            {"step": 2, "step_time_s": "0.5", "loss": [1, 2]},
            {"step": "three", "step_time_s": 0.5},
            {"step": 4.5, "step_time_s": 0.5},
            "not json at all",
            "[1, 2, 3]",
            {"step": 5, "step_time_s": True, "loss": float("nan")},
        ],
    )
    sd = steplog.read(p)
    r = sd.tables["step_log"].to_pylist()
    assert [x["step"] for x in r] == [1, 2, 5]
    assert r[1]["step_time_ns"] == 500_000_000 and r[1]["loss"] is None
    assert r[2]["step_time_ns"] is None and r[2]["nan"] == 1  # a NaN loss is a NaN iteration
    assert {"numeric_text", "bad_type", "bad_step", "bad_json"} <= codes(sd)


def test_jsonl_milliseconds_under_a_seconds_key_are_flagged_not_rescaled(tmp_path: Path) -> None:
    t0 = 1714564800.0
    docs = [{"step": i, "step_time_s": 500.0 + i % 3, "time": t0 + 0.5 * i} for i in range(1, 21)]
    sd = steplog.read(jsonl(tmp_path, docs))
    assert "implausible_unit" in codes(sd)
    assert sd.tables["step_log"].column("step_time_ns").to_pylist()[0] == 501e9  # kept as written
    untimed = [{"step": i, "step_time_s": 1500.0} for i in range(1, 21)]
    assert "implausible_unit" in codes(steplog.read(jsonl(tmp_path, untimed, "u.jsonl")))
    fine = [{"step": i, "step_time_s": 0.5, "time": t0 + 0.5 * i} for i in range(1, 21)]
    assert "implausible_unit" not in codes(steplog.read(jsonl(tmp_path, fine, "f.jsonl")))


def test_jsonl_cut_off_last_line(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"step": 1, "step_time_s": 0.5}) + "\n" + '{"step": 2, "step_ti')
    sd = steplog.read(p)
    assert [x["step"] for x in sd.tables["step_log"].to_pylist()] == [1]
    assert "truncated_line" in codes(sd) and "bad_json" not in codes(sd)


# --- the history for stats.changes ------------------------------------------------------------------------


def test_step_time_history_feeds_changes_and_finds_the_shift(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    t, docs = 1714564800.0, []
    for i in range(1, 121):
        step_s = (1.0 if i <= 60 else 1.2) * (1 + 0.01 * rng.standard_normal())
        t += step_s
        docs.append({"step": i, "step_time_s": step_s, "time": t})
    h = steplog.step_time_history(steplog.read(jsonl(tmp_path, docs)).tables["step_log"])
    assert h.unit == "s" and len(h.values) == 120 and h.times.dtype == np.dtype("datetime64[ns]")
    report = changes(h.values, times=h.times, unit=h.unit)
    (cp,) = report.change_points
    assert cp.index == 60 and cp.relative_change == pytest.approx(0.2, abs=0.03)


def test_step_time_history_uses_iteration_numbers_without_timestamps() -> None:
    h = steplog.step_time_history(steplog.read(DATA / "megatron_lm_issue5_v1.log").tables["step_log"])
    assert h.times.tolist() == [100, 200, 300, 400]
    assert h.values.tolist() == pytest.approx([0.3349, 0.3131, 0.3105, 0.3199])
    with pytest.raises(InputError):
        steplog.step_time_history(pa.Table.from_pylist([], schema=steplog.STEP_LOG))
