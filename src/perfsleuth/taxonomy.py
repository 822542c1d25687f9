"""The fault classes perfsleuth can name, with what each means and what proves it.

Every finding, labelled case and detector names exactly one class here by its id. The ids are
stable: tests, cases, the evaluation and users' scripts depend on them, so a class is added when a
real case needs one and never renamed. Each entry says what the fault is, where in the stack it
lives, the *direct evidence* that proves it (an event, an annotation, a counter, a log line: a
finding never rests on silence), the inputs that carry that evidence, the classes it is easily
confused with and how they are told apart, and the usual fix.

This module is the one source of that text: ``perfsleuth explain FAULT`` prints an entry,
``docs/taxonomy.md`` is generated from it (:func:`render_markdown`), and the detector registry refuses
an id that is not here. It imports nothing from perfsleuth and computes nothing: the rules that decide
a fault live with its detector in ``perfsleuth.diagnose``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

LAYERS = (
    "communication",
    "framework",
    "data",
    "storage",
    "host",
    "compute",
    "compiler",
    "memory",
    "any",
    "hardware",
    "network",
    "firmware",
    "model",
    "fleet",
    "inference serving",
    "measurement",
)
"""Where in the stack a fault lives, in the order the reference lists go (training, then serving)."""

CAUSE = "cause"
REGIME = "regime"
UNATTRIBUTED = "unattributed"
STARTING_POINT = "starting point"
KINDS = (CAUSE, REGIME, UNATTRIBUTED, STARTING_POINT)
"""``cause``: a named root cause. ``regime``: an expected operating regime, reported as context, not
a fault. ``unattributed``: time a trace measures but no event names (sized, never given a cause).
``starting point``: a symptom before any cause is attributed."""


@dataclass(frozen=True, slots=True)
class Distinction:
    """A class that ``fault`` is confused with, and what in the input tells the two apart."""

    fault: str
    how: str

    def to_json(self) -> dict[str, str]:
        return {"fault": self.fault, "how": self.how}


@dataclass(frozen=True, slots=True)
class FaultClass:
    """One fault class: its stable id and everything a user needs to read a finding that names it.

    ``ref`` is the class's row in the domain catalog (T1-T27 training, I1-I6 serving; None for the
    classes perfsleuth added); ``signals`` are the inputs a job must provide for the class to be
    assessed at all."""

    id: str
    ref: str | None
    title: str
    layer: str
    kind: str
    meaning: str
    direct_evidence: tuple[str, ...]
    signals: tuple[str, ...]
    told_apart_from: tuple[Distinction, ...]
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ref": self.ref,
            "title": self.title,
            "layer": self.layer,
            "kind": self.kind,
            "meaning": self.meaning,
            "direct_evidence": list(self.direct_evidence),
            "signals": list(self.signals),
            "told_apart_from": [d.to_json() for d in self.told_apart_from],
            "fix": self.fix,
        }


def _d(fault: str, how: str) -> Distinction:
    return Distinction(fault, how)


_KINETO = "a PyTorch-profiler (Kineto) trace"
_DCGM = "GPU telemetry: dcgm-exporter scrapes, dcgmi dmon or nvidia-smi logs"

FAULTS: tuple[FaultClass, ...] = (
    FaultClass(
        "exposed_communication",
        "T1",
        "Exposed communication",
        "communication",
        CAUSE,
        "Collective transfers sit on the critical path: the GPU spends step time in communication kernels that no compute "
        "hides, because the transfers are slow (less bus bandwidth than the fabric should give) or because there is more "
        "of them than the compute can cover. It is measured net of waiting: the part of a collective spent waiting for the "
        "last rank to arrive is charged to whatever made that rank late.",
        (
            "NCCL/RCCL collective kernels (AllReduce, ReduceScatter, AllGather, AllToAll) not covered by compute kernels on any stream",
            "the achieved bus bandwidth of those collectives against the job's own nccl-tests result at a similar size, or a "
            "reference figure for the fabric (nccl-tests itself fails a run below 0.9x of its expected bandwidth)",
        ),
        (f"{_KINETO} or an Nsight Systems export with communication kernels", "the same collectives traced on several ranks"),
        (
            _d(
                "poor_overlap",
                "there the bandwidth is healthy and the exposed time is collectives that could have run under compute (all but "
                "a step's last); here the transfers are slow, or too large for any schedule to hide",
            ),
            _d(
                "straggler_rank",
                "a collective's duration includes waiting for a late rank; that wait is the late rank's cost, not transfer",
            ),
            _d("degraded_network", "there one node pair or link is slow against its peers in nccl-tests: a link fault, not demand"),
            _d("nccl_algorithm_selection", "there a forced NCCL_ALGO/NCCL_PROTO choice beats NCCL's default at the same size"),
        ),
        "Hide communication under compute (gradient bucketing, FSDP/ZeRO prefetch), send less (lower-precision gradients, "
        "keep tensor parallelism inside a node), or place the heaviest parallel groups on the fastest links.",
    ),
    FaultClass(
        "poor_overlap",
        "T2",
        "Poor compute/communication overlap",
        "communication",
        CAUSE,
        "Collectives that do not depend on the compute around them run one after the other with it instead of beside it, "
        "so their time adds to the step although the bandwidth is fine. The last collectives of a step, which no schedule "
        "can hide, are not counted.",
        (
            "communication kernels with no compute kernel running concurrently on another stream while independent compute waits",
            "the same collectives matched across ranks, so time spent waiting for a late rank is removed first",
        ),
        (f"{_KINETO} with communication kernels and their streams", "the same collectives traced on several ranks"),
        (
            _d("exposed_communication", "there the achieved bus bandwidth is low; here it is healthy and the schedule is at fault"),
            _d("straggler_rank", "waiting for a late rank is taken out before overlap is judged"),
        ),
        "Issue communication early on its own stream (DDP bucket size, FSDP forward/backward prefetch, "
        "CUDA_DEVICE_MAX_CONNECTIONS, stream priorities) and look for a synchronisation that forces the serial order.",
    ),
    FaultClass(
        "pipeline_bubble",
        "T3",
        "Pipeline bubble / stage imbalance",
        "framework",
        CAUSE,
        "Pipeline-parallel stages wait for each other: the fill and drain bubbles of too few microbatches per stage, or "
        "one stage (often the last, which holds the loss) doing more work than the others.",
        (
            "point-to-point send/recv kernels between pairs of stages, traced on each stage, with the receiving stage idle before the send",
            "per-step compute time on each stage's trace, one stage consistently longer than the others",
        ),
        (f"{_KINETO} of every pipeline stage",),
        (
            _d("sequence_imbalance", "there data-parallel peers of one stage do unequal work that moves between ranks; here stages differ"),
            _d("straggler_rank", "one slow worker is a single rank out of line, not a whole stage"),
            _d("exposed_communication", "the waits are pipeline transfers, not data-parallel collectives"),
        ),
        "More microbatches per step, an interleaved (virtual-stage) schedule, or a layer split that gives every stage "
        "equal time (fewer layers on the stage with the loss).",
    ),
    FaultClass(
        "sequence_imbalance",
        "T4",
        "Uneven work across data-parallel ranks",
        "data",
        CAUSE,
        "Data-parallel (or expert-parallel) ranks get unequal work each step, from variable sequence lengths or uneven "
        "expert routing, so every step waits for whichever rank drew the heaviest batch, and that rank changes from "
        "step to step.",
        ("per-step compute time on two or more ranks' traces, with the slowest rank changing between steps",),
        (f"{_KINETO} of two or more data-parallel ranks",),
        (
            _d("straggler_rank", "there the same rank is the slowest step after step"),
            _d("pipeline_bubble", "there whole stages differ, consistently"),
            _d("gc_pause", "a GC pause is host time inside recorded collection events, not extra compute"),
        ),
        "Balance work, not sample counts: pack or bucket sequences so that each rank's sum of squared lengths is "
        "similar; for mixture-of-experts, a capacity factor or a load-balancing loss.",
    ),
    FaultClass(
        "dataloader_stall",
        "T5",
        "Data-loader stall",
        "data",
        CAUSE,
        "The GPUs idle while the next batch is still being read, decoded or collated: the input pipeline is slower "
        "than the model. Handing over a prefetched batch costs well under one percent of a step; time beyond that is "
        "the stall.",
        (
            "the DataLoader op PyTorch's profiler records (enumerate(DataLoader)#...__next__), or an annotation around "
            "fetching the batch, covering time the GPU is idle",
        ),
        (f"{_KINETO} with CPU activity",),
        (
            _d("host_launch_bound", "there the host is issuing kernels too slowly; here it is inside the data-loader op"),
            _d("cpu_contention", "a starved host CPU also slows loading; the host's CPU counters decide"),
            _d("unattributed_host_stall", "a host gap with no data-loader event is never called a data-loader stall"),
            _d("checkpoint_stall", "a save covers the gap there, at the checkpoint interval"),
        ),
        "More loader workers with pin_memory and prefetching (persistent_workers, prefetch_factor), decode and augment "
        "off the training process or on the GPU, faster or local storage for the dataset.",
    ),
    FaultClass(
        "checkpoint_stall",
        "T6",
        "Checkpoint stall",
        "storage",
        CAUSE,
        "Training is blocked while a checkpoint is written or read: the blocking part of a save, which is at least the "
        "copy of the state from the GPU to the host, at every checkpoint interval.",
        (
            "a checkpoint save op or annotation (torch.save, dcp.save inside record_function('checkpoint'))",
            "bulk device-to-host copies of model state in one step, as torch.save of GPU tensors makes",
            "checkpoint-save lines in a step log, at rows whose time exceeds the run's median iteration time",
        ),
        (f"{_KINETO} with annotations or memory copies", "or a training step log (Megatron-LM, DeepSpeed, JSON Lines)"),
        (
            _d("gc_pause", "GC shows as recorded collection events on random steps, not at the save interval"),
            _d("collective_hang", "training resumes after every save"),
            _d("restart_overhead", "there the time is lost between sessions, not inside iterations"),
            _d("recompilation", "there the long steps are inside compile spans"),
        ),
        "Asynchronous or two-stage checkpointing (to host memory first, to storage in the background), sharded saves, "
        "or a longer interval where the failure rate allows it.",
    ),
    FaultClass(
        "host_launch_bound",
        "T7",
        "Host / launch bound",
        "host",
        CAUSE,
        "The CPU cannot issue kernels as fast as the GPU runs them: the GPU goes idle between kernels, waiting for "
        "launches the host has not made yet.",
        (
            "CUDA runtime launch calls joined to their kernels by correlation id, the kernel starting "
            "right after a late launch on an idle GPU",
        ),
        (f"{_KINETO} with CUDA runtime events",),
        (
            _d("small_kernels", "there the GPU is busy with chains of tiny kernels back to back; here it idles between them"),
            _d("cpu_contention", "launch gaps on one host only point at that host's CPUs"),
            _d("allocator_churn", "waits inside cudaMalloc/cudaFree are charged to the allocator"),
            _d("gc_pause", "a recorded garbage collection covering the gap is charged to GC"),
        ),
        "CUDA graphs (torch.compile with mode='reduce-overhead'), fused kernels, more work per kernel (a larger batch), "
        "less Python in the step.",
    ),
    FaultClass(
        "cpu_contention",
        "T8",
        "Host CPU contention",
        "host",
        CAUSE,
        "One host's CPUs are oversubscribed (other processes, too many loader workers, ranks bound to the wrong NUMA "
        "node), so the ranks on that host launch kernels and finish host work late while the rest of the job waits.",
        ("host CPU usage counters for the host", "CUDA runtime calls taking longer on that host's ranks than on their peers"),
        ("host CPU counters, or per-host traces of the job",),
        (
            _d("host_launch_bound", "there every host launches slowly; here one host does"),
            _d("thermal_throttling", "that host's GPU clocks are at their peers'"),
            _d("straggler_rank", "the lost time is host time, not longer compute kernels"),
        ),
        "Bind each rank and its loader workers to its NUMA node's cores, cap loader workers, and move co-located work away.",
    ),
    FaultClass(
        "small_kernels",
        "T9",
        "Small kernels / low occupancy",
        "compute",
        CAUSE,
        "The GPU is kept busy by many short kernels, each too small (few blocks, low occupancy) to fill the SMs, so "
        "utilisation reads high while little work gets done.",
        (
            "GPU kernel events: chains of short kernels running back to back from the queue",
            "Nsight Compute metrics: a grid smaller than the SM count or low achieved occupancy, with compute and memory "
            "throughput both far from peak",
            "DCGM SM activity low while GPU utilisation is high",
        ),
        (f"{_KINETO} with GPU kernels", "or an Nsight Compute CSV (ncu --csv)"),
        (
            _d("host_launch_bound", "there the GPU idles between kernels; here it is busy with them"),
            _d("thermal_throttling", "SM activity is a ratio of cycles, so lowered clocks distort it; clocks are checked"),
        ),
        "Fuse elementwise chains (torch.compile, fused optimizers and norms), give each kernel more work (larger tiles or "
        "batch, split-K for thin matrix products).",
    ),
    FaultClass(
        "gc_pause",
        "T10",
        "Python garbage-collection pause",
        "framework",
        CAUSE,
        "Python's garbage collector runs inside the step on some ranks and stops kernel launches; at the next collective "
        "the other ranks wait for the collecting ones.",
        ("Python GC events in the trace (torch.profiler with record_python_gc_info) or gc.collect annotations, covering GPU idle time",),
        (f"{_KINETO} with Python GC events",),
        (
            _d("unattributed_host_stall", "a silent host gap stays unattributed until a recorded GC event covers it"),
            _d("checkpoint_stall", "no checkpoint annotation covers the stall"),
            _d("sequence_imbalance", "the extra time is host time, not compute kernels"),
        ),
        "gc.freeze() after model setup; gc.disable() with a planned gc.collect() on every rank every N steps.",
    ),
    FaultClass(
        "recompilation",
        "T11",
        "Graph (re)compilation",
        "compiler",
        CAUSE,
        "Graph compilation (torch.compile's Dynamo and Inductor, XLA) runs inside training steps: on the first steps, or "
        "again whenever a new shape or a failed guard forces a recompile.",
        ("Dynamo/Inductor compile spans in the trace on the slow steps",),
        (f"{_KINETO} of a torch.compile job, covering the steps that recompile",),
        (
            _d("gc_pause", "the host is busy compiling, not collecting garbage"),
            _d("checkpoint_stall", "the stall is inside compile spans, not a save"),
            _d("pipeline_bubble", "the long steps follow shape changes, not the stage layout"),
        ),
        "Mark dynamic dimensions (dynamic=True, torch._dynamo.mark_dynamic), pad inputs to a few fixed shapes, warm up "
        "before measuring, and keep compile steps out of steady-state numbers.",
    ),
    FaultClass(
        "allocator_churn",
        "T12",
        "Allocator churn",
        "memory",
        CAUSE,
        "The CUDA caching allocator calls cudaMalloc and cudaFree in steady-state steps. cudaFree waits for the device to "
        "drain, so the GPU idles while the host sits in the allocator.",
        ("cudaMalloc/cudaFree (hipMalloc/hipFree) runtime events in (nearly) every steady-state step",),
        (f"{_KINETO} with CUDA runtime events",),
        (
            _d(
                "memory_fragmentation",
                "there frees come as a burst on the few steps where memory peaks; here malloc/free recur every step "
                "(a torch.cuda.empty_cache() in the loop is churn)",
            ),
            _d("host_launch_bound", "launch waits outside allocator calls are counted there"),
        ),
        "Remove torch.cuda.empty_cache() from the loop, keep tensor shapes stable, use expandable segments "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or preallocate buffers.",
    ),
    FaultClass(
        "memory_fragmentation",
        "T13",
        "Memory fragmentation / allocation retries",
        "memory",
        CAUSE,
        "The caching allocator cannot serve a request from its cache, so it frees the whole cache and tries again: "
        "near-out-of-memory behaviour that stalls the steps where memory use peaks.",
        (
            "a burst of back-to-back cudaFree calls, one per cached segment, on a few steps",
            "allocator memory events (profile_memory=True) with reserved memory far above allocated, dropping at the flush",
        ),
        (f"{_KINETO} with CUDA runtime events", "allocator memory events (torch.profiler profile_memory=True)"),
        (_d("allocator_churn", "churn repeats on (nearly) every step; retries hit the few steps that peak highest"),),
        "Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), a lower peak (activation checkpointing, "
        "a smaller microbatch), fewer distinct tensor shapes.",
    ),
    FaultClass(
        "straggler_rank",
        "T14",
        "Straggler rank",
        "any",
        CAUSE,
        "One rank is slower than its peers step after step because its own compute takes longer, and every other rank "
        "waits for it at each collective, so the job runs at its pace.",
        ("the same collectives traced on two or more ranks, one rank arriving last persistently, with longer compute of its own",),
        (f"{_KINETO} of two or more ranks with matched collectives",),
        (
            _d("sequence_imbalance", "there the slowest rank changes from step to step"),
            _d("pipeline_bubble", "a whole slow stage is the pipeline's structure, not one worker"),
            _d("slow_node", "when most of a host's GPUs lag together, the machine is at fault, not one rank"),
            _d("dataloader_stall", "a rank late because of host time is a symptom; the host cause's finding carries it"),
            _d("exposed_communication", "when collectives wait little for late ranks, the time is transfer"),
        ),
        "Find what differs on that rank: its GPU's clocks and errors (DCGM), its host, its share of the data. Cordon the "
        "GPU or node when it is the hardware.",
    ),
    FaultClass(
        "slow_node",
        "T15",
        "Slow node (fail-slow)",
        "hardware",
        CAUSE,
        "One machine is slower than its peers: its GPUs' activity or its host counters diverge from the job's other hosts "
        "at the same times, often for minutes or hours before it fails outright.",
        ("per-GPU SM activity or utilisation from three or more hosts of one job, one host's GPUs persistently below the rest",),
        (_DCGM + ", from three or more hosts of the job",),
        (
            _d("straggler_rank", "one lagging rank, rather than most of a host's GPUs, is a straggler"),
            _d("thermal_throttling", "when that host's clock-event reasons show heat, the cause is named"),
            _d("power_capping", "when that host's clock-event reasons show a power limit, the cause is named"),
        ),
        "Drain the node and test it (DCGM diagnostics, nccl-tests, a burn-in against a baseline), check cooling, PCIe and "
        "NICs before it returns to service. A job-wide phase change moves every host together and is not this.",
    ),
    FaultClass(
        "degraded_nvlink",
        "T16",
        "Degraded NVLink",
        "network",
        CAUSE,
        "The links between GPUs inside one machine record errors (CRC, replay, recovery) or carry less traffic than their "
        "peers, slowing collectives within the node.",
        (
            "NVLink error counters (DCGM_FI_DEV_NVLINK_CRC_FLIT/CRC_DATA/REPLAY/RECOVERY_ERROR_COUNT_TOTAL) rising",
            "NVLink bytes (DCGM_FI_PROF_NVLINK_TX/RX_BYTES) below the other GPUs' under the same load",
        ),
        (_DCGM + " with the NVLink fields enabled",),
        (
            _d("exposed_communication", "a healthy link under heavy demand is exposed communication, not a fault"),
            _d("straggler_rank", "the error counters rise on the link, whichever rank arrives last"),
        ),
        "Run nccl-tests within the node (NCCL_TESTS_SPLIT='DIV 8'); reset or reseat, and replace the part if the counters keep rising.",
    ),
    FaultClass(
        "degraded_network",
        "T17",
        "Degraded inter-node network",
        "network",
        CAUSE,
        "Inter-node links (InfiniBand, RoCE) are slow, congested or flapping, so collectives between nodes fall below "
        "what the fabric gives.",
        (
            "nccl-tests between node pairs, one pair's bus bandwidth at large sizes below the other pairs of the same "
            "shape, or far below the fabric's figure",
        ),
        ("nccl-tests output (all_reduce_perf over node pairs, or one multi-node run)",),
        (
            _d("nccl_transport_fallback", "a pair slow because a node is on sockets or without GPUDirect RDMA is the transport's finding"),
            _d("exposed_communication", "there the links are healthy and the job's demand is the problem"),
            _d("straggler_rank", "a late rank inflates collective time without any slow link"),
        ),
        "Check the pair's NICs, cables and switch ports (error counters, PFC pause frames), spread flows across routes "
        "(ECMP), and keep the pair out of jobs until fixed.",
    ),
    FaultClass(
        "pcie_downtraining",
        "T18",
        "PCIe downtraining",
        "hardware",
        CAUSE,
        "A GPU's PCIe link has trained below its maximum generation or width, cutting host-device copies and GPUDirect traffic to the NIC.",
        ("DCGM_FI_DEV_PCIE_LINK_GEN/LINK_WIDTH below DCGM_FI_DEV_PCIE_MAX_LINK_GEN/MAX_LINK_WIDTH while the GPU is under load",),
        (_DCGM + " with the PCIe link fields",),
        (
            _d("degraded_network", "a slow NIC or fabric shows in nccl-tests, with the GPU's link at full width"),
            _d("slow_node", "the link fields name the part; a slow node without them stays a slow node"),
        ),
        "Reseat the card or riser, check the BIOS PCIe settings, and replace the part when the link keeps training low. "
        "A link that drops its generation only while idle is power saving, which is why only loaded time is judged.",
    ),
    FaultClass(
        "thermal_throttling",
        "T19",
        "Thermal throttling",
        "firmware",
        CAUSE,
        "The GPU lowers its clocks to stay within its temperature limits.",
        (
            "clock-event reason bits 0x20 (software thermal) or 0x40 (hardware thermal) set under load with the SM clock "
            "below its maximum (0x8, hardware slowdown, counts as thermal near the slowdown temperature)",
            "the thermal violation counter rising",
        ),
        (_DCGM + " with clock-event reasons or violation counters",),
        (
            _d("power_capping", "the power-cap and power-brake reason bits name a power limit instead"),
            _d("clock_capping", "the settings reason bits name a clock setting instead"),
        ),
        "Check the rack's cooling: inlet temperature, airflow, fans; compare with the other GPUs at the same times.",
    ),
    FaultClass(
        "power_capping",
        "T20",
        "Power capping / power brake",
        "firmware",
        CAUSE,
        "The clocks are held down by a power limit: an enforced limit below the default, or a power brake from the system.",
        (
            "clock-event reason bits 0x04 (software power cap) or 0x80 (hardware power brake) under load with a clock deficit",
            "the power violation counter rising; the enforced power limit below the default",
        ),
        (_DCGM + " with clock-event reasons or violation counters",),
        (
            _d("thermal_throttling", "the thermal reason bits name heat instead"),
            _d("clock_capping", "the settings reason bits name a clock setting instead"),
        ),
        "Restore the default power limit (nvidia-smi -pl), and check the node's power delivery and power-brake signal.",
    ),
    FaultClass(
        "clock_capping",
        "T21",
        "Clock capping by settings",
        "firmware",
        CAUSE,
        "The clocks are kept below their maximum by a setting (applications clocks, locked clocks, sync boost), not by heat or power.",
        (
            "clock-event reason bits 0x02 (applications clocks setting), 0x10 (sync boost) or 0x100 "
            "(display clocks) under load, SM clock below its maximum",
        ),
        (_DCGM + " with clock-event reasons and the maximum SM clock",),
        (
            _d("thermal_throttling", "the thermal reason bits name heat"),
            _d("power_capping", "the power reason bits name a power limit"),
        ),
        "Reset the applications and locked clocks (nvidia-smi -rac, -rgc) and find what set them.",
    ),
    FaultClass(
        "gpu_hardware_errors",
        "T22",
        "GPU hardware errors",
        "hardware",
        CAUSE,
        "The GPU reports hardware faults (XID errors, uncorrectable ECC errors, pending or failed row remaps); they crash "
        "jobs, or slow them quietly while spare capacity runs out.",
        ("DCGM_FI_DEV_XID_ERRORS, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, DCGM_FI_DEV_ROW_REMAP_PENDING or _ROW_REMAP_FAILURE new or non-zero",),
        (_DCGM + " with the XID, ECC and row-remap fields",),
        (
            _d("slow_node", "a slow node is measured against its peers; here the GPU itself reports the error"),
            _d("numeric_anomaly", "NaN or spiking iterations with no hardware error event stay a numeric anomaly"),
        ),
        "Drain the node; reset the GPU to apply a pending row remap; replace it after uncorrectable errors or a remap failure. "
        "Some XIDs come from software (driver, application), so read the code before replacing hardware.",
    ),
    FaultClass(
        "nccl_algorithm_selection",
        "T23",
        "NCCL algorithm/protocol selection",
        "communication",
        CAUSE,
        "For some message sizes, NCCL's choice of algorithm (Ring, Tree, NVLS, ...) or protocol (LL, LL128, Simple) gives "
        "less bus bandwidth than another choice the same hardware delivers.",
        (
            "nccl-tests runs with NCCL_ALGO/NCCL_PROTO forced beside the default run, a forced choice faster at the same size",
            "NCCL TUNING log lines showing the algorithm and protocol chosen per size",
        ),
        ("nccl-tests output (a sweep with NCCL_ALGO/NCCL_PROTO forced)", "or an NCCL_DEBUG=INFO log with the TUNING subsystem"),
        (
            _d(
                "nccl_transport_fallback", "a choice forced by an environment variable, or a slow transport, is the configuration's finding"
            ),
            _d("degraded_network", "there every algorithm is slow on one pair of nodes"),
        ),
        "Force the better algorithm or protocol for the affected sizes (NCCL_ALGO, NCCL_PROTO, or a tuner plugin), after "
        "checking that no environment variable forces the default.",
    ),
    FaultClass(
        "nccl_transport_fallback",
        "T24",
        "NCCL transport fallback",
        "communication",
        CAUSE,
        "NCCL moves data over a slower transport than the fabric offers (sockets instead of InfiniBand/RoCE, GPUDirect "
        "RDMA off, too few channels), usually from an environment variable or a missing plugin or driver module.",
        (
            "NCCL_DEBUG=INFO lines (NET/Socket, 'via NET/Socket', 'GPU Direct RDMA Disabled', the channel count, "
            "'NCCL_... set by environment to') that differ from the rest of the job or the fleet's earlier logs",
        ),
        ("an NCCL_DEBUG=INFO log of the job",),
        (
            _d("degraded_network", "there the transport is right and a link is slow"),
            _d("nccl_algorithm_selection", "there the transport is right and the algorithm choice is not"),
        ),
        "Remove the overriding NCCL_* variables, install or load what the fast transport needs (the IB/RoCE plugin, "
        "nvidia-peermem for GPUDirect RDMA), and compare the log against a healthy node's.",
    ),
    FaultClass(
        "collective_hang",
        "T25",
        "Collective hang",
        "communication",
        CAUSE,
        "Ranks stop making progress in or around a collective: some enter it and wait for peers that never arrive, until "
        "a watchdog times out.",
        (
            "collective kernels with sequence numbers traced on every rank of a process group, some "
            "ranks' sequence stalled behind the others",
        ),
        (f"{_KINETO} of every rank of a process group, with collective sequence numbers",),
        (
            _d("slow_node", "a node that only slows down keeps the job moving; a hang stops it"),
            _d("checkpoint_stall", "training resumes after a save"),
            _d("dataloader_stall", "a data-loader wait ends when the batch arrives, and it is inside the loader's op"),
        ),
        "Find the rank that did not arrive (the NCCL flight recorder, py-spy stacks of every rank) and what it was doing; "
        "evict its node if the hang repeats there.",
    ),
    FaultClass(
        "numeric_anomaly",
        "T26",
        "Numeric anomaly",
        "model",
        CAUSE,
        "Iterations produce NaN or skipped updates, or the loss or gradient norm spikes, without the job crashing: work is "
        "lost, and sometimes the cause is silent data corruption.",
        ("step-log rows with NaN or skipped iterations, loss-scale drops, loss or gradient-norm spikes",),
        ("a training step log with loss, loss scale and skipped/NaN iteration counts",),
        (_d("gpu_hardware_errors", "an XID or ECC event on a GPU of the job at the same time points at the hardware"),),
        "Look for a bad batch, a learning-rate or loss-scale setting, or corrupted hardware (replay the step on another node); "
        "lower precision only after ruling those out.",
    ),
    FaultClass(
        "restart_overhead",
        "T27",
        "Restart / recovery overhead",
        "fleet",
        CAUSE,
        "Time is lost between productive steps to failures, restarts and initialisation: the steady-state speed is fine, "
        "but a small share of the wall clock is training.",
        ("a step log with a second start, or iteration numbers going back, and the time between sessions",),
        ("a training step log that spans restarts",),
        (_d("checkpoint_stall", "there the time is lost inside iterations at a save; here it is lost between sessions"),),
        "Fewer failures (find what ended each session), faster restarts (in-memory checkpoints, warm standby nodes), and "
        "checkpoints frequent enough that a restart loses little progress.",
    ),
    FaultClass(
        "kv_cache_preemption",
        "I1",
        "KV-cache preemption",
        "inference serving",
        CAUSE,
        "The KV cache is full, so the serving engine preempts running requests and recomputes (or swaps) them later: "
        "tokens slow down and work is repeated.",
        ("vllm:num_preemptions(_total) rising while vllm:kv_cache_usage_perc is near 1 and requests wait",),
        ("vLLM/SGLang /metrics scrapes over time",),
        (
            _d("request_queueing", "queueing with room in the KV cache and no preemption is a scheduler cap or arrivals"),
            _d("prefill_decode_interference", "long token gaps without sustained preemption are not recomputation"),
            _d("low_batch_occupancy", "a small batch with a full cache that preempts is KV-limited, not short of load"),
        ),
        "More KV memory (gpu_memory_utilization, an FP8 KV cache, more tensor parallelism), a lower max_num_seqs or "
        "max_model_len, prefix caching.",
    ),
    FaultClass(
        "prefill_decode_interference",
        "I2",
        "Prefill/decode interference",
        "inference serving",
        CAUSE,
        "Prefill work scheduled into the same engine steps stalls decoding: inter-token latency has a long tail while the "
        "time to first token is fine.",
        (
            "inter-token gaps several times the median that coincide with prefill activity (more prompt tokens prefilled "
            "inside them, or slower tokens in scrape intervals with more prompt tokens per step)",
        ),
        ("a serving benchmark saved with per-request inter-token latencies (--save-detailed)", "or /metrics ITL and prompt-token counters"),
        (
            _d("kv_cache_preemption", "there the long gaps are recomputation after preemption"),
            _d("host_bound_serving", "there the slow gaps fall at random host stalls, not at prefills"),
        ),
        "Chunked prefill with a smaller token budget per step, or prefill and decode on separate instances (disaggregation).",
    ),
    FaultClass(
        "low_batch_occupancy",
        "I3",
        "Low batch occupancy",
        "inference serving",
        CAUSE,
        "The engine runs far fewer concurrent sequences than its KV pool and max_num_seqs allow while nothing waits: too "
        "little load to use the GPU, so a bigger batch would multiply throughput.",
        ("vllm:num_requests_running far below the batch the KV pool allows, with vllm:num_requests_waiting at zero and the engine busy",),
        ("vLLM/SGLang /metrics scrapes over time", "or a serving benchmark's result"),
        (
            _d("kv_cache_preemption", "a small batch with a full cache that preempts is KV-limited"),
            _d("request_queueing", "there requests wait although the batch is small"),
            _d("host_bound_serving", "a small batch behind a slow API server is host-bound serving"),
        ),
        "Raise client concurrency, consolidate replicas, or serve from fewer or smaller GPUs.",
    ),
    FaultClass(
        "request_queueing",
        "I4",
        "Request queueing",
        "inference serving",
        CAUSE,
        "Requests spend most of their time to first token waiting in the engine's queue while the KV cache has room: a "
        "scheduler cap, or arrivals faster than the engine serves them.",
        (
            "vllm:num_requests_waiting over time against vllm:time_to_first_token_seconds: waiting "
            "makes most of TTFT (Little's law), KV cache not full",
        ),
        ("vLLM/SGLang /metrics scrapes over time",),
        (
            _d("kv_cache_preemption", "queueing behind a full cache that preempts belongs to the preemption"),
            _d("host_bound_serving", "there the time is outside the engine, not in its queue"),
        ),
        "Raise max_num_seqs or max_num_batched_tokens where memory allows, add replicas, or admit less load.",
    ),
    FaultClass(
        "host_bound_serving",
        "I5",
        "Host-bound serving",
        "inference serving",
        CAUSE,
        "Work outside the engine's GPU steps (the API server, tokenization, scheduling) dominates while the GPUs idle: "
        "end-to-end latency far beyond queue, prefill and decode time, or decode steps several times their HBM floor.",
        (
            "server end-to-end latency minus queue, prefill and decode time (vLLM's latency histograms)",
            "decode step time against its floor: weight and KV bytes per step over peak HBM bandwidth",
        ),
        ("vLLM/SGLang /metrics scrapes over time", "or a serving benchmark's result"),
        (
            _d("low_batch_occupancy", "there the host keeps up and the load is too small"),
            _d("memory_bound_decode", "decode steps close to their HBM floor are the hardware's speed"),
            _d("prefill_decode_interference", "slow gaps that fall at prefills belong to interference"),
        ),
        "More API-server processes, detokenization off the engine loop, asynchronous scheduling, a "
        "faster tokenizer, CUDA graphs for decode.",
    ),
    FaultClass(
        "memory_bound_decode",
        "I6",
        "Memory-bound decode",
        "inference serving",
        REGIME,
        "Decode steps run near the HBM bandwidth roof: every step reads the weights and the KV cache, and memory "
        "bandwidth, not compute, sets the speed. An expected regime, reported as context rather than as a fault.",
        (
            "decode step time against (weight bytes + KV bytes per step) / peak HBM bandwidth, close to the roof",
            "DCGM DRAM activity high with tensor-pipe activity low",
        ),
        ("vLLM/SGLang /metrics scrapes or a serving benchmark's result, with the model's size",),
        (
            _d("low_batch_occupancy", "a larger batch reuses each weight read; a small batch is the thing to fix first"),
            _d("host_bound_serving", "steps far above their floor are host-bound, not at the roof"),
        ),
        "To move the roof: larger batches, quantized weights or KV cache (FP8, INT4), speculative decoding.",
    ),
    FaultClass(
        "regression",
        None,
        "Regression (cause not yet attributed)",
        "fleet",
        STARTING_POINT,
        "A metric moved for the worse and no cause has been attributed yet: the starting point of a finding, which "
        "diff, localize and the detectors then explain.",
        ("a comparison with its interval: a 'regression' verdict from compare, or a significant change point in a history",),
        ("two sets of samples (compare) or a metric history (changes)",),
        (),
        "Attribute it: perfsleuth diff for two traces, perfsleuth localize for a fleet store, perfsleuth analyze on the slow side.",
    ),
    FaultClass(
        "unattributed_host_stall",
        None,
        "Unattributed host stall",
        "measurement",
        UNATTRIBUTED,
        "The host recorded nothing for a stretch while the GPU sat idle: a measured stall with no event that names its "
        "cause. It is sized and reported, never given a named cause, because silence is not evidence.",
        (
            "host operator events around the GPU work (ProfilerActivity.CPU and CUDA), against which a "
            "gap with no event is a measured stall",
        ),
        (f"{_KINETO} with CPU and CUDA activity",),
        (
            _d("gc_pause", "a recorded GC event covering the gap makes it a GC pause"),
            _d("dataloader_stall", "a data-loader op covering the gap makes it a data-loader stall"),
            _d("checkpoint_stall", "a save annotation or bulk device-to-host copy near the gap makes it a checkpoint stall"),
            _d("unattributed_idle", "there the host was writing events meanwhile: busy, not silent"),
        ),
        "Record what the host did in the gaps: py-spy record or dump, torch.profiler with with_stack and "
        "record_python_gc_info, record_function around suspect phases.",
    ),
    FaultClass(
        "unattributed_idle",
        None,
        "Unattributed GPU idle",
        "measurement",
        UNATTRIBUTED,
        "The GPU is idle for a large share of the step while the host was busy with something the trace does not name: "
        "operations the profiler did not record, waits on other processes, a dependency between streams. Idle time "
        "already charged to a named cause is not counted again.",
        ("GPU kernel events and ProfilerStep annotations: the idle time per step left after every named cause has taken its share",),
        (f"{_KINETO} with GPU kernels and ProfilerStep annotations",),
        (
            _d("unattributed_host_stall", "there the host was silent; here it was busy"),
            _d("host_launch_bound", "waits for launches the host had not issued are charged to launch bound"),
            _d("dataloader_stall", "idle time inside a data-loader op is charged to the loader"),
        ),
        "Record more of the step: CPU activity with stacks, record_function or NVTX around phases, every rank; "
        "synchronisation waits show as cudaStreamSynchronize/cudaDeviceSynchronize calls.",
    ),
)
"""Every fault class, in the reference's order (training T1-T27, serving I1-I6, then perfsleuth's own)."""

BY_ID: Mapping[str, FaultClass] = MappingProxyType({f.id: f for f in FAULTS})
IDS: frozenset[str] = frozenset(BY_ID)
"""The stable fault ids: cases, tests and users' scripts depend on them."""


@dataclass(frozen=True, slots=True)
class SubCause:
    """A narrower explanation inside one class, named only as a finding's alternative.

    A detector rules these in or out beside the classes it is told apart from, but none is a finding
    of its own: the input that would prove one (a replayed batch, a driver log, the peer process) is
    not something perfsleuth reads. Each names its ``parent`` class and what decides it."""

    id: str
    parent: str
    meaning: str
    decided_by: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "parent": self.parent, "meaning": self.meaning, "decided_by": self.decided_by}


SUB_CAUSES: tuple[SubCause, ...] = (
    SubCause(
        "host_sync",
        "unattributed_idle",
        "The host sat in a synchronize call (or a blocking copy) while the GPU idled too: both waited for something "
        "the trace does not record, such as another process on the GPU, a peer rank or an untraced stream.",
        "the synchronize calls' spans over the idle time, and a trace of the peer ranks or of the other process",
    ),
    SubCause(
        "loader_jitter",
        "dataloader_stall",
        "No loader is slow: the ordinary step-to-step variation of many ranks' loaders is paid at the slowest of them "
        "every step, so the job waits although the typical rank barely does.",
        "whether the worst rank changes from step to step, and how long the median rank waits",
    ),
    SubCause(
        "explicit_empty_cache",
        "memory_fragmentation",
        "An explicit torch.cuda.empty_cache() call flushes the caching allocator's pool, which looks like the flush "
        "a fragmented pool forces.",
        "reserved against allocated memory just before the flush (memory events), or num_alloc_retries in torch.cuda.memory_stats()",
    ),
    SubCause(
        "data_bug",
        "numeric_anomaly",
        "A malformed or outlier batch spikes the loss for a step; the hardware and the optimizer are fine.",
        "re-running the step with the same batch, on other hardware",
    ),
    SubCause(
        "fp16_overflow",
        "numeric_anomaly",
        "Gradients overflow fp16 under dynamic loss scaling: the scaler skips steps and cuts its scale.",
        "the loss scale in the log falling with the anomaly, and skipped-iteration counts",
    ),
    SubCause(
        "optimizer_instability",
        "numeric_anomaly",
        "The optimizer diverges (learning rate too high for the batch, stale Adam moments): the gradient norm spikes with the loss.",
        "the gradient norm logged beside the loss",
    ),
    SubCause(
        "link_power_saving",
        "pcie_downtraining",
        "A PCIe link lowers its width or generation while idle to save power (ASPM), which reads as downtraining when "
        "it is judged at idle.",
        "the link width and generation judged only while the GPU is under load",
    ),
    SubCause(
        "load_imbalance",
        "degraded_nvlink",
        "One GPU moves fewer bytes over NVLink because its share of the work is smaller, not because its link is slow.",
        "NVLink CRC and replay error counters, or nccl-tests' intra-node bus bandwidth",
    ),
    SubCause(
        "xid_software_error",
        "gpu_hardware_errors",
        "An XID raised by the application or the driver (graphics engine exception, MMU fault, reset channel) rather "
        "than by failing hardware.",
        "the XID code's class in NVIDIA's XID catalogue, together with ECC and row-remap counters",
    ),
    SubCause(
        "workload_phase_change",
        "slow_node",
        "The whole job enters a slower phase (evaluation, longer sequences, a checkpoint), which slows every host alike.",
        "the host compared with its peers at the same times",
    ),
)
"""Every sub-cause a detector names as an alternative; ``perfsleuth explain`` prints them with their class."""

SUB_CAUSE_BY_ID: Mapping[str, SubCause] = MappingProxyType({c.id: c for c in SUB_CAUSES})
ALTERNATIVE_IDS: frozenset[str] = IDS | frozenset(SUB_CAUSE_BY_ID)
"""What a finding's alternative may name: a fault class or a sub-cause."""

_BY_REF = {f.ref.lower(): f for f in FAULTS if f.ref}


def lookup(name: str) -> FaultClass | None:
    """The class named by its id, or by its catalog reference (``T12``, ``i1``); None when neither."""
    return BY_ID.get(name) or _BY_REF.get(name.strip().lower())


def close_matches(name: str, n: int = 3) -> list[str]:
    """The ids (of classes and sub-causes) closest in spelling to ``name`` (a typo, dashes for underscores,
    another case), best first."""
    wanted = name.strip().lower().replace("-", "_").replace(" ", "_")
    return difflib.get_close_matches(wanted, sorted(ALTERNATIVE_IDS), n=n, cutoff=0.6)


def _md(text: str) -> str:
    """Entry text as literal Markdown: the characters that would start emphasis or raw HTML escaped
    (the entries quote op and variable names such as ``__next__`` and ``NCCL_*``)."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("__", "\\_\\_").replace("<", "&lt;")


def render_markdown() -> str:
    """The taxonomy as a Markdown page: what ``docs/taxonomy.md`` holds (``scripts/gen_taxonomy_doc.py`` writes it)."""
    lines = [
        "# Fault classes",
        "",
        "<!-- generated from src/perfsleuth/taxonomy.py by scripts/gen_taxonomy_doc.py: edit the module, not this page -->",
        "",
        "Every finding names exactly one class by its id. The ids are stable: cases, tests and users' scripts depend on "
        "them. `perfsleuth explain FAULT` prints one entry; `perfsleuth explain` lists them all.",
        "",
        "| id | ref | layer | kind | title |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| [`{f.id}`](#{f.id}) | {f.ref or '—'} | {f.layer} | {f.kind} | {_md(f.title)} |" for f in FAULTS]
    for f in FAULTS:
        lines += [
            "",
            f"## {f.id}",
            "",
            f"**{_md(f.title)}** — {f.layer}, {f.kind}" + (f" (ref {f.ref})" if f.ref else ""),
            "",
            _md(f.meaning),
            "",
        ]
        lines += ["Direct evidence:", "", *(f"- {_md(e)}" for e in f.direct_evidence), ""]
        lines += ["Signals it needs:", "", *(f"- {_md(s)}" for s in f.signals), ""]
        if f.told_apart_from:
            lines += ["Told apart from:", "", *(f"- [`{d.fault}`](#{d.fault}): {_md(d.how)}" for d in f.told_apart_from), ""]
        lines += [f"Typical fix: {_md(f.fix)}"]
        if sub := [c for c in SUB_CAUSES if c.parent == f.id]:
            lines += ["", "Sub-causes: " + ", ".join(f"[`{c.id}`](#{c.id})" for c in sub)]
    lines += [
        "",
        "## Sub-causes",
        "",
        "Narrower explanations inside one class. A detector rules them in or out as a finding's alternatives; none "
        "is a finding of its own, because the input that proves one is not something perfsleuth reads.",
        "",
        "| id | class | meaning | decided by |",
        "|---|---|---|---|",
    ]
    lines += [f'| <a id="{c.id}"></a>`{c.id}` | [`{c.parent}`](#{c.parent}) | {_md(c.meaning)} | {_md(c.decided_by)} |' for c in SUB_CAUSES]
    return "\n".join(lines) + "\n"
