"""Flat ring vs multi-ring vs hierarchical all-reduce, and pairwise all-to-all, on an emulated 2 nodes x 2 GPUs
cluster (4 local ranks), measured against commlib.topology's model of the same links.

    python benchmarks/topology_emulated.py [--sizes 8M 32M] [--ratio 8] [--latency 1e-3] [--nics 1 2] [--repeats 5]

1. Calibrate the intra-node link (loopback: ranks 0<->1 and 2<->3 exchanging at once, alpha-beta fit over the
   sizes) and gamma (a rank adding tensors while the others do too).
2. Emulate NICs of bandwidth = intra / ratio (1/8 of loopback by default) and the given latency, with 1 and
   then 2 NICs per node (topology.emulate); time each algorithm (median over repeats of the slowest rank).
3. Print measured/model per algorithm and size (target: within 25% at large sizes), the measured speedup of
   hierarchical over the flat ring against the model's (target: within 25%), and how exact the pacing was:
   how late receivers went on after the network's delivery time (overslept: the wake-up alone; late: all causes,
   including loopback data arriving after that time).
"""

import argparse
import os
import statistics
import sys
import time

import cloudpickle
import torch
import torch.distributed as dist

import commlib as cl
from commlib import algorithms as alg
from commlib import bench, cost
from commlib import topology as topo

cloudpickle.register_pickle_by_value(sys.modules[__name__])

G = 2  # GPUs per emulated node
RUNS = {
    "flat_ring": ("all_reduce", lambda t: alg.ring_all_reduce(t, check=False)),
    "multi_ring": ("all_reduce", lambda t: alg.multi_ring_all_reduce(t, G, check=False)),
    "hierarchical": ("all_reduce", lambda t: alg.hierarchical_all_reduce(t, G, check=False)),
    "pairwise": ("all_to_all", lambda t: alg.pairwise_all_to_all(t, check=False)),
}


def calibrate(sizes, repeats):
    """-> ({size: [seconds per exchange]}, [seconds per byte of add_]) on this rank, all ranks at once."""
    torch.set_num_threads(1)
    peer = dist.get_rank() ^ 1  # the other GPU of this node
    out = {}
    for n in sizes:
        a, b = torch.ones(n // 4), torch.empty(n // 4)
        exchange = [dist.P2POp(dist.irecv, b, peer), dist.P2POp(dist.isend, a, peer)]
        for _ in range(2):  # warm-up
            [w.wait() for w in dist.batch_isend_irecv(exchange)]
        out[n] = []
        for _ in range(repeats):
            dist.barrier()
            t0 = time.perf_counter()
            [w.wait() for w in dist.batch_isend_irecv(exchange)]
            out[n].append(time.perf_counter() - t0)
    acc, inc = torch.ones(max(sizes) // 4), torch.ones(max(sizes) // 4)
    gamma = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        acc.add_(inc)
        gamma.append((time.perf_counter() - t0) / max(sizes))
    return out, gamma


def measure(sizes, repeats, bandwidth, latency, nics):
    """-> ({(algorithm, size): [seconds per run]}, [(late_s, overslept_s, data_after_due, paced_s)]) on this rank.
    Rounds interleave the algorithms and sizes, so a slow spell on a shared machine hits them all alike."""
    torch.set_num_threads(1)
    times = {(name, n): [] for n in sizes for name in RUNS}
    with topo.emulate(G, bandwidth, latency, nics) as net:
        for name, n in times:  # warm-up
            RUNS[name][1](torch.ones(n // 4))
        net.log.clear()
        for _ in range(repeats):
            for name, n in times:
                t = torch.ones(n // 4)
                dist.barrier()
                t0 = time.perf_counter()
                RUNS[name][1](t)
                times[(name, n)].append(time.perf_counter() - t0)
        log = [(m.late_s, m.overslept_s, m.data_at > m.due, m.due - m.posted) for m in net.log]
    return times, log


def slowest_rank_median(per_rank: list[list[float]]) -> float:
    return statistics.median(max(run) for run in zip(*per_rank))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["8M", "32M"])
    ap.add_argument("--ratio", type=float, default=8.0, help="emulated NIC = intra-node loopback / ratio")
    ap.add_argument("--latency", type=float, default=1e-3, help="emulated NIC latency, s")
    ap.add_argument("--nics", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    sizes = [bench.parse_size(s) for s in a.sizes]
    load0 = os.getloadavg()
    with cl.Cluster(world_size=4, timeout=900) as c:
        cal_sizes = sorted({1 << 18, 1 << 20, 4 << 20, *(n // G for n in sizes)})
        out = c.run(calibrate, cal_sizes, a.repeats)
        xs = [n for n in cal_sizes]
        ts = [slowest_rank_median([o[0][n] for o in out]) for n in cal_sizes]
        alpha, beta = cost.fit_alpha_beta(xs, ts)
        gamma = statistics.median(g for o in out for g in o[1])
        intra = cost.Link("loopback", 1 / beta, alpha, "fitted: ranks 0<->1, 2<->3 exchanging at once")
        bandwidth = intra.bandwidth / a.ratio
        print(f"machine: {os.cpu_count()} cores, load average {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} at start")
        print(f"intra (loopback, fitted): {intra.bandwidth / 1e9:.2f} GB/s, alpha {alpha * 1e6:.0f} us; "
              f"gamma {gamma * 1e9:.2f} ns/B; emulated NIC: {bandwidth / 1e9:.3f} GB/s (1/{a.ratio:g}), "
              f"latency {a.latency * 1e3:.1f} ms; median of {a.repeats} runs, slowest rank")
        speedups = {}
        for nics in a.nics:
            out = c.run(measure, sizes, a.repeats, bandwidth, a.latency, nics)
            model_topology = topo.Topology(2, G, intra, cost.Link("NIC", bandwidth, a.latency, "emulated"), nics)
            print(f"\n{nics} NIC(s) per node: {'algorithm':>13} {'size':>6} {'measured':>10} {'model':>10} "
                  f"{'measured/model':>15}")
            for n, text in zip(sizes, a.sizes):
                got = {}
                for name, (op, _) in RUNS.items():
                    measured = slowest_rank_median([o[0][(name, n)] for o in out])
                    model = topo.collective_time(op, n, model_topology, name, gamma=gamma)
                    got[name] = (measured, model)
                    print(f"{'':>19} {name:>13} {text:>6} {measured * 1e3:>8.1f}ms {model * 1e3:>8.1f}ms "
                          f"{measured / model:>14.2f}x")
                (mf, pf), (mh, ph) = got["flat_ring"], got["hierarchical"]
                speedups[(nics, text)] = (mf / mh, pf / ph)
            log = [m for o in out for m in o[1]]
            late = sorted(m[0] for m in log)
            over = sorted(m[1] for m in log)
            q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
            paced = statistics.median(m[3] for m in log)
            print(f"  pacing over {len(log)} paced messages (median paced time {paced * 1e3:.1f} ms): "
                  f"overslept median {q(over, .5) * 1e3:.2f} ms, p95 {q(over, .95) * 1e3:.2f} ms; late median "
                  f"{q(late, .5) * 1e3:.2f} ms, p95 {q(late, .95) * 1e3:.2f} ms; "
                  f"loopback data after the due time: {sum(m[2] for m in log) / len(log):.0%} of messages")
        print("\nhierarchical speedup over the flat ring: measured vs model")
        for (nics, text), (measured, model) in speedups.items():
            print(f"  {nics} NIC(s), {text:>4}: measured {measured:.2f}x, model {model:.2f}x, "
                  f"ratio {measured / model:.2f}")
    load1 = os.getloadavg()
    print(f"load average at the end: {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}")


if __name__ == "__main__":
    main()
