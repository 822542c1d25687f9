"""What bus bandwidth a collective should reach on a given fabric, and the formulas behind busbw.

nccl-tests reports ``busbw = algbw x factor`` so that one number can be held against the speed of
the bottleneck link whatever the collective (NVIDIA/nccl-tests doc/PERFORMANCE.md; the factors are in
``model.collectives``). This module keeps a table of fabrics (NVLink generations, PCIe, InfiniBand/RoCE per GPU, TCP
sockets) with the bus bandwidth nccl-tests reaches on them at large sizes, and the rule that picks
the fabrics of a run from its GPU model. The numbers are defaults: a site replaces or extends them
with a YAML, JSON or TOML file (``load_fabric_table``), or the ``PERFSLEUTH_FABRIC_TABLE``
environment variable naming one. The table a job is judged against travels in its ``JobSignals.fabric``.

It only states expectations; judging a measurement against them is the detectors' job.
Bandwidths are GB/s = 1e9 B/s, one direction, per GPU, as nccl-tests prints them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfsleuth.errors import InputError
from perfsleuth.model.collectives import canonical_collective

ENV_VAR = "PERFSLEUTH_FABRIC_TABLE"


@dataclass(frozen=True, slots=True)
class Fabric:
    """One link type: its per-GPU bandwidth and the share of it nccl-tests' busbw reaches."""

    name: str
    scope: str  # "intra" (inside a node) or "inter" (between nodes, per GPU's NIC)
    link_gbs: float  # per GPU, one direction, GB/s
    efficiency: float  # busbw / link_gbs nccl-tests reaches at large sizes (ring, Simple protocol)
    rdma: bool = False  # inter-node fabrics: GPUDirect RDMA capable (IB, RoCE, EFA)
    note: str = ""
    collective_efficiency: Mapping[str, float] = field(default_factory=dict)  # per-collective overrides

    def busbw_gbs(self, collective: str) -> float:
        eff = self.collective_efficiency.get(canonical_collective(collective) or collective, self.efficiency)
        return self.link_gbs * eff


@dataclass(frozen=True, slots=True)
class GpuRule:
    """GPU models (regex on the device name) and the fabrics their reference systems use."""

    pattern: str
    intra: str
    inter: str


@dataclass(frozen=True, slots=True)
class Expected:
    """The bus bandwidth one run should reach, and what the expectation rests on."""

    busbw_gbs: float
    intra: Fabric
    inter: Fabric | None
    basis: str


@dataclass(frozen=True, slots=True)
class FabricTable:
    fabrics: Mapping[str, Fabric]
    gpu_rules: tuple[GpuRule, ...]
    network: str | None = None  # a site's inter-node fabric, overriding the GPU rule's
    tolerance: float = 0.25  # a run below (1 - tolerance) x expected is below the fabric's reach
    source: str = "built-in defaults"

    def fabric(self, name: str) -> Fabric:
        if name not in self.fabrics:
            raise KeyError(f"unknown fabric {name!r}; known: {sorted(self.fabrics)}")
        return self.fabrics[name]

    def rule_for(self, gpu_model: str | None) -> GpuRule | None:
        if not gpu_model:
            return None
        for rule in self.gpu_rules:
            if re.search(rule.pattern, gpu_model, re.IGNORECASE):
                return rule
        return None

    def expected(self, collective: str, *, gpu_model: str | None, nranks: int, nnodes: int, network: str | None = None) -> Expected | None:
        """Expected busbw of a run, or None when the GPU model matches no rule.

        Inside a node the NVLink (or PCIe) fabric bounds busbw. Across nodes a ring or tree crosses
        the node boundary through every GPU's NIC in parallel, so for the bandwidth-bound collectives
        busbw reaches the NICs' sum over a node's GPUs (``local x nic``), capped by the intra-node
        fabric; all-to-all sends only the off-node share ``(n - local)/(n - 1)`` of each rank's data
        through its NIC. These are first-order models: a site's measured baseline is better."""
        rule = self.rule_for(gpu_model)
        if rule is None or nranks < 2:
            return None
        intra = self.fabric(rule.intra)
        intra_bw = intra.busbw_gbs(collective)
        if nnodes <= 1:
            return Expected(intra_bw, intra, None, f"{intra.name}: {intra.link_gbs:g} GB/s x {intra_bw / intra.link_gbs:.2f}")
        inter = self.fabric(network or self.network or rule.inter)
        local = max(nranks // max(nnodes, 1), 1)
        nic = inter.busbw_gbs(collective)
        c = canonical_collective(collective)
        if c == "alltoall":
            off_node = (nranks - local) / max(nranks - 1, 1)
            inter_bw = nic / max(off_node, 1e-9)
            basis = f"{inter.name}: {nic:.1f} GB/s per GPU NIC / off-node share {off_node:.2f}"
        else:
            inter_bw = nic * local
            basis = f"{inter.name}: {nic:.1f} GB/s per GPU NIC x {local} GPUs per node"
        bw = min(intra_bw, inter_bw)
        if bw == intra_bw and intra_bw < inter_bw:
            basis += f", capped by {intra.name} ({intra_bw:.0f} GB/s)"
        return Expected(bw, intra, inter, basis)


_NCCL_TESTS = "NVIDIA/nccl-tests doc/PERFORMANCE.md"
DEFAULT_FABRICS: dict[str, Fabric] = {
    f.name: f
    for f in (
        Fabric(
            "nvlink3_a100",
            "intra",
            300.0,
            0.78,
            note=(
                "A100 SXM4 8-GPU (NVLink3 + NVSwitch, 600 GB/s both directions per GPU). nccl-tests all_reduce busbw 235 GB/s at "
                "8 GB on 8x A100-SXM4-40GB (microsoft/superbenchmark tests/data/nccl_allreduce.log)"
            ),
        ),
        Fabric(
            "nvlink4_h100",
            "intra",
            450.0,
            0.80,
            note=(
                "H100/H200 SXM 8-GPU (NVLink4 + NVSwitch, 900 GB/s both directions per GPU). Ring/Simple all_reduce reaches "
                "~360 GB/s; NVLS (NVLink SHARP) all_reduce goes higher, so this is a floor for healthy runs, not a ceiling"
            ),
        ),
        Fabric(
            "nvlink5_b200",
            "intra",
            900.0,
            0.80,
            note=("B200/B300 HGX 8-GPU (NVLink5, 1.8 TB/s both directions per GPU); efficiency assumed as NVLink4's"),
        ),
        Fabric("pcie4", "intra", 25.0, 0.75, note="PCIe Gen4 x16 between GPUs through the host (32 GB/s raw per direction)"),
        Fabric("pcie5", "intra", 50.0, 0.75, note="PCIe Gen5 x16 between GPUs through the host (64 GB/s raw per direction)"),
        Fabric("ib_800g", "inter", 100.0, 0.90, rdma=True, note="XDR InfiniBand 800 Gb/s, one NIC per GPU"),
        Fabric("ib_400g", "inter", 50.0, 0.90, rdma=True, note="NDR InfiniBand 400 Gb/s, one NIC per GPU (DGX/HGX H100 reference)"),
        Fabric("ib_200g", "inter", 25.0, 0.90, rdma=True, note="HDR InfiniBand 200 Gb/s, one NIC per GPU (DGX A100 reference)"),
        Fabric("roce_400g", "inter", 50.0, 0.85, rdma=True, note="RoCEv2 400 GbE per GPU; lossless-Ethernet tuning costs a few %"),
        Fabric("roce_200g", "inter", 25.0, 0.85, rdma=True, note="RoCEv2 200 GbE per GPU"),
        Fabric(
            "socket_100g",
            "inter",
            12.5,
            0.35,
            note=("NCCL's TCP socket transport over 100 GbE: CPU copies through host memory; the 0.35 share is an estimate"),
        ),
    )
}
DEFAULT_GPU_RULES: tuple[GpuRule, ...] = (
    GpuRule(r"B200|B300|GB200|GB300", "nvlink5_b200", "ib_400g"),
    GpuRule(r"H100 PCIe|H100 NVL", "pcie5", "ib_400g"),
    GpuRule(r"H100|H200|H800|H20\b|GH200", "nvlink4_h100", "ib_400g"),
    GpuRule(r"A100 ?PCIe|A100-PCIE", "pcie4", "ib_200g"),
    GpuRule(r"A100|A800", "nvlink3_a100", "ib_200g"),
)
DEFAULT_TABLE = FabricTable(DEFAULT_FABRICS, DEFAULT_GPU_RULES)
"""Reference systems' fabrics, each number with its source in ``note``. A site's own measured
baseline (a healthy run's nccl-tests output) beats every number here."""


def _read_doc(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(path, f"cannot read the fabric table: {exc.strerror or exc}") from exc
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"not a valid JSON document: {exc.msg}", place=f"line {exc.lineno}") from None
    elif suffix == ".toml":
        import tomllib

        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(path, f"not a valid TOML document: {exc}") from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError as exc:
            raise InputError(
                path, "reading a YAML fabric table needs PyYAML", hint="pip install pyyaml, or write the table as JSON or TOML"
            ) from exc
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(path, f"not a valid YAML document: {exc}") from None
    else:
        raise InputError(path, f"unknown fabric table format {suffix or '(none)'}", hint="use .yaml, .json or .toml")
    if not isinstance(doc, dict):
        raise InputError(path, "the fabric table must be a mapping with keys fabrics, gpus, network, tolerance")
    return doc


def _fabric_from(name: str, spec: Any, base: Fabric | None, path: Path) -> Fabric:
    if not isinstance(spec, dict):
        raise InputError(path, f"fabric {name!r} must be a mapping", place=f"fabrics.{name}")
    known = {"scope", "link_gbs", "efficiency", "rdma", "note", "collective_efficiency"}
    if unknown := set(spec) - known:
        raise InputError(path, f"unknown keys {sorted(unknown)}", place=f"fabrics.{name}", hint=f"known: {sorted(known)}")
    try:
        if base is not None:
            fab = replace(base, **{k: v for k, v in spec.items() if k != "collective_efficiency"})
        else:
            fab = Fabric(
                name,
                str(spec["scope"]),
                float(spec["link_gbs"]),
                float(spec.get("efficiency", 0.8)),
                bool(spec.get("rdma", False)),
                str(spec.get("note", "")),
            )
        fab = replace(fab, link_gbs=float(fab.link_gbs), efficiency=float(fab.efficiency))
        if "collective_efficiency" in spec:
            ce = {canonical_collective(k) or k: float(v) for k, v in dict(spec["collective_efficiency"]).items()}
            fab = replace(fab, collective_efficiency=ce)
    except KeyError as exc:
        raise InputError(path, f"a new fabric needs {exc.args[0]!r}", place=f"fabrics.{name}") from exc
    except (TypeError, ValueError) as exc:
        raise InputError(path, f"bad value: {exc}", place=f"fabrics.{name}") from exc
    if fab.scope not in ("intra", "inter") or fab.link_gbs <= 0 or not 0 < fab.efficiency <= 1.5:
        raise InputError(path, "scope must be intra or inter, link_gbs > 0 and efficiency in (0, 1.5]", place=f"fabrics.{name}")
    return fab


def load_fabric_table(path: str | Path, base: FabricTable = DEFAULT_TABLE) -> FabricTable:
    """A site's fabric table: its entries replace or extend ``base``.

    ::

        network: roce_400g            # this site's inter-node fabric, for every GPU model
        tolerance: 0.2
        fabrics:
          nvlink4_h100: {efficiency: 0.85}                  # change one number of a built-in fabric
          ib_400g_rail: {scope: inter, link_gbs: 50, efficiency: 0.92, rdma: true}
        gpus:                                               # tried first, in order, before the built-in rules
          - {pattern: "H100", intra: nvlink4_h100, inter: ib_400g_rail}
    """
    p = Path(path)
    doc = _read_doc(p)
    fabrics = dict(base.fabrics)
    for name, spec in (doc.get("fabrics") or {}).items():
        fabrics[str(name)] = _fabric_from(str(name), spec, fabrics.get(str(name)), p)
    rules: list[GpuRule] = []
    for i, r in enumerate(doc.get("gpus") or []):
        if not isinstance(r, dict) or not {"pattern", "intra", "inter"} <= set(r):
            raise InputError(p, "each gpus entry needs pattern, intra and inter", place=f"gpus[{i}]")
        rules.append(GpuRule(str(r["pattern"]), str(r["intra"]), str(r["inter"])))
    network = doc.get("network", base.network)
    for name in [network] + [x for r in rules for x in (r.intra, r.inter)]:
        if name is not None and name not in fabrics:
            raise InputError(p, f"names unknown fabric {name!r}", hint=f"define it under fabrics; known: {sorted(fabrics)}")
    try:
        tolerance = float(doc.get("tolerance", base.tolerance))
    except (TypeError, ValueError) as exc:
        raise InputError(p, f"tolerance must be a number: {exc}", place="tolerance") from exc
    return FabricTable(fabrics, tuple(rules) + base.gpu_rules, network, tolerance, str(p))


def fabric_table_from_env() -> FabricTable:
    """The site's table when ``$PERFSLEUTH_FABRIC_TABLE`` names one, else the defaults. Read once per job, into
    ``JobSignals.fabric``: the detectors take the table from the job they are given, never from process state."""
    env = os.environ.get(ENV_VAR)
    return load_fabric_table(env) if env else DEFAULT_TABLE
