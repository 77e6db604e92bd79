"""Gloo's own ring calls on 2 nodes of 2 GPUs of the kernel network, with one NIC per node and with a NIC per
GPU: whether each step waits for a receive notice (issue 64; the what-if's pricing.Pricer.streams).

    python benchmarks/gloo_rings.py [--bandwidth 10e6] [--repeats 10] [--json PATH] [--quick]

Gloo sends a message only once its receiver's notice has come (gloo/transport/tcp/pair.cc: the receiver posts
its recv and notifies the sender). On 2 x 2 with one NIC per node the ring 0-1-2-3 leaves node 0 by rank 1's hop
and enters it by rank 3's, so the notice rank 0 sends rank 3 leaves by the NIC that carries rank 1's data, behind
its packet; with a NIC per GPU (each GPU's traffic on its rail) no notice leaves by a NIC that carries the ring's
data (pricing.notice_behind_data). For each layout a Cluster of 4 ranks times Gloo's all-gather
(all_gather_single) and all-reduce, each call after a barrier and 20 ms of idle links, from the last rank's
arrival to the last rank's end; the median of --repeats. Against the flat ring's model on the links whatif
prices for that network (network.links.topology, its default alpha) two ways: a latency a step (a ring whose
steps wait, as whatif prices one NIC per node), and streamed (its bytes and one latency:
pricing.streamed_latency). Where no notice waits, the packets column is how far the call ended under streamed,
in packets of a step (its bytes, at most kernel.GSO_MAX): what network.links.credit reads from this file's JSON,
per step size, for the head start whatif gives such a call after idle links.
--quick (CI): FSDP2's layer (257 KiB) only, 4 repeats, no JSON. Needs the kernel network (root, or a user
namespace).
"""

import json
import os
import platform
import statistics
import sys
import time

import commlib as cl
from commlib.bench import arguments
from commlib.network import Network, kernel, links
from commlib.profiling.replay import pricing

# FSDP2's layer in benchmarks/whatif_accuracy.py (256 x 256 + 256 floats), then steps of 1/2, 2 and 4 packets
SIZES = (263168, 131072, 524288, 1 << 20)
IDLE_S = 0.02               # the links' idle time before each call


def calls(sizes, repeats: int, idle: float) -> dict:
    """Inside every rank: per op and size, `repeats` calls, each after a barrier and `idle` s -> {"op size":
    [(start, end), ...]} (time.perf_counter: one clock for the processes of one machine)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    p = dist.get_world_size()
    out = {}
    for n in sizes:
        shard, whole, reduced = torch.ones(n // 4 // p), torch.empty(n // 4 // p * p), torch.ones(n // 4)
        for op, call in (("all_gather", lambda: dist.all_gather_single(whole, shard)),
                         ("all_reduce", lambda: dist.all_reduce(reduced))):
            call()   # the connections' first use
            times = []
            for _ in range(repeats):
                dist.barrier()
                time.sleep(idle)
                t0 = time.perf_counter()
                call()
                times.append((t0, time.perf_counter()))
            out[f"{op} {n}"] = times
    return out


def layout(nics: int, bandwidth: float, sizes, repeats: int) -> list[dict]:
    net = Network(2, 2, nics, bandwidth=bandwidth, kind="kernel", quiet=True)
    with cl.Cluster(4, network=net, timeout=600) as c:   # up with the Cluster, down when it closes
        runs = c.run(calls, sizes, repeats, IDLE_S)
    t = links.topology(net.spec())   # the links whatif prices for this network
    rows = []
    for key in runs[0]:
        op, n = key.split()[0], int(key.split()[1])
        took = [max(r[key][k][1] for r in runs) - max(r[key][k][0] for r in runs) for k in range(repeats)]
        stepwise = pricing.price(op, n, 4, t, "flat_ring")
        streamed = stepwise - pricing.streamed_latency(op, n, 4, t)
        packet = min(n / 4, kernel.GSO_MAX) / t.inter.bandwidth   # a step's first packet at the payload rate
        m = statistics.median(took)
        rows.append({"nics_per_node": nics, "op": op, "bytes": n, "step_bytes": n // 4, "measured_s": m,
                     "spread": (max(took) - min(took)) / m, "stepwise_s": stepwise, "streamed_s": streamed,
                     "packet_s": packet, "under_packets": (streamed - m) / packet,
                     "notice_behind_data": pricing.notice_behind_data(t, 4)})
    return rows


def report(rows: list[dict]) -> str:
    lines = [f"{'NICs/node':>9} {'call':>10} {'bytes':>8} {'measured':>9} {'a latency a step':>17} "
             f"{'streamed':>16} {'under it':>8}  notice behind data"]
    for r in rows:
        m = r["measured_s"]
        lines.append(f"{r['nics_per_node']:>9} {r['op']:>10} {r['bytes']:>8} {m * 1e3:>6.1f} ms "
                     f"{r['stepwise_s'] * 1e3:>6.1f} ms {r['stepwise_s'] / m - 1:>+6.1%} "
                     f"{r['streamed_s'] * 1e3:>6.1f} ms {r['streamed_s'] / m - 1:>+6.1%} "
                     f"{r['under_packets']:>+5.2f} pk  {'yes' if r['notice_behind_data'] else 'no'}")
    return "\n".join(lines)


def main() -> None:
    a = arguments.kernel_run(__doc__, 10, "calls timed per op and size")
    if a is None:
        return
    load = [os.getloadavg()[0]]
    sizes, repeats = (SIZES[:1], 4) if a.quick else (SIZES, a.repeats)
    rows = [r for nics in (1, 2) for r in layout(nics, a.bandwidth, sizes, repeats)]
    load.append(os.getloadavg()[0])
    print(report(rows))
    print(f"(4 ranks on 2 x 2, NICs at {a.bandwidth:g} B/s, each call after {IDLE_S * 1e3:g} ms of idle links, the "
          f"median of {repeats}; the models' error is theirs over the measured; load {load[0]:.2f} -> {load[1]:.2f})")
    if a.json and not a.quick:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "bandwidth": a.bandwidth, "repeats": repeats, "idle_s": IDLE_S, "load": load,
                       "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                       "command": "python " + " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
