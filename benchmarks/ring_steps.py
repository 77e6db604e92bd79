"""commlib's ring all-reduce step by step on the kernel network: what the size of the packets a GPU's TCP hands
down costs a ring of 2 and of 4 ranks (Network's small_packets, commlib.network.kernel.gso_cap; issue 49).

    python benchmarks/ring_steps.py [--bandwidth 10e6] [--repeats 12] [--json PATH] [--quick]

For 2 and 4 nodes of 1 GPU on --bandwidth NICs, a Cluster runs the ring's 2(p-1) steps (each a batch of one
isend to the right and one irecv from the left, as commlib.algorithms.ring does) on a 512 KiB all-reduce, and
times every step on every rank. Twice: on Network(small_packets=True), packets of at most the shaper's burst
(kernel.gso_cap), and on the default network, the kernel's usual 64 KiB. Each against its bytes at the NIC's
payload rate (kernel.PAYLOAD_FRACTION). Prints per case the median and largest step, the steps more than 3 ms
over their bytes' time, and the median call (slowest rank) against 2(p-1) steps of bytes.
--quick (what CI runs): 4 nodes only, 5 repeats, no JSON. Needs the kernel network (root, or a user namespace).
"""

import json
import statistics
import sys
import time

import commlib as cl
from commlib.bench import arguments
from commlib.network import Network, kernel

BYTES = 526336   # the what-if benchmark's bucket: 0.5 MiB of gradients and their biases
SLOW_S = 3e-3    # a step this much over its bytes' time counts as held


def ring_steps(nbytes: int, repeats: int) -> list[list[float]]:
    """Inside every rank: `repeats` rings of 2(p-1) steps of nbytes/p each -> each repeat's step times, s."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    p, r = dist.get_world_size(), dist.get_rank()
    send, recv = torch.ones(nbytes // p // 4), torch.empty(nbytes // p // 4)
    out = []
    for _ in range(repeats):
        dist.barrier()
        t = [time.perf_counter()]
        for _ in range(2 * (p - 1)):
            ops = [dist.P2POp(dist.irecv, recv, (r - 1) % p), dist.P2POp(dist.isend, send, (r + 1) % p)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
            t.append(time.perf_counter())
        out.append([b - a for a, b in zip(t, t[1:])])
    return out


def case(nodes: int, bandwidth: float, repeats: int, capped: bool) -> dict:
    net = Network(nodes, 1, 1, bandwidth=bandwidth, kind="kernel", quiet=True, small_packets=capped)
    with cl.Cluster(nodes, network=net, timeout=300) as c:   # up with the Cluster, down when it closes
        runs = c.run(ring_steps, BYTES, repeats + 2)
    ideal = BYTES / nodes / (bandwidth * kernel.PAYLOAD_FRACTION)
    kept = [rank[2:] for rank in runs]   # the first two rings warm the connections up
    steps = [s for rank in kept for ring in rank for s in ring]
    calls = [max(sum(rank[k]) for rank in kept) for k in range(repeats)]
    return {"nodes": nodes, "packets": kernel.gso_cap(bandwidth) if capped else 65536,
            "step_ideal_s": ideal, "step_median_s": statistics.median(steps), "step_max_s": max(steps),
            "held_steps": sum(s > ideal + SLOW_S for s in steps), "steps": len(steps),
            "call_median_s": statistics.median(calls), "call_ideal_s": 2 * (nodes - 1) * ideal}


def report(rows: list[dict]) -> str:
    lines = [f"{'ranks':>5} {'packets':>8} {'step median':>12} {'largest':>8} {'held':>9} {'call median':>12} "
             f"{'bytes alone':>12} {'over':>6}"]
    for r in rows:
        lines.append(f"{r['nodes']:>5} {r['packets']:>8} {r['step_median_s'] * 1e3:>9.2f} ms "
                     f"{r['step_max_s'] * 1e3:>5.1f} ms "
                     f"{r['held_steps']:>3} of {r['steps']:<3} {r['call_median_s'] * 1e3:>9.1f} ms "
                     f"{r['call_ideal_s'] * 1e3:>9.1f} ms {r['call_median_s'] / r['call_ideal_s'] - 1:>+6.1%}")
    return "\n".join(lines)


def main() -> None:
    a = arguments.kernel_run(__doc__, 12, "rings timed per case")
    if a is None:
        return
    load = [open("/proc/loadavg").read().split()[0]]
    nodes, repeats = ((4,), 5) if a.quick else ((2, 4), a.repeats)
    rows = [case(n, a.bandwidth, repeats, capped) for n in nodes for capped in (True, False)]
    load.append(open("/proc/loadavg").read().split()[0])
    print(report(rows))
    print(f"(NICs at {a.bandwidth:g} B/s, {BYTES} B all-reduce, held: a step over {SLOW_S * 1e3:g} ms past its bytes' "
          f"time; load {load[0]} -> {load[1]})")
    if a.json and not a.quick:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "bandwidth": a.bandwidth, "bytes": BYTES, "load": load,
                       "command": "python " + " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
