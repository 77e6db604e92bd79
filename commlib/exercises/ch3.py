"""Checkers for chapter 3 (topology): each returns a Verdict and never raises, whatever the answer.

Defaults are the notebook's questions; the right answer always comes from commlib.topology.
"""

from __future__ import annotations

import math

from commlib import _validate as check
from commlib import cost
from commlib import topology as topo
from commlib.exercises.answers import Verdict, _choice, _number, close


def _node(nodes, gpus, intra, inter, nics) -> topo.Topology:
    return topo.Topology(nodes, gpus, intra, inter, nics)


# ------------------------------------------------------------------------------------ 3.1
def ch3_multi_ring_busbw(answer, nodes: int = 2, gpus_per_node: int = 8, nics_per_node: int = 4,
                         intra="nvlink4", inter="ib_ndr") -> Verdict:
    """The bound on NCCL's multi-ring all-reduce busbw at large sizes, GB/s: min(k B_nic, g/(g-1) B_intra)."""
    value, bad = _number(answer, "the busbw in GB/s")
    if bad is not None:
        return bad
    t = _node(nodes, gpus_per_node, intra, inter, nics_per_node)
    g, k, p = t.gpus_per_node, t.nics_per_node, t.world_size
    nic, link = t.inter.bandwidth / 1e9, t.intra.bandwidth / 1e9
    nvlink = g / (g - 1) * link if g > 1 else math.inf
    want = min(k * nic, nvlink)
    factor = 2 * (p - 1) / p
    if close(value, want):
        return Verdict(True, f"min({k} NICs x {nic:g} GB/s, {g}/{g - 1} x {link:g} GB/s) = {want:g} GB/s: the "
                             f"{'NICs' if k * nic <= nvlink else 'NVLink'} set the bound, however many nodes.")
    if close(value, nic):
        return Verdict(False, "that is one NIC: the flat ring's bound, one ring leaving each node through one NIC. "
                              "NCCL's rings (channels) leave the node through different NICs.")
    if k != g and close(value, g * nic):
        return Verdict(False, f"count the NICs, not the GPUs: this node has {k} NICs for {g} GPUs, so rings "
                              "share them.")
    if close(value, link, nvlink):
        return Verdict(False, "that is the NVLink bound; compare it with what the node's NICs can carry together. "
                              "The smaller one is the limit.")
    if close(value, want / factor, want * factor):
        return Verdict(False, f"busbw is the rate of the busiest link; algbw = busbw / (2(p-1)/p) is what you get "
                              f"from n/t. Give busbw, without applying the {factor:g} factor.")
    if close(value, want * 8, want * 1e9):
        return Verdict(False, "give GB/s (1e9 bytes per second), not bits or bytes per second.")
    return Verdict(False, "the node's off-node traffic spreads over its k NICs (k x one NIC), and each GPU's "
                          "NVLink carries (g-1)/g of its rings' bytes (g/(g-1) x the link): take the smaller.")


# ------------------------------------------------------------------------------------ 3.2
def ch3_all_to_all_time(answer, nodes: int = 4, gpus_per_node: int = 8, nics_per_node: int = 8,
                        intra="nvlink4", inter="ib_ndr", nbytes: float = 1e9) -> Verdict:
    """Seconds for an all-to-all of nbytes per GPU at the NICs' speed, latency ignored (NCCL's bulk exchange):
    each GPU sends (N-1)/N n off its node through its own NIC: (N-1)/N n / (k/g B_nic)."""
    value, bad = _number(answer, "the time in seconds")
    if bad is not None:
        return bad
    t = _node(nodes, gpus_per_node, intra, inter, nics_per_node)
    zero = lambda link: cost.Link(link.name, link.bandwidth, 0.0, "")  # noqa: E731
    want = topo.collective_time("all_to_all", nbytes, _node(nodes, gpus_per_node, zero(t.intra), zero(t.inter),
                                                            nics_per_node), "bulk")
    n, nn, p, bw = nbytes, t.nodes, t.world_size, t.inter.bandwidth
    off = (nn - 1) / nn * n
    if close(value, want):
        return Verdict(True, f"each GPU sends (N-1)/N n = {off / 1e6:g} MB to other nodes, all through its own NIC: "
                             f"{want * 1e3:.4g} ms, however many NICs the node has.")
    if close(value, off / (t.nics_per_node * bw)):
        return Verdict(False, "all-to-all cannot add up a node's NICs: every GPU's traffic to other nodes leaves "
                              "through its own NIC, and the other NICs are busy with their own GPUs' traffic.")
    if close(value, (p - 1) / p * n / bw, n / bw):
        return Verdict(False, "only the bytes for GPUs on other nodes cross the NIC: (N-1)/N of n. The rest go "
                              "over NVLink, at the same time.")
    if close(value, 2 * off / bw):
        return Verdict(False, "all-to-all sends each byte once (no reduce and gather phases as in all-reduce).")
    if close(value, want * 1e3):
        return Verdict(False, "give seconds, not milliseconds.")
    return Verdict(False, "count the bytes one GPU sends off its node, (N-1)/N n, and divide by its own NIC's "
                          "bandwidth.")


# ------------------------------------------------------------------------------------ 3.3
def ch3_hierarchical_inter_bytes(answer, nodes: int = 4, gpus_per_node: int = 8, nbytes: float = 1e9) -> Verdict:
    """Bytes one GPU sends to other nodes in a hierarchical all-reduce of nbytes whose middle phase is a ring
    across the nodes (GPU i with GPU i of every node): 2(N-1)/N x n/g."""
    value, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    t = _node(nodes, gpus_per_node, "nvlink4", "ib_ndr", gpus_per_node)
    want = topo.bytes_per_rank("all_reduce", nbytes, t, "hierarchical")["inter"]
    nn, g, p, n = t.nodes, t.gpus_per_node, t.world_size, nbytes
    if close(value, want):
        return Verdict(True, f"after the reduce-scatter in the node each GPU holds a shard of n/g = "
                             f"{n / g / 1e6:g} MB, and all-reduces it in a ring across {nn} nodes: 2(N-1)/N x n/g = "
                             f"{want / 1e6:g} MB.")
    if close(value, 2 * (nn - 1) / nn * n):
        return Verdict(False, "across nodes each GPU all-reduces only its shard, n/g, not the whole tensor.")
    if close(value, (nn - 1) / nn * n / g):
        return Verdict(False, "that is one phase: the shard is all-reduced across nodes, a reduce-scatter and an "
                              "all-gather, (N-1)/N x n/g each.")
    if close(value, 2 * (p - 1) / p * n):
        return Verdict(False, "that is every byte of a flat ring. Hierarchical sends most of them over NVLink.")
    if close(value, 2 * (p - 1) / p * n / g):
        return Verdict(False, "that is the multi-ring's off-node bytes per GPU; hierarchical's ring across nodes has "
                              "N members, not p.")
    if close(value, 2 * (g - 1) / g * n):
        return Verdict(False, "that is what each GPU sends inside its node (reduce-scatter + all-gather there).")
    return Verdict(False, "follow the three phases: reduce-scatter in the node leaves a shard of n/g; the shard is "
                          "all-reduced across the N nodes (a ring of N); then all-gather in the node.")


# ------------------------------------------------------------------------------------ 3.4
_ALL_REDUCES = ("flat_ring", "multi_ring", "hierarchical")


def ch3_best_all_reduce(answer, nodes: int = 2, gpus_per_node: int = 8, nics_per_node: int = 1,
                        intra="nvlink3", inter="ib_hdr", nbytes: float = 1e9) -> Verdict:
    """The fastest of flat_ring, multi_ring, hierarchical for this cluster and size (commlib.topology's model)."""
    answer, bad = _choice(answer, list(_ALL_REDUCES))
    if bad is not None:
        return bad
    t = _node(nodes, gpus_per_node, intra, inter, nics_per_node)
    times = {a: topo.collective_time("all_reduce", nbytes, t, a) for a in _ALL_REDUCES}
    best = min(times, key=times.get)
    listing = ", ".join(f"{a} {s * 1e3:.1f} ms" for a, s in times.items())
    if times[answer] <= times[best] * 1.0001:
        return Verdict(True, f"{listing}.")
    if answer == "flat_ring":
        hint = "one ring leaves each node through one NIC, carrying 2(p-1)/p n across it."
    elif answer == "multi_ring" and t.nics_per_node == 1:
        hint = ("with one NIC per node, the g rings all leave through it: the node still sends 2(p-1)/p n through "
                "one NIC. Which algorithm sends fewer bytes across the network?")
    elif answer == "hierarchical":
        hint = ("hierarchical runs its NVLink phases and its network phase one after another; the rings keep both "
                "links busy at once, and with enough NICs that wins.")
    else:
        hint = "compare the bytes each algorithm puts on the NICs and on NVLink."
    return Verdict(False, f"{hint} {listing}.")


# ------------------------------------------------------------------------------------ 3.5
def ch3_share_after_move(answer, share_before: float = 0.6, preset: str = "dgx_a100", nodes: int = 2,
                         nbytes: float = 4e9) -> Verdict:
    """A data-parallel run on `nodes` of `preset` spends share_before of its step in the gradient all-reduce;
    its share on one node (same GPUs' compute, NCCL's achievable speeds, best algorithm each), as a fraction."""
    preset = check.choice("preset", preset, tuple(topo.PRESETS))
    value, bad = _number(answer, "the share")
    if bad is not None:
        return bad
    before = topo.best_algorithm("all_reduce", nbytes, topo.preset(preset, nodes, achievable=True))[1]
    after = topo.best_algorithm("all_reduce", nbytes, topo.preset(preset, 1, achievable=True))[1]
    want = topo.share_after(share_before, before, after)
    if close(value, want):
        return Verdict(True, f"the all-reduce goes from {before * 1e3:.1f} to {after * 1e3:.1f} ms, only "
                             f"{before / after:.2f}x faster: the share drops from {share_before:.0%} to {want:.0%}, "
                             "nowhere near 15%. With 8 NICs per node the network was never the bottleneck.")
    if close(value, want * 100) and value > 1:
        return Verdict(False, "give a fraction between 0 and 1, not a percentage.")
    if close(value, 0.15, 0.1):
        return Verdict(False, f"that is the seed's figure. Price both all-reduces: {nodes} nodes with their "
                              f"8 NICs each, and one node.")
    one_nic = topo.best_algorithm("all_reduce", nbytes, topo.Topology(
        nodes, 8, topo.ACHIEVABLE[topo.PRESETS[preset][0]], topo.ACHIEVABLE[topo.PRESETS[preset][1]], 1))[1]
    if close(value, topo.share_after(share_before, one_nic, after)):
        return Verdict(False, "that prices the nodes with one NIC each; this node type has 8.")
    if close(value, after / before * share_before):
        return Verdict(False, "the compute stays the same, not the total: compute = before x (1 - s) / s, then "
                              "share = after / (compute + after).")
    return Verdict(False, "price the all-reduce both ways (topology.best_algorithm), keep the compute fixed at "
                          "before x (1 - s) / s, and take after / (compute + after).")
