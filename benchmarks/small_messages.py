"""What the kernel network does with small calls (issue 64, item 2): Gloo's all-reduce of 4 KiB to 256 KiB on 2 nodes
of 1 GPU at NIC rates from 2.5 to 80 MB/s, between sleeps as a job's layers make them. whatif prices a call no
faster than this table says a call of its size takes at the scenario's rate (network.links.small_calls,
pricing.Pricer.least).

    python benchmarks/small_messages.py [--json benchmarks/small_messages.json] [--repeats 40] [--quick]

For each rate (Network.set_bandwidth on one 2 x 1 network) a Cluster runs emulated_job.small_calls: each size
REPEATS times, each call after a sleep of 2 or 4 ms in turn, its slowest rank's time; the mean per size and rate.
The whole table is measured twice, one pass after the other: their spread over the mean is its noise. Then the same
on 4 nodes at two rates, against the 2-node table scaled by the ring's steps (6 against 2): how far a 4-rank
call's least time is from what whatif assumes. Prints each cell beside its bytes' time at the payload rate
(kernel.PAYLOAD_FRACTION). --quick (CI): two rates, two sizes, 8 repeats, one pass, no 4-node check, no JSON.
Needs the kernel network (root, or a user namespace).
"""

import json
import os
import platform
import statistics
import sys
import time

import commlib as cl
from commlib.bench import arguments
from commlib.network import Network, available, kernel
from commlib.profiling.jobs import emulated_job as ej

RATES = (2.5e6, 5e6, 10e6, 20e6, 40e6, 80e6)   # bytes/s per NIC direction, as Network takes them
SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10)
REPEATS, PASSES = 40, 2
FOUR_RATES = (10e6, 40e6)


def table(nodes: int, rates, sizes, repeats: int) -> list[list[float]]:
    """One pass: per rate, per size, the mean call (seconds) on `nodes` nodes of 1 GPU."""
    net = Network(nodes, 1, bandwidth=rates[0], kind="kernel", quiet=True)
    out = []
    with cl.Cluster(nodes, network=net, timeout=600) as c:
        for rate in rates:
            net.set_bandwidth(rate)
            out.append(c.run(ej.small_calls, sizes, repeats)[0])
    return out


def bytes_s(nbytes: int, nodes: int, rate: float) -> float:
    """A ring all-reduce's bytes on the NIC at its payload rate, seconds."""
    return 2 * (nodes - 1) / nodes * nbytes / (rate * kernel.PAYLOAD_FRACTION)


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--json", type=arguments.output_file, help="write the table here")
    ap.add_argument("--repeats", type=arguments.integer(1, 1000), default=REPEATS, help="calls per size and rate")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: two rates, two sizes")
    a = ap.parse_args()
    ok, why = available()
    if not ok:
        print(f"small_messages: the kernel network is not available here ({why}); nothing measured")
        return
    rates, sizes = ((10e6, 40e6), (4 << 10, 64 << 10)) if a.quick else (RATES, SIZES)
    repeats, passes = (8, 1) if a.quick else (a.repeats, PASSES)
    load, t0 = os.getloadavg(), time.perf_counter()
    runs = [table(2, rates, sizes, repeats) for _ in range(passes)]
    mean = [[statistics.mean(r[i][j] for r in runs) for j in range(len(sizes))] for i in range(len(rates))]
    noise = [(max(r[i][j] for r in runs) - min(r[i][j] for r in runs)) / mean[i][j]
             for i in range(len(rates)) for j in range(len(sizes))] if passes > 1 else []
    print(f"# 2 x 1 kernel network, {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f}; Gloo all-reduce, "
          f"a sleep of 2 or 4 ms before each call, the slowest rank, mean of {repeats} x {passes} pass(es)")
    print(f"{'rate MB/s':>10}" + "".join(f"{s >> 10:>9} KiB (bytes)" for s in sizes))
    for i, rate in enumerate(rates):
        print(f"{rate / 1e6:>10g}" + "".join(f"{mean[i][j] * 1e3:>9.2f} ms ({bytes_s(s, 2, rate) * 1e3:5.2f})"
                                            for j, s in enumerate(sizes)))
    if noise:
        print(f"noise (two passes, spread over mean): median {statistics.median(noise):.1%}, max {max(noise):.1%}")
    four = []
    if not a.quick:
        got = table(4, FOUR_RATES, sizes, repeats)
        for k, rate in enumerate(FOUR_RATES):
            i = rates.index(rate)
            for j, s in enumerate(sizes):   # a 4-rank ring: 6 steps of s/4; the 2-rank table's step of s/4 is s/2
                j2 = sizes.index(s // 2) if s // 2 in sizes else None
                assumed = 3 * mean[i][j2] if j2 is not None else None
                four.append({"rate": rate, "size": s, "mean_s": got[k][j], "assumed_s": assumed})
                print(f"4 nodes, {rate / 1e6:g} MB/s, {s >> 10} KiB: {got[k][j] * 1e3:.2f} ms"
                      + (f"; 3 x the 2-node call of {s >> 11} KiB: {assumed * 1e3:.2f} ms" if assumed else ""))
    print(f"{time.perf_counter() - t0:.0f} s; load {os.getloadavg()[0]:.2f} at the end")
    if a.json and not a.quick:
        out = {"rates": list(rates), "sizes": list(sizes), "mean_s": mean, "passes": runs, "noise": noise,
               "four_nodes": four, "repeats": repeats, "gaps_s": [2e-3, 4e-3],
               "machine": {"machine": platform.machine(), "cpus": os.cpu_count(), "platform": platform.platform()},
               "load": [load[0], os.getloadavg()[0]], "command": "python benchmarks/small_messages.py --json " + a.json}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
