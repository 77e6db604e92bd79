"""Links and their numbers, each with its source: line rates per direction, latencies, and published
measurements to compare the cost model with.

A Link is what the alpha-beta model needs: bandwidth in bytes/s *per direction*, `latency` (alpha) in
seconds per message (one hop of an algorithm), and `call_latency`, a fixed cost paid once per
collective call (launching the operation; for NCCL, its kernel and protocol set-up).

The latencies of the GPU links are the constants of NCCL's own tuning model (NCCL 2.30.7,
src/graph/tuning.cc, `ncclTunerConstantsDefaults`), for its LL protocol, the one NCCL picks for
small messages, where latency matters: a base latency per call of 6.6 us (Ring, LL), and per hop
0.6 us on NVLink, 1.0 us on PCIe, 5.0 us through the network with one GPU per node (NCCL then uses
its Tree network latency, "latencies are fully exposed"). Large messages use the Simple protocol,
whose per-hop latencies are larger (3.4 us NVLink, 14 us network) but no longer matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlib import _validate as check

_TUNING = "NCCL 2.30.7 src/graph/tuning.cc (LL protocol, Ring)"


@dataclass(frozen=True)
class Link:
    """A link: bandwidth in bytes/s per direction, latency (alpha) in s per message, call_latency in s per
    collective call, and where the numbers come from."""

    name: str
    bandwidth: float
    latency: float
    source: str = ""
    call_latency: float = 0.0

    def __post_init__(self):
        for field in ("name", "source"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"Link {field} must be a str, got {type(getattr(self, field)).__name__}")
        check.number("Link bandwidth", self.bandwidth, low=0, strict=True, unit="bytes/s")
        check.number("Link latency", self.latency, low=0, unit="seconds")
        check.number("Link call_latency", self.call_latency, low=0, unit="seconds")

    @property
    def beta(self) -> float:
        """Seconds per byte."""
        return 1.0 / self.bandwidth


def _nvlink(name, gpu, total_gbps):
    per_dir = total_gbps / 2
    return Link(name, per_dir * 1e9, 0.6e-6,
                f"NVIDIA {gpu}: {total_gbps:g} GB/s total = {per_dir:g} GB/s per direction; "
                f"latency 0.6 us per hop and 6.6 us per call: {_TUNING}, NVLink", 6.6e-6)


def _net(name, what, gbit, latency, note):
    return Link(name, gbit / 8 * 1e9, latency, f"{what}: {gbit:g} Gb/s = {gbit / 8:g} GB/s per direction; {note}", 6.6e-6)


_NET_LAT = (f"latency 5.0 us per hop (NCCL's network latency with one GPU per node) and 6.6 us per call: "
            f"{_TUNING}, NET")
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
        _net("tcp100", "100 Gb Ethernet, TCP sockets", 100, 25e-6, _TCP_LAT),
        _net("tcp400", "400 Gb Ethernet, TCP sockets", 400, 25e-6, _TCP_LAT),
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
