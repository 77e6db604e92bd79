"""Clusters of nodes: GPUs per node on a fast intra-node link, NICs per node on a slower network.

One flat ring prices every hop alike; a real cluster has two kinds of link, and how an algorithm
spreads its bytes over them decides its speed. With N nodes of g GPUs (p = N g ranks), k NICs per
node of bandwidth B_net each (rail-connected: GPU i uses NIC i mod k), an intra link of B_intra per
GPU and direction, and n bytes to all-reduce, every algorithm below moves 2(p-1)/p n bytes per rank
in total (the ring's volume, Thakur et al. 2005); they differ in *which* links carry them:

    flat_ring     one ring through all GPUs: each node's traffic leaves through one NIC.
                  busbw <= B_net (one NIC's worth, however many the node has)
    multi_ring    NCCL's channels: g rings, ring c leaving every node from GPU c, so through NIC c mod k;
                  the node's NICs add up.   busbw <= min(k B_net, g/(g-1) B_intra)
    hierarchical  reduce-scatter in the node, all-reduce of each 1/g shard across nodes (GPU i with
                  GPU i of every node, on its rail), all-gather in the node; phases one after another.
    in_network    NVLS (NVSwitch reduces) inside the node, SHARP (the IB switch reduces) across nodes. Each
                  GPU reads every shard through the switch (multimem ld_reduce: n) and multicasts its reduced
                  shard (n/g): n(1+1/g) per direction (S. Jeaugey, NVIDIA: NVLS "algobw = busbw * n / (n+1)",
                  nccl-tests pull request #239, 2024-09-02; the factor 1+1/n of nccl #2140), a bound:
                  algbw <= min(B_intra g/(g+1), k B_net). The switch accumulates fp16/bf16 in fp32.
                  On 8x H100 (370 GB/s achievable) 329 GB/s algbw; measured ~275 algbw, ~480 busbw (nccl-tests
                  #212). NVLS is NCCL's default single-node all-reduce on H100 for large sizes, not the ring.

Derivation of the multi_ring bound (what NCCL's tuning model does, src/graph/tuning.cc v2.30.7:
ring busBw = nChannels x per-channel bandwidth, bwInter beyond 2 nodes; src/graph/search.cc adds
channels until nChannels x bwInter reaches the node's total): with one ring per NIC, each ring
carries n/k and leaves each node once, so a node sends 2(p-1)/p n across its k NICs:
t >= 2(p-1)/p n / (k B_net), i.e. busbw = 2(p-1)/p n / t <= k B_net, independent of g and N. A
GPU's own NVLink egress carries the (g-1)/g of its rings that stay inside: busbw <= g/(g-1) B_intra.
On DGX H100 (8 NDR NICs, 48 GB/s achievable each): 384 GB/s; NVIDIA reports 365-380 (PUBLISHED). That
is MORE than one node's ring (370): inside one node every hop of a ring is NVLink, across nodes one hop
in g leaves through a NIC, so NVLink carries only (g-1)/g of the bytes (its bound rises to g/(g-1) x 370
= 423) and the 8 NICs' 384 set the pace.
(NCCL's default is not the ring everywhere: on one H100 node it runs NVLS for large all-reduces, on 2
nodes its tree or NVLSTree, which send less across the network and can beat k B_net; NVIDIA benchmarks
the network with NCCL_ALGO=Ring: S. Jeaugey, nccl-tests issues #160, #196, #212. multi_ring prices what
NCCL_ALGO=Ring runs.)
All-to-all cannot aggregate NICs that way: the node's g GPUs each send (N-1)/N n off the node at once, so
every NIC is already busy and busbw ~ N/(N-1) (k/g) B_net (NVIDIA's formula, nccl-tests issue #130; "Alltoall
cannot aggregate the bandwidth of multiple NICs": nccl-tests issue #267). With PXN (NCCL_P2P_PXN_LEVEL=2, the
p2p default; ncclTopoGetNetDev, src/graph/search.cc v2.30.7) a block leaves through the NIC of the destination
GPU's rail, relayed over NVLink; NCCL's rings enter and leave a node through one NIC (search.cc). The bound is
the same; here a GPU's blocks are priced on its own rail, which loads every NIC alike for an even all-to-all:

    bulk          NCCL's all-to-all: every send and receive posted at once; time = the busiest NIC's bytes
    pairwise      commlib's: p-1 steps in lockstep (rank r sends to r+s at step s), each as slow as its
                  busiest NIC; on 2 nodes x 8 it pays a NIC step 15 times where bulk pays 8 steps' bytes

Latency: NCCL's model (commlib.cost.links; _latency). NVLink domains can span nodes: GB200/GB300 NVL72
racks are 72-GPU "nodes" here (MNNVL, nccl issue #1286).
Units: bytes, seconds, bytes/s per direction. nbytes follows nccl-tests: the full tensor for
all_reduce, the gathered total for all_gather, the full input for reduce_scatter and all_to_all.
Pure Python: no torch here. The emulated cluster these times are checked on is commlib.network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from numbers import Real

from commlib import _validate as check
from commlib import cost
from commlib.cost import Link, Published
from commlib.cost.links import nccl_latency
from commlib.cost.registry import algorithms

# -------------------------------------------------------------------------- achievable links
# What NCCL actually reaches per direction at large sizes, next to each line rate in cost.LINKS.
ACHIEVABLE: dict[str, Link] = {
    "nvlink3": Link("nvlink3_nccl", 230e9, cost.LINKS["nvlink3"].latency,
                    "A100: 12 NVLinks x 25 GB/s line rate -> ~20 GB/s effective each (128 B payloads from SMs) "
                    "-> 240, other GPU bottlenecks -> ~230 GB/s ring busbw (S. Jeaugey, NVIDIA, "
                    "github.com/NVIDIA/nccl-tests/issues/149, 2023-07-05); NCCL models 12 x 20.0 "
                    "(src/graph/topo.h SM80_NVLINK_BW, v2.30.7); 232.5 GB/s measured on 8x A100 in nccl-tests#175"),
    "nvlink4": Link("nvlink4_nccl", 370e9, cost.LINKS["nvlink4"].latency,
                    "H100: 450 GB/s line rate, ~20% protocol overhead -> 370 GB/s ring busbw (S. Jeaugey, "
                    "NVIDIA, github.com/NVIDIA/nccl-tests/issues/212, 2024-05-06); NCCL models 18 x 20.6 = "
                    "370.8 (src/graph/topo.h SM90_NVLINK_BW, v2.30.7)"),
    "nvlink5": Link("nvlink5_nccl", 721.8e9, cost.LINKS["nvlink5"].latency,
                    "B200: NCCL's topology model, 18 links x 40.1 GB/s = 721.8 GB/s (src/graph/topo.h "
                    "SM100_NVLINK_BW, v2.30.7; the 'maxBw 721.8' of github.com/NVIDIA/nccl/issues/1807). A user "
                    "report, not NVIDIA's figure: 8x B300 with NVLS off ~695 GB/s busbw (github.com/NVIDIA/nccl/"
                    "issues/2140, 2026-04-28)"),
    "ib_hdr": Link("ib_hdr_nccl", 24e9, cost.LINKS["ib_hdr"].latency,
                   "HDR 200 Gb/s NIC: 'we usually consider 24GB/s is the peak performance per 200G NIC' "
                   "(S. Jeaugey, NVIDIA, github.com/NVIDIA/nccl-tests/issues/119, 2022-11-17)"),
    "ib_ndr": Link("ib_ndr_nccl", 48e9, cost.LINKS["ib_ndr"].latency,
                   "NDR 400 Gb/s NIC: 'you should see 46-48GB/s per NIC' (D. Addison, NVIDIA, "
                   "github.com/NVIDIA/nccl-tests/issues/290, 2025-03-03); '48-49GB/s per NIC' "
                   "(nccl-tests/issues/267, 2025-01-23)"),
    "ib_xdr": Link("ib_xdr_nccl", 96e9, cost.LINKS["ib_xdr"].latency,
                   "XDR 800 Gb/s NIC: ASSUMED at NDR's 96% of line rate; no published NCCL figure found"),
}
# NCCL's latencies (per call, per hop) do not depend on how fast the bytes move: keep the line's
ACHIEVABLE = {k: replace(cost.LINKS[k], name=v.name, bandwidth=v.bandwidth, source=v.source) for k, v in ACHIEVABLE.items()}


def _link(link, name: str) -> Link:
    if isinstance(link, str):
        if link not in cost.LINKS:
            raise ValueError(f"{name} must be a cost.Link or one of {tuple(cost.LINKS)}, got {link!r}")
        link = cost.LINKS[link]
    if not isinstance(link, Link):
        raise TypeError(f"{name} must be a cost.Link or a name in cost.LINKS, got {type(link).__name__}")
    if not (isinstance(link.bandwidth, Real) and math.isfinite(link.bandwidth) and link.bandwidth > 0):
        raise ValueError(f"{name}.bandwidth must be a finite number of bytes/s > 0, got {link.bandwidth!r}")
    if not (isinstance(link.latency, Real) and math.isfinite(link.latency) and link.latency >= 0):
        raise ValueError(f"{name}.latency must be a finite number of seconds >= 0, got {link.latency!r}")
    return link


MAX_NODES, MAX_GPUS_PER_NODE, MAX_BYTES = 2**20, 2**12, 1e30  # beyond any machine; every float stays finite
MAX_STEPS = 2**21  # world size x GPUs per node: what the exact enumerations (pairwise steps, per rank) may walk


def _steps(t) -> None:
    check.integer("topology's world_size x gpus_per_node", t.world_size * t.gpus_per_node, 1, MAX_STEPS)


@dataclass(frozen=True)
class Topology:
    """nodes x gpus_per_node GPUs; `intra` joins the GPUs of a node (per GPU and direction), `inter` is one NIC
    (per direction), nics_per_node of them per node, rail-connected: GPU i's traffic uses NIC i mod k."""

    nodes: int
    gpus_per_node: int
    intra: Link | str
    inter: Link | str
    nics_per_node: int = 1
    name: str = field(default="", compare=False)

    def __post_init__(self):
        for name, high in (("nodes", MAX_NODES), ("gpus_per_node", MAX_GPUS_PER_NODE), ("nics_per_node", 2**12)):
            object.__setattr__(self, name, check.integer(name, getattr(self, name), 1, high))
        object.__setattr__(self, "intra", _link(self.intra, "intra"))
        object.__setattr__(self, "inter", _link(self.inter, "inter"))

    @classmethod
    def for_world_size(cls, world_size, gpus_per_node, intra, inter, nics_per_node=1) -> Topology:
        """The topology of world_size ranks in nodes of gpus_per_node (ValueError unless it divides)."""
        p, g = check.integer("world_size", world_size, 1, 2**32), check.integer("gpus_per_node", gpus_per_node, 1)
        if p % g:
            raise ValueError(f"world_size ({p}) must be a multiple of gpus_per_node ({g})")
        return cls(p // g, g, intra, inter, nics_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def rails(self) -> int:
        """NICs that rail-pinned GPUs use: min(k, g). With more NICs than GPUs each GPU drives k/g of them."""
        return min(self.nics_per_node, self.gpus_per_node)

    @property
    def rail_bandwidth(self) -> float:
        """Bytes/s per direction of one rail: k/rails NICs."""
        return self.inter.bandwidth * self.nics_per_node / self.rails

    @property
    def gpus_per_rail(self) -> int:
        """GPUs of a node sharing one rail when all send off-node at once: ceil(g / rails)."""
        return -(-self.gpus_per_node // self.rails)


# ----------------------------------------------------------------------------------- presets
PRESETS = {
    "dgx_a100": ("nvlink3", "ib_hdr", "NVIDIA DGX A100 User Guide (DU-09821-001): 8x A100 SXM4 on 6 NVSwitches "
                 "(NVLink3, 600 GB/s per GPU both directions), 8x single-port ConnectX-6 HDR 200 Gb/s for the "
                 "compute fabric ('an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards', D. Addison, NVIDIA, "
                 "github.com/NVIDIA/nccl/issues/812), 2x AMD EPYC 7742 CPUs: NCCL's net overhead 2 us"),
    "dgx_h100": ("nvlink4", "ib_ndr", "NVIDIA DGX BasePOD reference architecture, core components: DGX H100, 8x H100 "
                 "SXM (NVLink4, 900 GB/s per GPU both directions), four OSFP ports serving eight single-port "
                 "ConnectX-7, up to 400 Gb/s InfiniBand (docs.nvidia.com/dgx-basepod)"),
    "dgx_b200": ("nvlink5", "ib_ndr", "NVIDIA DGX B200 User Guide, hardware overview: 8x B200 (NVLink5, 1.8 TB/s per "
                 "GPU both directions), 4x OSFP ports for 8x single-port ConnectX-7, InfiniBand up to 400 Gb/s "
                 "(docs.nvidia.com/dgx/dgxb200-user-guide)"),
    "b200_xdr": ("nvlink5", "ib_xdr", "A what-if: the DGX B200 node with 8x ConnectX-8 SuperNICs at 800 Gb/s XDR "
                 "(NVIDIA ConnectX-8 SuperNIC User Manual: 'up to 800 gigabits per second'), as NVIDIA's B300 "
                 "systems ship; needs a PCIe Gen6 path from GPU to NIC"),
    # Multi-node NVLink (MNNVL): one NVLink domain of 72 GPUs across 18 compute trays, so a "node" here is a rack
    "gb200_nvl72": ("nvlink5", "ib_ndr", "NVIDIA GB200 NVL72: '72 Blackwell generation GPUs connected to a single "
                    "NVLink domain', NVLink SHARP included (D. Addison, NVIDIA, github.com/NVIDIA/nccl/issues/1286, "
                    "2024-05-15); NCCL drives it with its P2P transport, as inside one node (nccl#1159); NVLink5 "
                    "1.8 TB/s per GPU both directions; per 4-GPU compute tray 4x ConnectX-7 400 Gb/s (MLCommons "
                    "inference v6.1, Crusoe GB200-NVL72 system description): one NDR NIC per GPU"),
    "gb300_nvl72": ("nvlink5", "ib_xdr", "NVIDIA GB300 NVL72: the same 72-GPU NVLink5 domain (MNNVL) with Blackwell "
                    "Ultra GPUs and one ConnectX-8 SuperNIC, up to 800 Gb/s, per GPU (DGX GB300 release notes, "
                    "'CX8' components; NVIDIA ConnectX-8 SuperNIC User Manual)"),
}
GPUS_PER_NODE = {"gb200_nvl72": 72, "gb300_nvl72": 72}   # GPUs per NVLink domain; every other preset: 8
# NCCL's net overhead per ring step across nodes depends on the host CPU (NCCL 2.30.7 src/graph/tuning.cc:228-233,
# getNetOverhead: 2 us on AMD x86, 1 us on Intel and every other CPU): DGX A100 has AMD EPYC; every other preset 1 us
NET_OVERHEAD = {"dgx_a100": 2e-6}


def preset_gpus(name: str) -> int:
    """GPUs (and NICs) per node, or per NVLink domain, of a preset."""
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)}, got {name!r}")
    return GPUS_PER_NODE.get(name, 8)


def preset(name: str, nodes=1, achievable: bool = False) -> Topology:
    """A real node type, `nodes` of it. achievable=True prices NCCL's measured link speeds (ACHIEVABLE)
    instead of line rates."""
    name = check.choice("name", name, tuple(PRESETS))
    intra, inter, _ = PRESETS[name]
    intra, inter = (ACHIEVABLE[intra], ACHIEVABLE[inter]) if achievable else (cost.LINKS[intra], cost.LINKS[inter])
    if name in NET_OVERHEAD:
        inter = replace(inter, post_overhead=NET_OVERHEAD[name])
    g = preset_gpus(name)
    return Topology(nodes, g, intra, inter, g, name=name + (" (achievable)" if achievable else ""))


# ---------------------------------------------------------------------------------- the model
# op -> the node-level algorithms of commlib.cost.registry (as cost.PAIRS is for one link)
PAIRS = {op: algorithms("nodes", op) for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")}


def _check(op: str, nbytes, topology: Topology, algorithm: str) -> float:
    op = check.choice("op", op, tuple(PAIRS))
    check.choice(f"algorithm for {op}", algorithm, PAIRS[op])
    if not isinstance(topology, Topology):
        raise TypeError(f"topology must be a Topology, got {type(topology).__name__}")
    if algorithm == "pairwise":
        _steps(topology)
    return check.number("nbytes", nbytes, low=0, unit="bytes", high=MAX_BYTES)


def _pairwise_flows(t: Topology) -> list[tuple[bool, bool, int]]:
    """For each step s = 1..p-1 of the pairwise all-to-all (rank r sends to r+s, receives from r-s), in
    lockstep: (some rank's message stays in a node, some leaves it, most messages on one rail and direction)."""
    g, nodes, rails, p = t.gpus_per_node, t.nodes, t.rails, t.world_size
    tx = []
    for s in range(p):
        q, rr = divmod(s, g)
        off = [(q + (j + rr >= g)) % nodes != 0 for j in range(g)]  # GPU j's step-s destination is off-node
        tx.append((not all(off), any(off), max(sum(off[j] for j in range(m, g, rails)) for m in range(rails))))
    # what arrives at step s is what leaves at step p - s (the pattern is a shift)
    return [(tx[s][0], tx[s][1], max(tx[s][2], tx[p - s][2])) for s in range(1, p)]


def _rounds(op: str, n: float, t: Topology, algorithm: str) -> list[tuple[int, float | None, float | None, int]]:
    """The algorithm as rounds of identical steps: (steps, bytes each GPU sends on the intra link per step or
    None, bytes of each off-node flow per step or None, flows sharing the busiest rail per step)."""
    g, nodes, p, share = t.gpus_per_node, t.nodes, t.world_size, t.gpus_per_rail
    half = op != "all_reduce"  # reduce-scatter and all-gather: one pass of the ring instead of two
    passes = 1 if half else 2
    if algorithm == "flat_ring":
        return [(passes * (p - 1), n / p if g > 1 or nodes == 1 else None, n / p if nodes > 1 else None, 1)]
    if algorithm == "multi_ring":
        if nodes == 1:  # g rings inside one node carry n/g each: the flat ring's bytes per step
            return [(passes * (p - 1), n / p, None, 1)]
        return [(passes * (p - 1), (g - 1) * n / (g * p) if g > 1 else None, n / (g * p), share)]
    if algorithm == "hierarchical":
        out = [(passes * (g - 1), n / g, None, 1)] if g > 1 else []
        return out + ([(passes * (nodes - 1), None, n / p, share)] if nodes > 1 else [])
    if algorithm == "in_network":  # NVLS: ld_reduce of every shard (n) + multicast store (n/g) per direction
        return [(1, n * (1 + 1 / g) if g > 1 else None, n / g if nodes > 1 else None, share)]
    if algorithm == "bulk":  # NCCL's all-to-all: every send and receive posted at once
        return [(1, (g - 1) * n / p if g > 1 else None, (nodes - 1) * n / nodes if nodes > 1 else None, share)]
    steps: dict[tuple, int] = {}
    for intra, inter, flows in _pairwise_flows(t):
        key = (n / p if intra else None, n / p if inter else None, flows)
        steps[key] = steps.get(key, 0) + 1
    return [(k, *key) for key, k in steps.items()]


def _latency(op: str, t: Topology, algorithm: str, rounds) -> float:
    """Latency of one call, without the call latency. Rings that span nodes of several GPUs: NCCL's model
    (links.py; NCCL 2.30.7 src/graph/tuning.cc): a chunk's chain of hops crosses the network only
    nInterSteps = passes (N-1) times; the other steps pay max(intra hop, the network's post overhead).
    in_network: NCCL's NVLS latency (25 us on NVLink, + 18 us across nodes; no base). Otherwise every
    step pays its slowest hop: intra latency, inter latency (one GPU per node: NCCL's exposed Tree NET value)."""
    a_i, e = t.intra.latency, t.inter
    if algorithm == "in_network":
        return nccl_latency("all_reduce", t.nodes, t.gpus_per_node, "nvls", "Simple")
    if algorithm in ("flat_ring", "multi_ring") and t.nodes > 1 and t.gpus_per_node > 1:
        passes = 1 if op != "all_reduce" else 2
        steps, inter = passes * (t.world_size - 1), passes * (t.nodes - 1)
        return (steps - inter) * max(a_i, e.post_overhead) + inter * e.hop_latency
    return sum(steps * max(a_i if x_i is not None else 0.0, e.latency if x_e is not None else 0.0)
               for steps, x_i, x_e, _ in rounds)


def breakdown(op: str, nbytes: float, topology: Topology, algorithm: str, gamma: float = 0.0) -> dict:
    """The model term by term, latency and bytes apart as in NCCL's model (time = latency + bytes / bandwidth):
    latency (_latency, plus the links' call latency c once; NVLS has none), and for each step of a round
    max(x_intra / B_intra, flows x x_flow / B_rail): the intra hop and the rail run at once, the slower one
    sets the pace.
    -> time_s, latency_s, intra_s / inter_s (the time during which that link set the pace), reduction_s,
    algbw_GBps, busbw_GBps (nccl-tests factors), bytes_per_rank {'intra', 'inter'}, bottleneck."""
    n = _check(op, nbytes, topology, algorithm)
    g_ = check.number("gamma", gamma, low=0, unit="seconds per byte", high=1.0)
    t = topology
    rounds = _rounds(op, n, t, algorithm) if t.world_size > 1 else []
    lat = _latency(op, t, algorithm, rounds) if rounds else 0.0
    bw_i = bw_e = 0.0
    for steps, x_i, x_e, flows in rounds:
        ti = x_i / t.intra.bandwidth if x_i is not None else -1.0
        te = flows * x_e / t.rail_bandwidth if x_e is not None else -1.0
        if te >= ti:  # the rail sets the pace of this round
            bw_e += steps * te
        else:
            bw_i += steps * ti
    p = t.world_size
    # once per call, as cost.breakdown does: NCCL's launch and set-up (0 for fitted or emulated links)
    if algorithm != "in_network":
        lat += max([t.intra.call_latency] * (t.gpus_per_node > 1) + [t.inter.call_latency] * (t.nodes > 1),
                   default=0.0)
    reduced = (p - 1) / p * n if op in ("all_reduce", "reduce_scatter") and algorithm != "in_network" else 0.0
    red = reduced * g_
    total = lat + bw_i + bw_e + red
    algbw = n / total / 1e9 if total > 0 else float("inf")
    terms = {"latency": lat, "intra link": bw_i, "NICs": bw_e, "reduction": red}
    return {"time_s": total, "latency_s": lat, "intra_s": bw_i, "inter_s": bw_e, "reduction_s": red,
            "algbw_GBps": algbw, "busbw_GBps": algbw * cost.bus_factor(op, p),
            "bytes_per_rank": bytes_per_rank(op, n, t, algorithm),
            "bottleneck": max(terms, key=terms.get) if total > 0 else "none"}


def collective_time(op: str, nbytes: float, topology: Topology, algorithm: str, gamma: float = 0.0) -> float:
    """Seconds for one collective on `topology` (see breakdown and the module docstring for the formulas)."""
    return breakdown(op, nbytes, topology, algorithm, gamma)["time_s"]


def best_algorithm(op: str, nbytes: float, topology: Topology, in_network: bool = False) -> tuple[str, float]:
    """-> (the fastest of the algorithms of `op`, its seconds). in_network (NVLS/SHARP) only if asked: it needs
    switches that reduce."""
    op = check.choice("op", op, tuple(PAIRS))
    times = {a: collective_time(op, nbytes, topology, a) for a in PAIRS[op] if in_network or a != "in_network"}
    best = min(times, key=times.get)
    return best, times[best]


def share_after(share_before: float, before_s: float, after_s: float) -> float:
    """Communication's share of a step once it takes after_s instead of before_s, the compute unchanged:
    compute = before_s (1 - s) / s, share = after_s / (compute + after_s)."""
    if isinstance(share_before, bool) or not isinstance(share_before, Real) or not 0 < share_before < 1:
        raise ValueError(f"share_before must be a number between 0 and 1 (exclusive), got {share_before!r}")
    before_s, after_s = (check.number(k, v, 0, strict=True, unit="seconds", high=MAX_BYTES)
                         for k, v in (("before_s", before_s), ("after_s", after_s)))
    compute = before_s * (1 - share_before) / share_before
    return after_s / (compute + after_s)


def bytes_per_rank(op: str, nbytes: float, topology: Topology, algorithm: str) -> dict:
    """Bytes the busiest rank sends over each kind of link, closed form (n divisible by p).

    all_reduce flat_ring: 2(p-1)/p n on one of the two (the last GPU of a node sends its all off-node);
    multi_ring: intra 2(p-1)/p n (g-1)/g, inter 2(p-1)/p n/g; hierarchical: intra 2(g-1)/g n, inter
    2(N-1)/N n/g; reduce_scatter / all_gather: half of those; all_to_all: intra (g-1)/p n, inter (N-1)/N n."""
    n = _check(op, nbytes, topology, algorithm)
    g, nodes, p = topology.gpus_per_node, topology.nodes, topology.world_size
    k = 2 if op == "all_reduce" else 1
    if op == "all_to_all":
        return {"intra": (g - 1) * n / p, "inter": (nodes - 1) * n / nodes}
    ring = k * (p - 1) / p * n
    nvls = n * (1 + 1 / g) if g > 1 else 0.0  # NVLS: every shard read by ld_reduce, plus its multicast store
    if nodes == 1:
        return {"intra": nvls if algorithm == "in_network" else ring, "inter": 0.0}
    if algorithm == "flat_ring":
        return {"intra": ring if g > 1 else 0.0, "inter": ring}
    if algorithm == "multi_ring":
        return {"intra": ring * (g - 1) / g, "inter": ring / g}
    if algorithm == "in_network":
        return {"intra": nvls, "inter": n / g}
    return {"intra": k * (g - 1) / g * n, "inter": k * (nodes - 1) / nodes * n / g}


def multi_ring_orders(nodes: int, gpus_per_node: int) -> list[list[int]]:
    """The g rings of multi_ring: ring c visits every node, entering at GPU c+1 and leaving from GPU c
    (so through NIC c mod k). Ring g-1 is the flat ring 0, 1, ..., p-1."""
    nodes, g = check.integer("nodes", nodes, 1, MAX_NODES), check.integer("gpus_per_node", gpus_per_node, 1)
    check.integer("nodes x gpus_per_node^2 (the rings' steps)", nodes * g * g, 1, MAX_STEPS)
    return [[m * g + (c + 1 + i) % g for m in range(nodes) for i in range(g)] for c in range(g)]


def bytes_by_rank(op: str, nbytes: float, topology: Topology, algorithm: str, itemsize: int = 1) -> list[dict]:
    """Exact bytes each rank sends intra- and inter-node, for the algorithms commlib.algorithms runs
    (all_reduce flat_ring / multi_ring / hierarchical, all_to_all pairwise), uneven shards included."""
    n = _check(op, nbytes, topology, algorithm)
    itemsize = check.integer("itemsize", itemsize, 1, 2**10)
    _steps(topology)
    g, nodes, p = topology.gpus_per_node, topology.nodes, topology.world_size
    numel = int(round(n / itemsize))
    out = [{"intra": 0.0, "inter": 0.0} for _ in range(p)]
    same_node = lambda a, b: a // g == b // g  # noqa: E731
    if (op, algorithm) == ("all_to_all", "pairwise"):
        if numel % p:
            raise ValueError(f"all_to_all needs numel divisible by the world size ({p}), got {numel}")
        block = numel // p * itemsize
        return [{"intra": (g - 1) * block, "inter": (p - g) * block} for _ in range(p)]
    if (op, algorithm) == ("all_reduce", "hierarchical"):
        shards = cost.shard_sizes(numel, g)
        for r in range(p):
            m, j = divmod(r, g)
            out[r]["intra"] = (cost.bytes_sent_by_rank("reduce_scatter", n, g, "ring", itemsize)[j]
                               + cost.bytes_sent_by_rank("all_gather", n, g, "ring", itemsize)[j])
            out[r]["inter"] = cost.bytes_sent_by_rank("all_reduce", shards[j] * itemsize, nodes, "ring", itemsize)[m]
        return out
    if op == "all_reduce" and algorithm in ("flat_ring", "multi_ring"):
        orders = [list(range(p))] if algorithm == "flat_ring" else multi_ring_orders(nodes, g)
        for order, part in zip(orders, cost.shard_sizes(numel, len(orders))):
            sent = cost.bytes_sent_by_rank("all_reduce", part * itemsize, p, "ring", itemsize)
            for q, r in enumerate(order):
                out[r]["intra" if same_node(r, order[(q + 1) % p]) else "inter"] += sent[q]
        return out
    raise ValueError(f"bytes_by_rank covers what commlib.algorithms runs: all_reduce flat_ring / multi_ring / "
                     f"hierarchical and all_to_all pairwise, not {op} {algorithm}")


# ------------------------------------------------------------------- model vs published results
PUBLISHED = [
    Published("dgx_a100", "all_reduce", "flat_ring", (230.0, 232.5), nodes=1, kind="calibration", source=
              "~230 GB/s (S. Jeaugey, NVIDIA, nccl-tests#149); 232.54 GB/s measured (nccl-tests#175, 2023-10-29)"),
    Published("dgx_h100", "all_reduce", "flat_ring", (370.0, 370.0), nodes=1, kind="calibration", source=
              "370 GB/s with NCCL_ALGO=RING (S. Jeaugey, NVIDIA, nccl-tests#212, 2024-05-06)"),
    Published("dgx_a100", "all_reduce", "multi_ring", (192.0, 192.0), nodes=2, kind="measured", source=
              "'DGX-A100 ... 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW' with NCCL_ALGO=RING "
              "(D. Addison, NVIDIA, github.com/NVIDIA/nccl/issues/812, 2023-03-31)"),
    Published("dgx_h100", "all_reduce", "multi_ring", (365.8, 380.0), nodes=4, kind="measured", source=
              "365.84 GB/s on 4 nodes x 8 H100 with 8x 400G NICs each, measured on VMs "
              "(NCCL_TOPO_FILE=vm_topo_mod.xml); 'NCCL_MIN_CTAS=24 may get you above 380 GB/s', peak 400 "
              "(K. Iskra, NVIDIA) (github.com/NVIDIA/nccl-tests/issues/309, 2025-06)"),
    Published("dgx_h100", "all_reduce", "in_network", (476.0, 480.0), nodes=1, kind="bound", source=
              "NVLS: 'peak busBw of ~480GB/s (algbw ~275GB/s)' (S. Jeaugey, nccl-tests#212); 476 GB/s "
              "'in the expected range for H100' (D. Addison, nccl-tests#290)"),
    Published("dgx_h100", "all_to_all", "bulk", (96.0, 98.0), nodes=2, kind="expected", source=
              "'On 2 nodes ... BusBW = 2x network bandwidth per GPU' (S. Jeaugey, nccl-tests#130) x 48-49 GB/s "
              "per NDR NIC (nccl-tests#267); 2x ignores busbw's (p-1)/p = 15/16"),
    Published("dgx_h100", "all_to_all", "bulk", (54.9, 56.0), nodes=8, kind="expected", source=
              "'general formula is N/(N-1)x the bandwidth per GPU' (S. Jeaugey, nccl-tests#130) at N = 8, "
              "x 48-49 GB/s per NDR NIC (nccl-tests#267): 'Alltoall cannot aggregate the bandwidth of multiple NICs'"),
]


def model_vs_published(nbytes: float = 8 * 2**30) -> list[dict]:
    """Each PUBLISHED figure beside the model's busbw at nbytes (nccl-tests' largest default size), priced
    with achievable links and with line rates."""
    rows = []
    for pub in PUBLISHED:
        model = breakdown(pub.op, nbytes, preset(pub.system, pub.nodes, achievable=True), pub.algorithm)
        line = breakdown(pub.op, nbytes, preset(pub.system, pub.nodes), pub.algorithm)
        rows.append({"system": pub.system, "nodes": pub.nodes, "op": pub.op, "algorithm": pub.algorithm,
                     "published_GBps": pub.busbw_GBps, "model_GBps": model["busbw_GBps"],
                     "line_rate_GBps": line["busbw_GBps"], "kind": pub.kind, "source": pub.source,
                     "model/published": model["busbw_GBps"] / (sum(pub.busbw_GBps) / 2)})
    return rows
