"""busbw of commlib's ring all-reduce vs Gloo's built-in all_reduce, measured in one run.

    python benchmarks/ring_vs_builtin.py [--world-sizes 2 4] [--sizes 16M 32M 64M] [--rounds 5] [--quick]

--quick (what CI runs): 2 ranks, 1 MiB, 1 round of 1 iteration.

Both run in the same Cluster, alternating round by round (so drift on a busy machine hits both
alike); each round is a bench.sweep of a few iterations; the table gives the median over rounds.
Target (issue 3): ring busbw >= built-in at 16-64 MiB on 2 and 4 ranks.
"""

import argparse
import os
import statistics

import commlib as cl
from commlib.algorithms import p2p
from commlib import bench


def one_round(size: int, algorithm: str, segment_bytes: int, iters: int) -> float:
    p2p.SEGMENT_BYTES = segment_bytes
    row = bench.sweep("all_reduce", algorithm, size, size, iters=iters, warmup=1)[0]
    assert row["wrong"] == 0, row
    return row["busbw_GBps"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", nargs="+", default=["16M", "32M", "64M"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--segment-bytes", type=bench.parse_size, default=p2p.SEGMENT_BYTES)
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_sizes=[2], sizes=["1M"], rounds=1, iters=1)
    print(f"machine: {os.cpu_count()} cores; ring segment {a.segment_bytes} B; median of {a.rounds} rounds "
          f"x {a.iters} iterations")
    print(f"{'p':>3} {'size':>6} {'builtin busbw':>14} {'ring busbw':>11} {'ring/builtin':>13}")
    for p in a.world_sizes:
        with cl.Cluster(world_size=p, timeout=900) as c:
            for text in a.sizes:
                size = bench.parse_size(text)
                got = {"builtin": [], "ring": []}
                for _ in range(a.rounds):
                    for algorithm in got:
                        got[algorithm].append(c.run(one_round, size, algorithm, a.segment_bytes, a.iters)[0])
                b, r = statistics.median(got["builtin"]), statistics.median(got["ring"])
                print(f"{p:>3} {text:>6} {b:>11.3f} GB/s {r:>6.3f} GB/s {r / b:>12.2f}x", flush=True)


if __name__ == "__main__":
    main()
