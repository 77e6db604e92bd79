"""Links and their numbers, each with its source: line rates per direction, latencies, and published
measurements to compare the cost model with.

A Link is what the alpha-beta model needs: bandwidth in bytes/s *per direction*, `latency` (alpha) in
seconds per message (one hop of an algorithm), and `call_latency`, a fixed cost paid once per
collective call (launching the operation; for NCCL, its kernel and protocol set-up). Two more fields
serve rings that span nodes (commlib.topology): `ring_latency`, a network hop's latency when the
nodes have several GPUs each, and `post_overhead`, what every other step of such a ring pays.

The latencies of the GPU links are the constants of NCCL's tuning model (NCCL 2.30.7,
src/graph/tuning.cc, `ncclTunerConstantsDefaults` and the latency loop of ncclTopoTuneModel), for
its LL protocol, the one NCCL picks for small messages, where latency matters. For a Ring collective
of nsteps steps (all-reduce 2(p-1), reduce-scatter and all-gather p-1) over nNodes nodes it charges

    base 6.6 us  +  (nsteps - nInterSteps) x max(intra hop, net overhead)  +  nInterSteps x interLat
    nInterSteps = 2(nNodes-1) for all-reduce, nNodes-1 for reduce-scatter / all-gather (0 on one node)
    intra hop 0.6 us NVLink, 1.0 us PCIe; net overhead 1.0 us (2.0 on AMD CPUs) once nNodes > 1;
    interLat = Ring NET latency 2.7 us + the NIC's own latency (0 for InfiniBand: net_ib reports none);
    with ONE GPU per node "latencies are fully exposed": interLat = Tree NET latency 5.0 us, every step.

So a 1 KiB all-reduce on 2 x 8 H100 costs 6.6 + 28 x 1.0 + 2 x 2.7 = 40.0 us in NCCL's model, not 2(p-1)
network latencies. nccl_latency() evaluates the same formula for each protocol: Simple's latencies are
larger (NVLink 3.4, NET 14 us) but only large messages use it, where the bytes dominate.

A Link pairs LL's latencies with the line rate, and no protocol has both: LL moves 4 bytes of data in every 8
(the model gives it half the bandwidth), Simple has the line rate and its own, larger latencies. nccl_ring_model()
prices a Ring with each protocol's own pair, as NCCL's model does. nccl_slices(): the Simple protocol's buffer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commlib import _validate as check

_TUNING = "NCCL 2.30.7 src/graph/tuning.cc (LL protocol, Ring)"

# NCCL 2.30.7 src/graph/tuning.cc, ncclTunerConstantsDefaults, in us, per protocol (LL, LL128, Simple)
PROTOCOLS = ("LL", "LL128", "Simple")
NCCL_BASE_LATENCY = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0),
                     "nvls_tree": (0.0, 0.0, 0.0)}
NCCL_HW_LATENCY = {  # hwLatencies[hardware][algorithm]
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0),
               "nvls_tree": (0.0, 0.0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
            "nvls_tree": (0.0, 0.0, 20.9)},
}
NET_OVERHEAD = 1.0  # us, getNetOverhead(): 1.0 on Intel and other CPUs, 2.0 on AMD; x3 for Simple
# ncclTunerConstantsDefaults, GB/s: llMaxBws, LL's bandwidth cap, by GPU on one node and by CPU across 2 or 3+ nodes;
# perChMaxRingLL128Bws, LL128's cap per channel of a Ring (the same for 1, 2 and 3+ nodes)
NCCL_LL_MAX_BW = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0,
                  ("intel", 2): 39.0, ("intel", 3): 20.4, ("amd", 2): 22.5, ("amd", 3): 19.0}
NCCL_LL128_RING_MAX_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0}

# The Simple protocol's FIFO (NCCL 2.30.7): NCCL_BUFFSIZE bytes per peer and channel (DEFAULT_BUFFSIZE, src/init.cc),
# cut into NCCL_STEPS steps (src/include/device.h). A Ring collective moves a slice of *_SLICESTEPS steps at a time
# (src/include/collectives.h) and posts its step counter once per slice (postPeer: step += StepPerSlice, in
# src/device/prims_simple.h).
NCCL_BUFFSIZE = 1 << 22
NCCL_STEPS = 8
NCCL_SLICE_STEPS = {"all_reduce": NCCL_STEPS // 4, "all_gather": NCCL_STEPS // 4, "reduce_scatter": NCCL_STEPS // 4,
                    "broadcast": 1, "reduce": 1, "all_to_all": 1}


def nccl_slices(op: str, buffsize: int = NCCL_BUFFSIZE) -> tuple[int, int]:
    """-> (slices the buffer holds, bytes per slice) for a Ring collective with the Simple protocol: the buffer's
    NCCL_STEPS steps, NCCL_SLICE_STEPS[op] to a slice (all_reduce: 8 steps of 512 KiB, 4 slices of 1 MiB)."""
    steps = NCCL_SLICE_STEPS[check.choice("op", op, NCCL_SLICE_STEPS)]
    return NCCL_STEPS // steps, check.integer("buffsize", buffsize, NCCL_STEPS) // NCCL_STEPS * steps


def nccl_latency(op: str, nodes: int, gpus_per_node: int, algorithm: str = "ring", protocol: str = "LL",
                 intra: str = "nvlink", net_overhead: float = NET_OVERHEAD, latency_inter: float = 0.0) -> float:
    """Seconds of latency NCCL's tuning model charges one collective (NCCL 2.30.7 src/graph/tuning.cc):
    ring for all_reduce / reduce_scatter / all_gather; tree, nvls and nvls_tree for all_reduce (Simple only: nvls
    25 us on NVLink + 18 us across nodes; nvls_tree 25 + 2 log2(nodes) x 20.9 us). latency_inter: the NIC's own
    latency in us (0 for InfiniBand)."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather"):
        raise ValueError(f"op must be one of ('all_reduce', 'reduce_scatter', 'all_gather'), got {op!r}")
    if algorithm not in NCCL_BASE_LATENCY or (algorithm != "ring" and op != "all_reduce"):
        raise ValueError(f"algorithm must be 'ring' (any op), 'tree', 'nvls' or 'nvls_tree' (all_reduce), "
                         f"got {algorithm!r}")
    if protocol not in PROTOCOLS or (algorithm.startswith("nvls") and protocol != "Simple"):
        raise ValueError(f"protocol must be one of {PROTOCOLS} ('Simple' for nvls and nvls_tree), got {protocol!r}")
    if intra not in ("nvlink", "pci"):
        raise ValueError(f"intra must be 'nvlink' or 'pci', got {intra!r}")
    n, g = check.integer("nodes", nodes), check.integer("gpus_per_node", gpus_per_node)
    i, ranks = PROTOCOLS.index(protocol), n * g
    hw = NCCL_HW_LATENCY
    intra_lat = hw[intra][algorithm][i]
    inter_lat = (hw["net"]["tree"][i] if g == 1 else hw["net"][algorithm][i]) + latency_inter
    if protocol == "Simple":
        inter_lat += latency_inter  # "the flush extra latency"
    if algorithm == "nvls":
        return 1e-6 * (intra_lat + (inter_lat if n > 1 else 0.0))
    if algorithm == "nvls_tree":  # NVLS inside each node, a tree of log2(nodes) levels up and down between them
        return 1e-6 * (intra_lat + 2 * int(math.log2(n)) * inter_lat)
    lat = NCCL_BASE_LATENCY[algorithm][i]
    if algorithm == "tree":  # 2 x (chain inside the node + log2(nodes) tree levels)
        return 1e-6 * (lat + 2 * ((g - 1) * intra_lat + int(math.log2(n)) * inter_lat))
    nsteps = 2 * (ranks - 1) if op == "all_reduce" else ranks - 1
    if n > 1:  # "inter-node rings still have to launch nsteps * net overhead"
        intra_lat = max(intra_lat, net_overhead * (3 if protocol == "Simple" else 1))
    inter_steps = 0 if n == 1 else 2 * (n - 1) if op == "all_reduce" else n - 1
    return 1e-6 * (lat + (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat)


def nccl_candidates(nodes: int, gpus_per_node: int, nvls: bool = True, collnet: bool = False) -> list[tuple[str, str]]:
    """(algorithm, protocol) pairs NCCL 2.30.7 enables for all_reduce (src/graph/tuning.cc, ncclTopoTuneModel):
    NVLS and NVLSTree run Simple only; NVLSTree is off on one node, NVLS off across nodes without CollNet
    (IB SHARP). nvls: the GPUs have NVLink SHARP (H100 and later on NVSwitch)."""
    pairs = [(a, p) for a in ("ring", "tree") for p in PROTOCOLS]
    if nvls and (nodes == 1 or collnet):
        pairs.append(("nvls", "Simple"))
    if nvls and nodes > 1:
        pairs.append(("nvls_tree", "Simple"))
    return pairs


def nccl_choice(nodes: int, gpus_per_node: int, nvls: bool = True, collnet: bool = False) -> tuple[str, str, float]:
    """-> (algorithm, protocol, seconds): the all_reduce NCCL's model picks for a small message, the enabled pair of
    lowest latency (ncclTopoGetAlgoTime: time = latency + bytes / bandwidth; at ~1 KiB the bytes add < 0.1 us)."""
    return min(((a, p, nccl_latency("all_reduce", nodes, gpus_per_node, a, p))
                for a, p in nccl_candidates(nodes, gpus_per_node, nvls, collnet)), key=lambda c: c[2])


def nccl_ring_model(op: str, nbytes: float, nodes: int, gpus_per_node: int, bandwidth: float, protocol: str = "LL",
                    gpu: str = "ampere", cpu: str = "intel", channels: int = 2, **latency) -> tuple[float, float]:
    """-> (latency s, algbw bytes/s) NCCL's tuning model gives one Ring collective of nbytes (NCCL 2.30.7
    src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime): the latency of nccl_latency(...), x1.4 (x1.9
    before Ampere) for Simple on an all_reduce across nodes (the ring's "plateau effect"); algbw = busbw x ranks /
    nsteps, busbw from bandwidth (bytes/s of the ring graph, its channels x their bandwidth: about the bottleneck
    link's line rate): LL half of it, capped by llMaxBws; LL128 0.92 of it, capped per channel; Simple all of it.
    latency: nccl_latency's keyword options."""
    ranks = check.integer("nodes", nodes, 1) * check.integer("gpus_per_node", gpus_per_node, 1)
    if ranks < 2:
        raise ValueError(f"a ring needs at least 2 ranks, got nodes={nodes} x gpus_per_node={gpus_per_node}")
    gpu, cpu = check.choice("gpu", gpu, NCCL_LL128_RING_MAX_BW), check.choice("cpu", cpu, ("intel", "amd"))
    channels, nbytes = check.integer("channels", channels, 1), check.number("nbytes", nbytes, 0, unit="bytes")
    lat = nccl_latency(op, nodes, gpus_per_node, "ring", protocol, **latency)
    bus = check.number("bandwidth", bandwidth, 0, strict=True, unit="bytes/s") / 1e9  # GB/s, as tuning.cc
    if protocol == "LL":
        bus = min(NCCL_LL_MAX_BW[gpu if nodes == 1 else (cpu, min(nodes, 3))], bus * 0.5)
    elif protocol == "LL128":
        bus = min(bus * 0.92, channels * NCCL_LL128_RING_MAX_BW[gpu])
    elif op == "all_reduce" and nodes > 1 and nbytes / (channels * ranks) >= 64:
        lat *= 1.9 if gpu == "volta" else 1.4
    nsteps = 2 * (ranks - 1) if op == "all_reduce" else ranks - 1
    return lat, bus * 1e9 * ranks / nsteps


def nccl_ring_time(op: str, nbytes: float, nodes: int, gpus_per_node: int, bandwidth: float, protocol: str = "LL",
                   **options) -> float:
    """Seconds NCCL's tuning model gives one Ring collective: latency + nbytes / algbw (nccl_ring_model)."""
    latency, algbw = nccl_ring_model(op, nbytes, nodes, gpus_per_node, bandwidth, protocol, **options)
    return latency + nbytes / algbw


@dataclass(frozen=True)
class Link:
    """A link: bandwidth in bytes/s per direction, latency (alpha) in s per message, call_latency in s per
    collective call, and where the numbers come from."""

    name: str
    bandwidth: float
    latency: float
    source: str = ""
    call_latency: float = 0.0
    ring_latency: float | None = None   # a network hop of a ring whose nodes have several GPUs (None: latency)
    post_overhead: float = 0.0          # paid by every other step of a ring that crosses this link


    def __post_init__(self):
        for field in ("name", "source"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"Link {field} must be a str, got {type(getattr(self, field)).__name__}")
        check.number("Link bandwidth", self.bandwidth, low=0, strict=True, unit="bytes/s")
        check.number("Link latency", self.latency, low=0, unit="seconds")
        check.number("Link call_latency", self.call_latency, low=0, unit="seconds")
        if self.ring_latency is not None:
            check.number("Link ring_latency", self.ring_latency, low=0, unit="seconds")
        check.number("Link post_overhead", self.post_overhead, low=0, unit="seconds")

    @property
    def hop_latency(self) -> float:
        """Latency of a network hop in a ring whose nodes hold several GPUs: ring_latency, else latency."""
        return self.latency if self.ring_latency is None else self.ring_latency

    @property
    def beta(self) -> float:
        """Seconds per byte."""
        return 1.0 / self.bandwidth

    @property
    def label(self) -> str:
        """Its short name and bandwidth per direction, for people: 'NVLink4 370 GB/s' (NCCL's achievable nvlink4)."""
        return f"{LINK_NAMES.get(self.name.removesuffix('_nccl'), self.name)} {self.bandwidth / 1e9:.3g} GB/s"


# short names of the LINKS presets (and of topology.ACHIEVABLE's, which add "_nccl") for captions
LINK_NAMES = {"nvlink3": "NVLink3", "nvlink4": "NVLink4", "nvlink5": "NVLink5", "pcie4_x16": "PCIe4 x16",
              "pcie5_x16": "PCIe5 x16", "ib_hdr": "HDR", "ib_ndr": "NDR", "ib_xdr": "XDR", "roce100": "RoCE 100G",
              "roce400": "RoCE 400G", "tcp100": "TCP 100G", "tcp400": "TCP 400G"}


def _nvlink(name, gpu, total_gbps):
    per_dir = total_gbps / 2
    return Link(name, per_dir * 1e9, 0.6e-6,
                f"NVIDIA {gpu}: {total_gbps:g} GB/s total = {per_dir:g} GB/s per direction; "
                f"latency 0.6 us per hop and 6.6 us per call: {_TUNING}, NVLink", 6.6e-6)


def _net(name, what, gbit, latency, note, ring=2.7e-6, overhead=1e-6):
    return Link(name, gbit / 8 * 1e9, latency, f"{what}: {gbit:g} Gb/s = {gbit / 8:g} GB/s per direction; {note}",
                6.6e-6, ring, overhead)


_NET_LAT = (f"latency 5.0 us per hop with one GPU per node (NCCL's Tree NET latency, 'fully exposed'), "
            f"2.7 us per network hop of a ring of multi-GPU nodes (Ring NET) + 1.0 us net overhead on its "
            f"other steps, 6.6 us per call: {_TUNING}")
_TCP_LAT = ("latency: order of magnitude of one message through kernel TCP sockets (Gloo, or NCCL's socket "
            "transport), tens of us; chapter 2 measures it on your own machine's loopback")
LINKS: dict[str, Link] = {
    link.name: link for link in [
        _nvlink("nvlink3", "A100 SXM, NVLink3", 600),
        _nvlink("nvlink4", "H100 SXM, NVLink4", 900),
        _nvlink("nvlink5", "B200, NVLink5", 1800),
        Link("pcie4_x16", 31.5e9, 1.0e-6, "PCIe Gen4 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s per direction; "
             f"latency 1.0 us per hop and 6.6 us per call: {_TUNING}, PCI", 6.6e-6),
        Link("pcie5_x16", 63e9, 1.0e-6, "PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 = 63 GB/s per direction; "
             f"latency 1.0 us per hop and 6.6 us per call: {_TUNING}, PCI", 6.6e-6),
        _net("ib_hdr", "InfiniBand HDR", 200, 5e-6, _NET_LAT),
        _net("ib_ndr", "InfiniBand NDR", 400, 5e-6, _NET_LAT),
        _net("ib_xdr", "InfiniBand XDR", 800, 5e-6, _NET_LAT),
        _net("roce100", "100 Gb Ethernet with RoCE (RDMA)", 100, 5e-6, _NET_LAT + " (RDMA: like InfiniBand)"),
        _net("roce400", "400 Gb Ethernet with RoCE (RDMA)", 400, 5e-6, _NET_LAT + " (RDMA: like InfiniBand)"),
        _net("tcp100", "100 Gb Ethernet, TCP sockets", 100, 25e-6, _TCP_LAT, None, 0.0),
        _net("tcp400", "400 Gb Ethernet, TCP sockets", 400, 25e-6, _TCP_LAT, None, 0.0),
    ]
}


@dataclass(frozen=True)
class Published:
    """A published nccl-tests busbw (GB/s, low-high where the source gives a range), what ran, where, and who said it.

    One link (commlib.cost.PUBLISHED): `link` names the LINKS preset of the bottleneck link. Nodes of a preset
    (commlib.topology.PUBLISHED): `system` is the preset, `nodes` how many, `algorithm` the model's algorithm for
    what NCCL ran, `kind` 'calibration' (an ACHIEVABLE link was set from it), 'measured' (predicted, not
    fitted), 'expected' (NVIDIA engineers' stated figure or formula), 'bound' (the model is an upper bound)."""

    system: str
    op: str
    algorithm: str
    busbw_GBps: tuple[float, float]
    source: str
    nodes: int = 1
    link: str | None = None
    kind: str = "measured"

    @property
    def busbw(self) -> float:
        """bytes/s, nccl-tests' definition (the middle of the range)."""
        return sum(self.busbw_GBps) / 2 * 1e9


PUBLISHED: list[Published] = [
    Published("8x A100 SXM (NVLink3, one node)", "all_reduce", "ring", (230.0, 230.0), link="nvlink3", source=
              "S. Jeaugey (NCCL), NVIDIA/nccl-tests issue #149, 2023-07-05: 12 NVLinks x ~20 GB/s effective = "
              "240 GB/s, ~230 GB/s reached"),
    Published("8x H100 SXM (NVLink4, one node)", "all_reduce", "ring", (370.0, 370.0), link="nvlink4", source=
              "S. Jeaugey (NCCL), NVIDIA/nccl-tests issue #212, 2024-05-06: 450 GB/s line rate, ~20% protocol "
              "overhead, ~370 GB/s busbw with NCCL_ALGO=RING"),
    Published("8x H100 SXM (NVLink4, one node)", "all_reduce", "nvls", (480.0, 480.0), link="nvlink4", source=
              "S. Jeaugey (NCCL), NVIDIA/nccl-tests issue #212, 2024-05-06: NVLink SHARP, peak busbw ~480 GB/s "
              "(algbw ~275 GB/s); with NVLS busbw is not the bandwidth on the wire"),
]
