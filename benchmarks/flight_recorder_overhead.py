"""What the Flight Recorder costs: run() dispatch and all_reduce time with it on (a Cluster's default,
64 entries per rank) and off (flight_recorder=None), on the same machine, rounds interleaved.

    python benchmarks/flight_recorder_overhead.py [--quick] [--world-size 4] [--rounds 3]

Each row: the median over rounds (a row "1 rank" times an all_reduce with no peer: there the
per-call cost of writing a record is not hidden behind waiting for the others) of each round's median; on/off - 1 is the overhead. A record is a few
hundred bytes written once per collective, so the cost per call is fixed: it shows on tiny messages,
not on 1 MiB ones. The machine's load average is printed: numbers taken under load are marked so.
"""

import os
import statistics
import time

import torch
import torch.distributed as dist

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib.cluster.flight_recorder import DEFAULT_BUFFER


def noop():
    return None


def time_all_reduce(nbytes: int, iters: int) -> float:
    """Median seconds of one all_reduce of nbytes (float32), measured inside the rank; rank 0's answer."""
    t = torch.ones(max(1, nbytes // 4))
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(world_size: int, entries: int | None, runs: int, iters: int) -> dict:
    with cl.Cluster(world_size, flight_recorder=entries) as c:
        c.run(noop)
        dispatch = []
        for _ in range(runs):
            start = time.perf_counter()
            c.run(noop)
            dispatch.append(time.perf_counter() - start)
        small = c.run(time_all_reduce, 8, iters)[0]
        big = c.run(time_all_reduce, 1 << 20, iters)[0]
    with cl.Cluster(1, flight_recorder=entries) as c:  # one rank: no peer to wait for, the record cost shows
        alone = c.run(time_all_reduce, 8, iters * 10)[0]
    return {"run() dispatch": statistics.median(dispatch), "all_reduce 8 B": small, "all_reduce 1 MiB": big,
            "8 B, 1 rank": alone}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="2 ranks, 1 round, few repetitions (< 1 minute)")
    ap.add_argument("--world-size", type=arguments.integer(1, MAX_WORLD_SIZE), default=4, help="ranks (default 4)")
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=3, help="on/off alternations; medians")
    ap.add_argument("--runs", type=arguments.integer(1, 1000000), default=200, help="run() calls per round")
    ap.add_argument("--iters", type=arguments.integer(1, 1000000), default=100, help="all_reduce calls per size per round")
    a = ap.parse_args()
    if a.quick:
        a.world_size, a.rounds, a.runs, a.iters = 2, 1, 40, 30
    ap.check_memory(a.world_size, 4 << 20, f"--world-size {a.world_size}")  # 1 MiB all-reduces
    load_before = os.getloadavg()[0]
    rows: dict = {}
    for _ in range(a.rounds):
        for label, entries in (("on", DEFAULT_BUFFER), ("off", None)):
            for name, seconds in measure(a.world_size, entries, a.runs, a.iters).items():
                rows.setdefault(name, {}).setdefault(label, []).append(seconds)
    load = max(load_before, os.getloadavg()[0])
    cores = os.cpu_count() or 1
    print(f"machine: {cores} cores, world_size={a.world_size}, rounds={a.rounds}, Flight Recorder on = "
          f"{DEFAULT_BUFFER} entries per rank; load average {load:.1f}")
    if load > 0.5 * cores:
        print(f"MEASURED UNDER LOAD (load {load:.1f} on {cores} cores): times are inflated and noisy")
    print(f"{'':18} {'on (us)':>10} {'off (us)':>10} {'on/off - 1':>11}")
    for name, by in rows.items():
        on, off = statistics.median(by["on"]), statistics.median(by["off"])
        print(f"{name:18} {on * 1e6:10.1f} {off * 1e6:10.1f} {on / off - 1:+10.1%}")


if __name__ == "__main__":
    main()
