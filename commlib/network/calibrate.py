"""The emulated NIC as the course fits a link: t = alpha + n * beta (cost.fit_alpha_beta) from a measured
point-to-point sweep between two nodes, beside the configured rate.

    cal = calibrate(cluster)      # cluster = Cluster(world_size, network=net); also stored as net.calibration
    cal["payload_bandwidth"]      # 1 / beta, bytes/s of payload
    cal["alpha_s"]                # Gloo over TCP's software latency per message (the kernel adds none)

On the kernel network the ranks' messages cross veth pairs and bridges, shaped by HTB at the configured rate in
bytes as the qdisc layer counts them. A veth hands over GSO packets of up to 64 KiB, but the qdisc layer charges
each one the headers of every segment it stands for (qdisc_pkt_len_init, net/core/dev.c): with a 1500-byte MTU,
1448 bytes of TCP payload (timestamps on) per 1514 on the wire: payload moves at kernel.PAYLOAD_FRACTION, 95.6%, of
the configured rate (Network.payload_bandwidth). Measured here: tc's own counters, 1.0456 bytes charged per
payload byte; the fit, 95.6% and 98.0% of 20 MB/s in two runs of benchmarks/network_emulation.py.
"""

from __future__ import annotations

import statistics
import time

SIZES = (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)


def flows(pairs: list, nbytes: int) -> dict:
    """Inside every rank: each (src, dst) of `pairs` sends nbytes at once (after a barrier) through commlib's
    point-to-point layer (paced on the pacer), dst answers 4 bytes -> {src: seconds until the answer came}."""
    import torch
    import torch.distributed as dist

    from commlib import algorithms as alg

    rank, t, ack = dist.get_rank(), torch.zeros(max(nbytes // 4, 1)), torch.zeros(1)
    dist.barrier()
    t0 = time.perf_counter()
    for src, dst in pairs:
        if rank == src:
            alg.send(t, dst)
            alg.recv(ack, dst)
        elif rank == dst:
            alg.recv(t, src)
            alg.send(ack, src)
    return {rank: time.perf_counter() - t0} if any(rank == s for s, _ in pairs) else {}


def p2p_times(src: int, dst: int, sizes=SIZES, repeats: int = 3) -> list[float]:
    """Inside every rank: the median over repeats of flows([(src, dst)], n) per size, as rank src saw it
    (seconds; the answer's 4 bytes cost one more latency, which fit_alpha_beta's alpha holds; 0 elsewhere)."""
    return [statistics.median(flows([(src, dst)], n).get(src, 0.0) for _ in range(repeats)) for n in sizes]


def calibrate(cluster, sizes=SIZES, repeats: int = 3) -> dict:
    """Fit the link between node 0 and node 1 (and inside node 0, with 2+ GPUs a node) on `cluster`'s network;
    stored as cluster.network.calibration too."""
    from commlib import cost

    net = cluster.network
    if net is None or net.nodes < 2:
        raise ValueError("calibrate needs a Cluster on a Network of at least 2 nodes")
    sizes = [int(n) for n in sizes]
    g = net.gpus_per_node
    between = cluster.run(p2p_times, 0, g, sizes, repeats)[0]
    alpha, beta = cost.fit_alpha_beta(sizes, between)
    result = {"kind": net.kind, "configured_bandwidth": net.bandwidth, "sizes": sizes, "between_s": between,
              "alpha_s": alpha, "payload_bandwidth": 1 / beta if beta > 0 else float("inf")}
    result["payload_ratio"] = result["payload_bandwidth"] / net.bandwidth
    result["expected_payload_bandwidth"] = net.payload_bandwidth   # headers taken off (kernel); the pacer: the rate
    if g > 1:
        inside = cluster.run(p2p_times, 0, 1, sizes, repeats)[0]
        result["inside_s"] = inside
        result["inside_speedup"] = between[-1] / inside[-1]
    net.calibration = result
    return result


def describe(cal: dict) -> str:
    """One line: the fitted link beside the configured rate."""
    line = (f"{cal['kind']} network: payload {cal['payload_bandwidth'] / 1e6:.2f} MB/s of {cal['configured_bandwidth'] / 1e6:.2f} "
            f"MB/s configured ({cal['payload_ratio']:.1%}; expected "
            f"{cal['expected_payload_bandwidth'] / cal['configured_bandwidth']:.1%}), alpha {cal['alpha_s'] * 1e6:.0f} us")
    if "inside_speedup" in cal:
        line += f"; inside a node {cal['inside_speedup']:.0f}x faster at {cal['sizes'][-1] >> 20} MiB"
    return line
