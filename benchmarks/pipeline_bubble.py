"""The pipeline bubble measured on a local Cluster against (p-1)/(m+p-1), for GPipe and 1F1B.

    python benchmarks/pipeline_bubble.py [--world-sizes 2 4] [--microbatches 1 2 4 8 16] [--compute-ms 5] [--quick]

--quick (what CI runs): 2 stages, 1 and 4 micro-batches, 1 ms stages, 1 round.

Two kinds of stage: "paced" (each forward sleeps compute_ms more, backward twice that: a stage of known
cost, which a laptop with fewer cores than ranks can run without its ranks fighting over cores) and
"real" (matrix products only: on 2 cores with 4 ranks the stages also wait for a core). The measured
bubble is 1 - mean(busy) / step, from the compute events of every rank (pipeline.bubble).
"""

import os
import statistics

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib.parallel import pipeline as pl


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--world-sizes", type=arguments.integer(1, MAX_WORLD_SIZE), nargs="+", default=[2, 4], help="pipeline stages, one per rank")
    ap.add_argument("--microbatches", type=arguments.integer(1, 1024), nargs="+", default=[1, 2, 4, 8, 16], help="m values")
    ap.add_argument("--compute-ms", type=arguments.number(0, 1e4), default=5.0, help="paced compute per stage, ms")
    ap.add_argument("--hidden", type=arguments.integer(1, 16384), default=1024, help="width of the real stages")
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=3, help="repeats; medians")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_sizes=[2], microbatches=[1, 4], compute_ms=1.0, hidden=64, rounds=1)
    # a stage's weights and Adam-free gradients, and the activations of every micro-batch in flight (32 rows)
    ap.check_memory(max(a.world_sizes), 8 * a.hidden * a.hidden + 4 * 32 * max(a.microbatches) * a.hidden * 4,
                    f"--hidden {a.hidden}")
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; median of {a.rounds} rounds")
    print(f"{'p':>2} {'m':>3} {'stage':>6} {'schedule':>8} {'measured':>9} {'(p-1)/(m+p-1)':>14} {'step ms':>8}")
    for p in a.world_sizes:
        with cl.Cluster(world_size=p, timeout=600) as c:
            for m in a.microbatches:
                for stage, kw in (("paced", dict(compute_s=a.compute_ms / 1e3, hidden=16)),
                                  ("real", dict(hidden=a.hidden, microbatch_size=32))):
                    for kind in pl.SCHEDULES:
                        runs = [pl.bubble_on(c, m, kind, **kw) for _ in range(a.rounds)]
                        got = statistics.median(r["bubble"] for r in runs)
                        step = statistics.median(r["step_s"] for r in runs)
                        print(f"{p:>2} {m:>3} {stage:>6} {kind:>8} {got:>9.3f} {runs[0]['theory']:>14.3f} "
                              f"{1e3 * step:>8.1f}")


if __name__ == "__main__":
    main()
