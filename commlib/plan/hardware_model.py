"""The machine a plan runs on: a topology.Topology of GPUs with their memory and FLOP/s, and what a
parallel group's collectives cost on it.

Ranks are laid out as Megatron does: tensor-parallel ranks adjacent, then data-parallel, then pipeline
stages. A group is `size` ranks `stride` apart: tensor parallel stride 1, data and expert parallel stride
tp, the data parallelism of expert weights stride tp*ep, pipeline neighbours tp*dp. Its members sit q per
node (q = size if the group fits in a node, else g // stride, at least 1) on size/q nodes. Every group of
a kind communicates at the same time, so each GPU has its own share of its node's NICs, k/g of them
(rail-connected, NVIDIA's DGX reference designs); a group is priced as a topology.Topology of size/q
nodes with q GPUs each and one per-GPU NIC share per GPU:

    all_reduce, reduce_scatter, all_gather   topology's multi_ring (NCCL's rings leave every node through
                                              the NICs of all its GPUs: busbw ~ q k/g B_nic across nodes)
    all_to_all                                bulk (NCCL's: all at once) or pairwise; each GPU's off-node
                                              bytes leave through its own NIC share: all-to-all cannot
                                              aggregate NICs (nccl-tests issue #267)
    point-to-point (pipeline stages)          alpha + n / B on NVLink, or on the GPU's NIC share across nodes

On one node every group is a ring on the intra link. The pricing is exactly topology.collective_time on the
group's topology (tests hold them equal), latencies included: NCCL's per-call latency (cost.Link.call_latency)
once per collective, and its per-step latencies (NCCL 2.30.7 src/graph/tuning.cc; see commlib.links).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from commlib import _validate as check
from commlib import cost
from commlib import topology as topo
from commlib.cost import Link
from commlib.plan.summary import describe_topology, topology_sources


@dataclass(frozen=True)
class GPU:
    memory: float        # bytes
    peak_flops: float    # dense 16-bit tensor FLOP/s
    source: str


GPUS = {
    "a100": GPU(80e9, 312e12, "NVIDIA A100 datasheet: A100 80GB SXM, BF16 Tensor Core 312 TFLOPS dense (624 with "
                              "sparsity), 80 GB HBM2e"),
    "h100": GPU(80e9, 989e12, "NVIDIA H100 datasheet: H100 SXM, BF16 Tensor Core 1,979 TFLOPS with sparsity "
                              "(989 dense), 80 GB HBM3"),
    "b200": GPU(180e9, 2250e12, "NVIDIA HGX B200 specifications: 180 GB HBM3E per GPU, FP16/BF16 Tensor Core 4.5 "
                                "PFLOPS with sparsity (2.25 dense) per GPU"),
    "gb200": GPU(186e9, 2.5e15, "NVIDIA GB200 NVL72 specifications: FP16/BF16 Tensor Core 360 PFLOPS with sparsity "
                                "per 72 GPUs (2.5 PFLOPS dense per GPU), up to 13.4 TB HBM3e (186 GB per GPU)"),
    "gb300": GPU(279e9, 2.5e15, "NVIDIA GB300 NVL72 specifications: FP16/BF16 Tensor Core 360 PFLOPS with sparsity "
                                "per 72 GPUs (2.5 PFLOPS dense per GPU), up to 20 TB HBM3e (279 GB per GPU)"),
}
PRESET_GPU = {"dgx_a100": "a100", "dgx_h100": "h100", "dgx_b200": "b200", "b200_xdr": "b200",
              "gb200_nvl72": "gb200", "gb300_nvl72": "gb300"}
MAX_NODES = 2**17      # 131072 nodes: beyond any machine built, and the search's enumeration stays short
MAX_AMOUNT = 1e30      # bytes, FLOP/s


def _positive(name: str, value) -> float:
    return check.number(name, value, 0, strict=True, high=MAX_AMOUNT)


@dataclass(frozen=True)
class Hardware:
    """nodes x gpus_per_node GPUs of gpu_memory bytes and peak_flops (dense 16-bit) each; intra joins the GPUs
    of a node, inter is one NIC, nics_per_node of them per node (None: one per GPU). `topology` is the
    topology.Topology they make."""

    nodes: int
    gpus_per_node: int
    gpu_memory: float
    peak_flops: float
    intra: Link | str = cost.LINKS["nvlink4"]
    inter: Link | str = cost.LINKS["ib_ndr"]
    nics_per_node: int | None = None
    name: str = field(default="", compare=False)
    topology: topo.Topology = field(init=False, repr=False, compare=False)
    nic_share: Link = field(init=False, repr=False, compare=False)   # one GPU's share of its node's NICs

    def __post_init__(self):
        check.integer("nodes", self.nodes, 1, MAX_NODES)
        nics = self.gpus_per_node if self.nics_per_node is None else self.nics_per_node
        t = topo.Topology(self.nodes, self.gpus_per_node, self.intra, self.inter, nics, name=self.name)
        for name in ("nodes", "gpus_per_node", "intra", "inter", "nics_per_node"):
            object.__setattr__(self, name, getattr(t, name))
        object.__setattr__(self, "gpu_memory", _positive("gpu_memory", self.gpu_memory))
        object.__setattr__(self, "peak_flops", _positive("peak_flops", self.peak_flops))
        object.__setattr__(self, "topology", t)
        # what one GPU can send across nodes while every GPU of its node does the same
        share = t.inter if t.nics_per_node == t.gpus_per_node else \
            replace(t.inter, name=f"{t.inter.name} x {t.nics_per_node}/{t.gpus_per_node}",
                    bandwidth=t.inter.bandwidth * t.nics_per_node / t.gpus_per_node,
                    source=f"one GPU's share of {t.nics_per_node} {t.inter.name} NICs per {t.gpus_per_node} GPUs")
        object.__setattr__(self, "nic_share", share)
        object.__setattr__(self, "_hash", hash((t, self.gpu_memory, self.peak_flops)))

    def __hash__(self) -> int:  # computed once: prices are cached per machine and the search is hot
        return self._hash

    @classmethod
    def from_topology(cls, topology: topo.Topology, gpu_memory, peak_flops) -> Hardware:
        if not isinstance(topology, topo.Topology):
            raise TypeError(f"topology must be a topology.Topology, got {type(topology).__name__}")
        return cls(topology.nodes, topology.gpus_per_node, gpu_memory, peak_flops, topology.intra, topology.inter,
                   topology.nics_per_node, name=topology.name)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def describe(self) -> str:
        """Two short lines for people: the topology's one line (plan.describe_topology), then the GPU."""
        return (f"{describe_topology(self.topology)}\nGPUs of {self.gpu_memory / 1e9:g} GB, "
                f"{self.peak_flops / 1e12:,.0f} TFLOP/s dense 16-bit")

    def sources(self) -> dict[str, str]:
        """Where the numbers come from: the topology's sources, and the GPU's datasheet when it is one of GPUS."""
        gpu = next((k for k, g in GPUS.items() if (g.memory, g.peak_flops) == (self.gpu_memory, self.peak_flops)), None)
        return {**topology_sources(self.topology), **({gpu.upper(): GPUS[gpu].source} if gpu else {})}


def hardware(name: str, nodes, achievable: bool = False) -> Hardware:
    """`nodes` of a topology preset with its GPUs (GPUS); achievable=True: NCCL's measured link speeds
    (topology.ACHIEVABLE) instead of line rates."""
    name = check.choice("name", name, tuple(topo.PRESETS))
    check.integer("nodes", nodes, 1, MAX_NODES)
    gpu = GPUS[PRESET_GPU[name]]
    return Hardware.from_topology(topo.preset(name, nodes, achievable), gpu.memory, gpu.peak_flops)


# ------------------------------------------------------------------------------------ pricing
def group_shape(hw: Hardware, size: int, stride: int) -> tuple[int, int]:
    """-> (nodes, members per node) of a group of `size` ranks `stride` apart (exact when size*stride and
    the node size g divide one another, as in every preset layout)."""
    g = hw.gpus_per_node
    q = size if size * stride <= g else math.gcd(size, max(1, g // stride))
    return size // q, q


@functools.lru_cache(maxsize=4096)
def group_topology(hw: Hardware, size: int, stride: int) -> topo.Topology:
    """The topology.Topology one group sees: its nodes, its members per node, the intra link, and one
    per-GPU NIC share (hw.nic_share) per member."""
    nodes, q = group_shape(hw, size, stride)
    return topo.Topology(nodes, q, hw.intra, hw.nic_share, q)


ALGORITHM = {"all_reduce": "multi_ring", "reduce_scatter": "multi_ring", "all_gather": "multi_ring"}
ALL_TO_ALL = ("bulk", "pairwise")


def collective_s(op: str, nbytes: float, size: int, stride: int, hw: Hardware, all_to_all: str = "bulk") -> float:
    """Seconds for one collective of nbytes (the nccl-tests convention) over a group of `size` ranks `stride`
    apart: topology.collective_time on group_topology, multi_ring for all_reduce / reduce_scatter /
    all_gather, `all_to_all` (bulk | pairwise) for all_to_all."""
    if not (type(op) is str and type(nbytes) in (int, float) and 0 <= nbytes <= MAX_AMOUNT and type(size) is int
            and type(stride) is int and type(hw) is Hardware and 1 <= size <= hw.world and 1 <= stride <= hw.world
            and type(all_to_all) is str):  # the search's calls pass this test; everything else is checked
        check.instance("hw", hw, Hardware, "a plan.Hardware")
        op = check.choice("op", op, (*ALGORITHM, "all_to_all"))
        nbytes = check.number("nbytes", nbytes, 0, high=MAX_AMOUNT, unit="bytes")
        size = check.integer("size", size, 1, hw.world)
        stride = check.integer("stride", stride, 1, hw.world)
        all_to_all = check.choice("all_to_all", all_to_all, ALL_TO_ALL)
    return _collective_s(op, nbytes, size, stride, hw, all_to_all)


@functools.lru_cache(maxsize=65536)
def _collective_s(op: str, nbytes: float, size: int, stride: int, hw: Hardware, all_to_all: str) -> float:
    if size == 1 or nbytes == 0:
        return 0.0
    if op == "all_to_all":
        if all_to_all not in ALL_TO_ALL:
            raise ValueError(f"all_to_all must be one of {ALL_TO_ALL}, got {all_to_all!r}")
        algorithm = all_to_all
    elif op in ALGORITHM:
        algorithm = ALGORITHM[op]
    else:
        raise ValueError(f"op must be one of {(*ALGORITHM, 'all_to_all')}, got {op!r}")
    return topo.collective_time(op, nbytes, group_topology(hw, size, stride), algorithm)


def p2p_s(nbytes: float, crosses_nodes: bool, hw: Hardware) -> float:
    """Seconds for every rank to send nbytes to one neighbour at once: alpha + n / B on the intra link, or on
    each GPU's NIC share across nodes (cost's sendrecv)."""
    if not (type(nbytes) in (int, float) and 0 <= nbytes <= MAX_AMOUNT and type(hw) is Hardware):
        check.instance("hw", hw, Hardware, "a plan.Hardware")
        nbytes = check.number("nbytes", nbytes, 0, high=MAX_AMOUNT, unit="bytes")
    return _p2p_s(nbytes, bool(crosses_nodes), hw)


@functools.lru_cache(maxsize=4096)
def _p2p_s(nbytes: float, crosses_nodes: bool, hw: Hardware) -> float:
    if nbytes == 0:
        return 0.0
    return cost.collective_time("sendrecv", nbytes, 2, hw.nic_share if crosses_nodes else hw.intra)


def clear_cache() -> None:
    """Forget every cached price (for cold-start benchmarks)."""
    for f in (group_topology, _collective_s, _p2p_s):
        f.cache_clear()

