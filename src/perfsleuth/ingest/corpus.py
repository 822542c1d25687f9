"""Which tool versions the real-file corpus covers, per format, for ``perfsleuth formats``.

A reader is only as good as the files it was checked on. tests/data/real/manifest.json lists the
real public files the tests read, with their sources and the tool version that wrote each; this
table is its summary, packaged so the command can say it without the tests being installed.
``tests/test_real_corpus.py`` fails when the two disagree.
"""

from __future__ import annotations

REAL_CORPUS: dict[str, tuple[int, tuple[str, ...]]] = {
    "dcgm_exporter": (
        10,
        (
            "dcgm-exporter (GPU Operator 24.9.2) on L40S",
            "dcgm-exporter 2.0.13 (DCGM 2.1.2), a blank-sentinel value",
            "dcgm-exporter 2.x on Kubernetes (pod labels), a blank-sentinel value",
            "dcgm-exporter 2.x/3.x names",
            "dcgm-exporter 3.x on A30 MIG (4 instances per GPU)",
            "dcgm-exporter 3.x on H100 (driver 550, pod labels)",
            "dcgm-exporter 3.x on H100 MIG (driver 535, GPU_I_ID labels)",
            "dcgm-exporter 3.x on V100 (counter family)",
            "dcgm-exporter 4.x (mixed models, MIG and pod labels, lower-case hostname)",
            "dcgm-exporter on GB200 (DCGM_FI_DEV_NVLINK_COUNT_* counters, 2025)",
        ),
    ),
    "dcgmi_dmon": (
        4,
        (
            "DCGM 3.x dcgmi dmon",
            "DCGM 3.x dcgmi dmon -g on MIG (GPU-I entities, 1001-1004)",
            "DCGM 4.2.3 dcgmi dmon -e 1001-1008 (8 GPUs, N/A mixed with values)",
            "DCGM 4.2.3 dcgmi dmon -e 1002 (every value N/A)",
        ),
    ),
    "inference_bench": (
        19,
        (
            "AIPerf 0.1-0.2 profile_export_aiperf.csv (statistics table + Metric,Value totals)",
            "AIPerf 0.1-0.2 profile_export_aiperf.json (metric blocks under 'records', cancelled requests)",
            "AIPerf 0.8.0 profile_export_aiperf.csv (error rows, sum column)",
            "AIPerf 0.8.0 profile_export_aiperf.csv (sum column, 2M requests)",
            "AIPerf 0.8.0 profile_export_aiperf.json (1M requests, no errors, no error_request_count block)",
            "AIPerf 0.8.0 profile_export_aiperf.json (schema 1.0, phases, against a mock server)",
            "SGLang 0.4.0.post2 bench_serving (summary cut in the thread)",
            "SGLang 0.5 bench_serving (P95/Max ITL)",
            "SGLang 0.5 bench_serving (vision tokens, Concurrency)",
            "SGLang 0.5.x bench_serving (peak throughput, P90/P95 E2E)",
            "SGLang bench_serving against vLLM (quoted with '> ')",
            "trtllm-bench 0.17.0 throughput (PyTorch backend banner)",
            "trtllm-bench 0.17.0 throughput (TensorRT engine, [TRT-LLM] [I] log lines, no latency percentiles)",
            "trtllm-bench 0.21 (latency breakdown, dataset details)",
            "trtllm-bench 1.1.0rc1 (PyTorch backend, setup sections)",
            "trtllm-bench 1.x throughput, multimodal (REQUEST DETAILS, EP Size None, [Latency] breakdown, dataset percentiles)",
            "trtllm-bench throughput (PyTorch backend, 2025)",
            "vllm bench serve 0.11+ (peak throughput, failed requests)",
            "vllm bench serve 0.9 (2025-05, openai-chat, ShareGPT via hf)",
        ),
    ),
    "nccl_log": (
        11,
        (
            "NCCL 2.18",
            "NCCL 2.20-2.23",
            "NCCL 2.4",
            "NCCL 2.x INFO lines ('Channel NN : r[busId]')",
            "NCCL 2.x INFO lines ('Channel NN : r[busId]', threadThresholds)",
            "NCCL 2.x INFO lines ('Channel NN/0 : r[busId]')",
            "NCCL 2.x INFO lines ('Channel NN/0 : r[dev]', device indices)",
        ),
    ),
    "nccl_tests": (
        23,
        (
            "nccl-tests 2.18.0, NCCL 2.29.7, mpirun --tag-output with stderr lines, #  Rank device lines (RTX 5090)",
            "nccl-tests 2.19.6 -J (JSON format 3)",
            "nccl-tests 2.19.6, NCCL 2.28.9",
            "nccl-tests 2.x (root column) on H20",
            "nccl-tests 2.x (root column), H100 pair reporting busbw 0 (NCCL_DEBUG=INFO run)",
            "nccl-tests 2.x (root column), mpirun --tag-output",
            "nccl-tests 2.x (root column), rows elided ('...')",
            "nccl-tests 2.x (root column), srun -l, 2x p4de",
            "nccl-tests 2.x (root column), srun -l, 2x p5",
            "nccl-tests 2.x (root column), zero-size rows repeated",
            "nccl-tests 2.x + NCCL 2.18.5, mpirun --tag-output, rows elided ('...')",
            "nccl-tests 2.x result rows only (no header), 2026",
            "nccl-tests 2018-2019 (no redop or root column, error as 0e+00)",
            "nccl-tests 2020-2021 (no root column)",
        ),
    ),
    "ncu": (
        4,
        (
            "Nsight Compute 2025 on B200 (CC 10.0, details page)",
            "Nsight Compute 2025.3.1 (details page)",
            "Nsight Compute 2025.3.1 (raw page)",
            "Nsight Compute 2025.3.1 (raw page, --metrics)",
        ),
    ),
    "nvidia_smi_dmon": (
        4,
        (
            "dmon layout from the DCGM 1.4.3 Go bindings sample (prompt and host-engine banner before the header)",
            "driver 580.159.04",
            "nvidia-smi dmon -s pucvmet (2016, 'temp' column, 4 GPUs)",
            "nvidia-smi dmon layout (old 'temp' column), 2 GPUs, from NVML's Go sample",
        ),
    ),
    "nvidia_smi_query": (
        3,
        (
            "--format=csv on GeForce (2020, no index column, two GPUs)",
            "driver 520.56.06 --format=csv (units in values, pstate, no timestamp)",
            "driver 580.159.04",
        ),
    ),
    "steplog": (
        42,
        (
            "DeepSpeed 2020",
            "DeepSpeed 2022",
            "Lightning 2.x (ModelParallelStrategy example, one bar line)",
            "Lightning 2.x docs (prog_bar metrics)",
            "Megatron-DeepSpeed + DeepSpeed 0.12 (2023-11)",
            "Megatron-DeepSpeed 2021 (BigScience)",
            "Megatron-DeepSpeed 2023",
            "Megatron-LLM (EPFL fork of Megatron-LM, 2023)",
            "Megatron-LM 2021 (BigScience runs)",
            "Megatron-LM 2022",
            "Megatron-LM 2024",
            "Megatron-LM 2024 (srun -l)",
            "Megatron-LM 2024-07",
            "Megatron-LM v1 (2020)",
            "NeMo 1.x (Lightning progress bar, 2023)",
            "NeMo 2.0 (2024-08, no step timing)",
            "NeMo 2.x (BioNeMo, val_loss in the line)",
            "NeMo 2.x (nemo-run)",
            "NeMo 2.x (nemo-run, torchrun [default0] prefix)",
            "PyTorch Lightning 1.0 (tqdm bar, one update a line)",
            "torchtitan 2025-03 (no grad_norm)",
            "torchtitan 2026-02, every rank printing",
            "torchtitan 2026-05 (grad_norm, tps)",
            "torchtune 0.1 (metric logger 'Step N | k:v', gpu_resources)",
            "torchtune 0.1 (tqdm bar epoch|step|Loss)",
            "torchtune 0.2 (metric logger 'Step N | k:v', tokens_per_second_per_gpu)",
            "torchtune 0.2 (tqdm bar, line cut in the doc)",
            "torchtune 0.5 (tqdm bar epoch|step|Loss)",
            "transformers Trainer + DeepSpeed ZeRO-3 (2021), final summary only",
            "transformers Trainer 4.47 (grad_norm in the log dict)",
        ),
    ),
    "vllm_metrics": (
        2,
        (
            "vLLM 0.10 /metrics (api_server_count > 1, engine label, buckets only)",
            "vLLM 0.7 /metrics (v1 HELP texts, process_* families)",
        ),
    ),
}
"""format -> (real files checked against their own text, the tool versions that wrote them)."""


def covered(fmt: str) -> str:
    """One line for ``perfsleuth formats``: how many real files, of which versions; '' when none."""
    if fmt not in REAL_CORPUS:
        return ""
    n, versions = REAL_CORPUS[fmt]
    return f"real corpus: {n} file(s); {'; '.join(versions)}"
