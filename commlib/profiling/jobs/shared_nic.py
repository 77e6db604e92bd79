"""Two all-reduces through one NIC, by hand: the smallest job whose what-if depends on sharing a link (chapter 9,
tests/test_replay_flows.py).

    ranks, measured = two_flows(nbytes=1 << 20, bandwidth=1e9)   # RankTraces and the Topology they ran on
    whatif(ranks, [Scenario("x4", topology=at(4))], measured=measured)

Two ranks, one per node, one NIC each. Each rank queues two all-reduces of nbytes at t = 0 on Gloo's two
worker threads, so both are in flight at once, and waits for the second. Each is recorded lasting twice its
time alone on the link (plus overhead_us of its own): two flows through one NIC, each at half the rate. The
ranks compute for 1 us after the wait.
"""

from __future__ import annotations

from commlib import cost
from commlib import topology as topo
from commlib.profiling.traces import Call, RankTrace


def two_flows(nbytes: int = 1 << 20, bandwidth: float = 1e9, overhead_us: float = 0.0, ops=("all_reduce",) * 2):
    """-> (the two ranks' RankTraces, the measured topology: 2 nodes x 1 GPU, NICs of `bandwidth`, no latency)."""
    link = cost.Link("NIC", bandwidth, 0.0, "two_flows")
    measured = topo.Topology(2, 1, link, link)
    alone = topo.collective_time("all_reduce", nbytes, measured, "flat_ring") * 1e6
    d = 2 * alone + overhead_us
    ranks = []
    for r in range(2):
        calls = [Call(r, op, "0", 2, nbytes, "float32", 0.0, d, None, None, None) for op in ops]
        rt = RankTrace(f"rank{r}.json", r, 2, "gloo", None, calls, [(-1.0, 0.0), (d + 1, d + 2)], (-1.0, d + 2))
        rt.threads = [(10 + k, k) for k in range(len(calls))]
        rt.issued = {k: 0.0 for k in range(len(calls))}
        rt.waits = {len(calls) - 1: (0.0, d + 1)}
        ranks.append(rt)
    return ranks, measured


def ddp_like(calls: int, ranks: int = 2, buckets: int = 4, nbytes: int = 1 << 20, bandwidth: float = 1e9):
    """A torch-DDP-shaped job of `calls` all-reduces per rank, in memory (whatif's scale at 10^5 calls:
    benchmarks/whatif_scale.py): per step, backward computes `buckets` spans, each bucket's all-reduce queued
    at its span's end on Gloo's two workers (two in flight), and the step's end waits for the last one. Each
    call recorded at 1.5x its time alone (half of it shared). -> (RankTraces, the measured topology)."""
    link = cost.Link("NIC", bandwidth, 0.0, "ddp_like")
    measured = topo.Topology(ranks, 1, link, link)
    alone = topo.collective_time("all_reduce", nbytes, measured, "flat_ring") * 1e6
    d, span = 1.5 * alone, alone / 2
    out = []
    for r in range(ranks):
        cs, compute, threads, issued, waits = [], [], [], {}, {}
        t = 0.0
        for k in range(calls):
            b = k % buckets
            if b == 0 and k:   # the next step starts after the last bucket of this one
                t = cs[-1].start_us + d + 1.0
            compute.append((t, t + span))
            t += span
            start = max(t, cs[-2].end_us if len(cs) >= 2 and b >= 2 else t)   # a worker is free
            cs.append(Call(r, "all_reduce", "0", ranks, nbytes, "float32", start, d, None, None, None))
            threads.append((10 + k % 2, k))
            issued[k] = t
            if b == buckets - 1:
                waits[k] = (t, start + d + 1.0)
        end = cs[-1].end_us + 2.0
        out.append(RankTrace(f"rank{r}.json", r, ranks, "gloo", None, cs, compute, (0.0, end),
                             threads=threads, issued=issued, waits=waits))
    return out, measured
