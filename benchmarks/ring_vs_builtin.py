"""busbw of commlib's ring all-reduce vs Gloo's built-in all_reduce, measured in one run.

    python benchmarks/ring_vs_builtin.py [--world-sizes 2 4] [--sizes 16M 32M 64M] [--rounds 5] [--quick]

--quick (what CI runs): 2 ranks, 1 MiB, 1 round of 1 iteration.

Both run in the same Cluster, alternating round by round (so drift on a busy machine hits both
alike); each round is a bench.sweep of a few iterations; the table gives the median over rounds.
Target (issue 3): ring busbw >= built-in at 16-64 MiB on 2 and 4 ranks.
"""

import os
import statistics

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib.algorithms import p2p
from commlib import bench


def one_round(size: int, algorithm: str, segment_bytes: int, iters: int) -> float:
    p2p.SEGMENT_BYTES = segment_bytes
    row = bench.sweep("all_reduce", algorithm, size, size, iters=iters, warmup=1)[0]
    assert row["wrong"] == 0, row
    return row["busbw_GBps"]


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--world-sizes", type=arguments.integer(1, MAX_WORLD_SIZE), nargs="+", default=[2, 4], help="ranks")
    ap.add_argument("--sizes", type=arguments.size(), nargs="+", default=[16 << 20, 32 << 20, 64 << 20],
                    help="all-reduce sizes, e.g. 16M 64M")
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=5, help="repeats; medians")
    ap.add_argument("--iters", type=arguments.integer(1, 1000000), default=3, help="calls per round")
    ap.add_argument("--segment-bytes", type=arguments.size(), default=p2p.SEGMENT_BYTES, help="ring segment size")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_sizes=[2], sizes=[1 << 20], rounds=1, iters=1)
    ap.check_memory(max(a.world_sizes), 3 * max(a.sizes), f"--sizes {max(a.sizes)}")  # input, copy, result
    print(f"machine: {os.cpu_count()} cores; ring segment {a.segment_bytes} B; median of {a.rounds} rounds "
          f"x {a.iters} iterations")
    print(f"{'p':>3} {'size':>6} {'builtin busbw':>14} {'ring busbw':>11} {'ring/builtin':>13}")
    for p in a.world_sizes:
        with cl.Cluster(world_size=p, timeout=900) as c:
            for size in a.sizes:
                text = f"{size >> 20}M" if size % (1 << 20) == 0 else f"{size >> 10}K" if size % 1024 == 0 else str(size)
                got = {"builtin": [], "ring": []}
                for _ in range(a.rounds):
                    for algorithm in got:
                        got[algorithm].append(c.run(one_round, size, algorithm, a.segment_bytes, a.iters)[0])
                b, r = statistics.median(got["builtin"]), statistics.median(got["ring"])
                print(f"{p:>3} {text:>6} {b:>11.3f} GB/s {r:>6.3f} GB/s {r / b:>12.2f}x", flush=True)


if __name__ == "__main__":
    main()
