"""The Kineto trace-event contract, declared in one place.

The mapping from the raw Chrome-trace keys the PyTorch profiler writes (``libkineto`` output_json)
to typed fields lives here, so a new profiler version is a data change, not a code hunt. Fields are
optional because different event categories carry different args, and old and new profiler versions
spell some of them differently (``External id`` vs ``external id``). Unknown keys are skipped by the
decoder without building Python objects for them (``Input Dims``, ``Concrete Inputs``, ...).
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfsleuth.ingest.chrome_json import TraceEvent

# Kineto `cat` (lower-cased) -> canonical `kind`. 2021-2022 traces used "Kernel", "Runtime",
# "Memcpy", "Memset", "Operator"; ROCm traces use the CUDA names.
CATEGORY_KIND: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "driver": "driver",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
    "python_function": "python",
    "cpu_instant_event": "memory",
}

# Categories that are not events of the job: flow arrows, profiler spans, counters.
SKIPPED_CATEGORIES = frozenset({"ac2g", "async_cpu_to_gpu", "fwdbwd", "trace", "async_gpu"})


class Args(msgspec.Struct, gc=False, frozen=True):
    """The event args perfsleuth reads; everything else in `args` is skipped."""

    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_legacy: int | None = msgspec.field(name="external id", default=None)
    device: int | None = None
    stream: int | str | None = None
    bytes: int | None = None
    collective_name: str | None = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: int | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    pg_name: str | None = msgspec.field(name="Process Group Name", default=None)
    pg_ranks: str | list[int] | None = msgspec.field(name="Process Group Ranks", default=None)
    seq: int | None = msgspec.field(name="Seq", default=None)
    mem_bytes: int | None = msgspec.field(name="Bytes", default=None)
    mem_total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    mem_total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    mem_device_id: int | None = msgspec.field(name="Device Id", default=None)
    ev_idx: int | None = msgspec.field(name="Ev Idx", default=None)  # the profiler's running count of host events


_NO_ARGS = Args()


class Event(TraceEvent, gc=False):
    """One element of traceEvents (``chrome_json.TraceEvent``) with the args Kineto writes."""

    args: Args = _NO_ARGS


DECODER = msgspec.json.Decoder(list[Event])


def lenient_event(raw: object, dropped: dict[str, list[Any]] | None = None) -> Event:
    """Convert one already-decoded event, coercing what can be coerced (slow path, rare chunks).

    An arg that cannot be its field's type (a stream of 10**25, a device of "abc") is dropped and the
    event kept; ``dropped`` collects each such arg's values by JSON key, so the reader can say so."""
    if not isinstance(raw, dict):
        raise TypeError(f"expected an object, got {type(raw).__name__}")
    args = raw.get("args")
    if isinstance(args, dict):
        clean = {}
        for key, value in args.items():
            try:
                msgspec.convert({key: value}, Args, strict=False)
            except msgspec.ValidationError:
                if dropped is not None:
                    dropped.setdefault(key, []).append(value)
                continue  # drop the one bad arg, keep the event
            clean[key] = value
        raw = {**raw, "args": clean}
    elif args is not None:
        raw = {k: v for k, v in raw.items() if k != "args"}
    return msgspec.convert(raw, Event, strict=False)


class LenientEvents:
    """``lenient_event`` that remembers the args it dropped (``dropped``: JSON key -> values)."""

    def __init__(self) -> None:
        self.dropped: dict[str, list[Any]] = {}

    def __call__(self, raw: object) -> Event:
        return lenient_event(raw, self.dropped)
