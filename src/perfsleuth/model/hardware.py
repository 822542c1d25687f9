"""Peak numbers of the data-centre GPUs perfsleuth judges kernels and jobs against.

A roofline, an MFU or a "% of HBM bandwidth" is only as good as the ceiling it divides by, so the
ceilings live here, once, each with where it comes from. Every FLOP/s is **dense** (no 2:4
structured sparsity): NVIDIA's Hopper and Blackwell datasheets print Tensor Core rates "with
sparsity" and say the dense rate is one half; this table stores that half. Bandwidths are the
datasheet's bytes per second (1 TB/s = 1e12 B/s); NVLink is the datasheet's total (bidirectional)
per-GPU figure. Lookup is by the device name the tools write (``cudaGetDeviceProperties``,
``nvidia-smi``, Nsight Compute's ``device__attribute_display_name``, Kineto's ``deviceProperties``).

What it does not do: guess. A name that is not in the table (an H200 NVL, an A100 PCIe, a GPU
under a cloud's own label) returns ``None``; the caller says "no ceiling known" rather than
dividing by a neighbour's peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

TERA = 1e12
PETA = 1e15

PRECISIONS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""Keys of ``GpuSpec.peak_flop_per_s``: fp64/fp32 are the CUDA-core (vector) rates, the others
Tensor Core rates; fp64_tensor is DGEMM on Tensor Cores."""

_PRECISION_ALIASES = {
    "float64": "fp64",
    "double": "fp64",
    "f64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tensorfloat32": "tf32",
    "tensor_float32": "tf32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}


def canonical_precision(precision: str) -> str:
    """``"bfloat16"`` -> ``"bf16"``; unknown spellings are returned lower-cased, for the caller to reject."""
    p = precision.strip().lower()
    return _PRECISION_ALIASES.get(p, p)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model's ceilings. ``peak_flop_per_s`` holds only the precisions the part has."""

    key: str
    display: str
    names: tuple[str, ...]  # device name strings written by the tools
    sm_count: int
    peak_flop_per_s: dict[str, float]
    hbm_bytes_per_s: float
    hbm_capacity_bytes: float
    l2_bytes: int
    nvlink_bytes_per_s: float
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def peak(self, precision: str) -> float | None:
        """Dense peak FLOP/s for a precision (``None`` when the part has no such rate)."""
        return self.peak_flop_per_s.get(canonical_precision(precision))

    def ridge_flop_per_byte(self, precision: str) -> float | None:
        """Arithmetic intensity where the HBM roof meets the compute roof."""
        p = self.peak(precision)
        return p / self.hbm_bytes_per_s if p else None


A100_DATASHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): "
    "FP64 9.7, FP64 Tensor 19.5, FP32 19.5, TF32 156, BF16/FP16 312 TFLOPS dense (312/624 'with sparsity'), "
    "NVLink 600 GB/s; 108 SMs and 40 MB L2 from the NVIDIA A100 architecture whitepaper"
)

A100_SXM4_40GB = GpuSpec(
    key="a100-sxm4-40gb",
    display="A100 SXM4 40GB",
    names=("NVIDIA A100-SXM4-40GB",),
    sm_count=108,
    peak_flop_per_s={
        "fp64": 9.7 * TERA,
        "fp64_tensor": 19.5 * TERA,
        "fp32": 19.5 * TERA,
        "tf32": 156 * TERA,
        "bf16": 312 * TERA,
        "fp16": 312 * TERA,
    },
    hbm_bytes_per_s=1555e9,
    hbm_capacity_bytes=40e9,
    l2_bytes=40 << 20,
    nvlink_bytes_per_s=600e9,
    source=A100_DATASHEET + "; A100 40GB: HBM2 1,555 GB/s",
    notes=("no FP8/FP4 Tensor Core rate on Ampere",),
)
"""NVIDIA A100 40GB SXM: 108 SMs, 312 TFLOP/s dense BF16/FP16, 1,555 GB/s HBM2, 40 MB L2, 600 GB/s NVLink."""

A100_SXM4_80GB = GpuSpec(
    key="a100-sxm4-80gb",
    display="A100 SXM4 80GB",
    names=("NVIDIA A100-SXM4-80GB",),
    sm_count=108,
    peak_flop_per_s=dict(A100_SXM4_40GB.peak_flop_per_s),
    hbm_bytes_per_s=2039e9,
    hbm_capacity_bytes=80e9,
    l2_bytes=40 << 20,
    nvlink_bytes_per_s=600e9,
    source=A100_DATASHEET + "; A100 80GB SXM: HBM2e 2,039 GB/s",
    notes=("no FP8/FP4 Tensor Core rate on Ampere",),
)
"""NVIDIA A100 80GB SXM: as the 40GB part with HBM2e at 2,039 GB/s."""

H100_SXM = GpuSpec(
    key="h100-sxm",
    display="H100 SXM",
    names=("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    sm_count=132,
    peak_flop_per_s={
        "fp64": 34 * TERA,
        "fp64_tensor": 67 * TERA,
        "fp32": 67 * TERA,
        "tf32": 989 / 2 * TERA,
        "bf16": 1979 / 2 * TERA,
        "fp16": 1979 / 2 * TERA,
        "fp8": 3958 / 2 * TERA,
    },
    hbm_bytes_per_s=3.35e12,
    hbm_capacity_bytes=80e9,
    l2_bytes=50 << 20,
    nvlink_bytes_per_s=900e9,
    source=(
        "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP64 34, FP64 Tensor 67, FP32 67 TFLOPS; "
        "TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS 'with sparsity' (dense = 1/2); 80 GB HBM3 at 3.35 TB/s; "
        "NVLink 900 GB/s; 132 SMs and 50 MB L2 from the NVIDIA H100 (Hopper) architecture whitepaper"
    ),
)
"""NVIDIA H100 SXM5 80GB: 132 SMs, 989.5 TFLOP/s dense BF16, 1,979 FP8, 3.35 TB/s HBM3, 50 MB L2, 900 GB/s NVLink."""

H100_PCIE = GpuSpec(
    key="h100-pcie",
    display="H100 PCIe",
    names=("NVIDIA H100 PCIe",),
    sm_count=114,
    peak_flop_per_s={
        "fp64": 26 * TERA,
        "fp64_tensor": 51 * TERA,
        "fp32": 51 * TERA,
        "tf32": 756 / 2 * TERA,
        "bf16": 1513 / 2 * TERA,
        "fp16": 1513 / 2 * TERA,
        "fp8": 3026 / 2 * TERA,
    },
    hbm_bytes_per_s=2.0e12,
    hbm_capacity_bytes=80e9,
    l2_bytes=50 << 20,
    nvlink_bytes_per_s=600e9,
    source=(
        "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column: FP64 26, FP64 Tensor 51, FP32 51 TFLOPS; "
        "TF32 756, BF16/FP16 1,513, FP8 3,026 TFLOPS 'with sparsity' (dense = 1/2); 80 GB HBM2e at 2 TB/s; "
        "NVLink bridge 600 GB/s; 114 SMs from the H100 architecture whitepaper"
    ),
)
"""NVIDIA H100 PCIe 80GB: 114 SMs, 756.5 TFLOP/s dense BF16, 2 TB/s HBM2e, 50 MB L2, 600 GB/s NVLink bridge."""

H200_SXM = GpuSpec(
    key="h200",
    display="H200 SXM",
    names=("NVIDIA H200", "NVIDIA H200 SXM"),
    sm_count=132,
    peak_flop_per_s=dict(H100_SXM.peak_flop_per_s),
    hbm_bytes_per_s=4.8e12,
    hbm_capacity_bytes=141e9,
    l2_bytes=60 << 20,
    nvlink_bytes_per_s=900e9,
    source=(
        "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: FP64 34, FP64 Tensor 67, FP32 67 TFLOPS; "
        "TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS 'with sparsity' (dense = 1/2); 141 GB HBM3e at 4.8 TB/s; "
        "NVLink 900 GB/s. SM count (132) and L2 (62,914,560 B) as Nsight Compute 2025.3.1 read them on a real "
        "H200 (tests/data/real_h200/ncu: launch__sm_count, device__attribute_l2_cache_size)"
    ),
)
"""NVIDIA H200 SXM 141GB: GH100 compute of the H100 SXM (989.5 TFLOP/s dense BF16) with 4.8 TB/s HBM3e."""

B200 = GpuSpec(
    key="b200",
    display="B200 (HGX)",
    names=("NVIDIA B200",),
    sm_count=148,
    peak_flop_per_s={
        "fp64": 37 * TERA,
        "fp64_tensor": 37 * TERA,
        "fp32": 75 * TERA,
        "tf32": 1.125 * PETA,
        "bf16": 2.25 * PETA,
        "fp16": 2.25 * PETA,
        "fp8": 4.5 * PETA,
        "fp4": 9 * PETA,
    },
    hbm_bytes_per_s=7.7e12,
    hbm_capacity_bytes=180e9,
    l2_bytes=132_644_864,
    nvlink_bytes_per_s=1.8e12,
    source=(
        "NVIDIA HGX B200 specifications (8-GPU totals / 8): FP64 and FP64 Tensor 296 TFLOPS -> 37, FP32 600 -> 75, "
        "TF32 18, BF16/FP16 36, FP8 72, FP4 144 PFLOPS 'with sparsity' -> 1.125 / 2.25 / 4.5 / 9 PFLOPS dense per GPU; "
        "NVIDIA Blackwell datasheet, HGX B200 column: 180 GB HBM3e at 7.7 TB/s (earlier material: 8 TB/s), "
        "NVLink 5 1.8 TB/s per GPU; 148 SMs and L2 132,644,864 B as cudaGetDeviceProperties reports them "
        "(not in the datasheet)"
    ),
    notes=("HBM bandwidth: 7.7 TB/s (current datasheet) is used; 8 TB/s would lower a memory-bound kernel's % of roof by 4%",),
)
"""NVIDIA B200 (HGX, 1,000 W): 148 SMs, 2.25 PFLOP/s dense BF16, 4.5 FP8, 9 FP4, 7.7 TB/s HBM3e, 1.8 TB/s NVLink 5."""

GPUS: tuple[GpuSpec, ...] = (A100_SXM4_40GB, A100_SXM4_80GB, H100_SXM, H100_PCIE, H200_SXM, B200)


def _norm(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).casefold()


_BY_NAME: dict[str, GpuSpec] = {}
for _g in GPUS:
    for _n in (*_g.names, _g.key, _g.display):
        _BY_NAME[_norm(_n)] = _g


def lookup(name: object) -> GpuSpec | None:
    """The spec for a device name as the tools write it (``"NVIDIA H200"``), or its key (``"h100-sxm"``).

    Exact after case and whitespace folding: ``"NVIDIA H200 NVL"`` is a different part and is not found.
    Anything that is not a name (None, a pandas NaN for a blank cell, a number) finds nothing."""
    if not isinstance(name, str) or not name:
        return None
    return _BY_NAME.get(_norm(name))


def resolve(gpu: GpuSpec | str | None) -> GpuSpec | None:
    """A spec from either a spec or a name (the form public functions accept)."""
    return gpu if isinstance(gpu, GpuSpec) or gpu is None else lookup(gpu)


HARDWARE = pa.schema(
    [
        pa.field("gpu", pa.string(), nullable=False, metadata={"doc": "table key (lookup also accepts the device names)"}),
        pa.field("display", pa.string()),
        pa.field("device_names", pa.list_(pa.string()), metadata={"doc": "device name strings the tools write"}),
        pa.field("sm_count", pa.int32()),
        *[pa.field(f"peak_{p}_flop_per_s", pa.float64(), metadata={"unit": "FLOP/s", "doc": f"dense {p} peak"}) for p in PRECISIONS],
        pa.field("hbm_bytes_per_s", pa.float64(), metadata={"unit": "B/s"}),
        pa.field("hbm_capacity_bytes", pa.float64(), metadata={"unit": "bytes"}),
        pa.field("l2_bytes", pa.int64(), metadata={"unit": "bytes"}),
        pa.field("nvlink_bytes_per_s", pa.float64(), metadata={"unit": "B/s", "doc": "total, both directions"}),
        pa.field("source", pa.string()),
    ],
    metadata={"table": "hardware"},
)


def hardware_table() -> pa.Table:
    """Every GPU in the table as one Arrow row (missing precisions are null)."""
    rows = [
        {
            "gpu": g.key,
            "display": g.display,
            "device_names": list(g.names),
            "sm_count": g.sm_count,
            **{f"peak_{p}_flop_per_s": g.peak_flop_per_s.get(p) for p in PRECISIONS},
            "hbm_bytes_per_s": g.hbm_bytes_per_s,
            "hbm_capacity_bytes": g.hbm_capacity_bytes,
            "l2_bytes": g.l2_bytes,
            "nvlink_bytes_per_s": g.nvlink_bytes_per_s,
            "source": g.source,
        }
        for g in GPUS
    ]
    return pa.Table.from_pylist(rows, schema=HARDWARE)
