"""How well does t = alpha + n*beta predict sizes it was not fitted on? And how close does the ring get
to this machine's loopback bandwidth? Everything measured in this one run.

    python benchmarks/model_fit.py [--max-bytes 64M] [--iters 20] [--quick]

--quick (what CI runs): sizes 1 KiB .. 1 MiB, 2 iterations, 1 sweep.

1. sendrecv between 2 ranks, sizes 1 KiB .. max doubling (each size: median over 5 interleaved
   sweeps); fit on every other size, predict the others; median relative error (target <= 20%).
2. The same on 4 ranks, and the ring all-reduce predicted from that fit with the alpha-beta-gamma
   formula (reported; 4 ranks share 2 cores here, which the model does not know).
3. Ring all-reduce busbw at the largest size on 2 and 4 ranks, as a fraction of one raw TCP
   stream over 127.0.0.1.
"""

import os
import statistics

import commlib as cl
from commlib.bench import arguments
from commlib import bench, cost


def held_out_error(rows):
    n = [r["nbytes"] for r in rows]
    t = [r["time_s"] for r in rows]
    alpha, beta = cost.fit_alpha_beta(n[::2], t[::2])
    errors = [abs(alpha + x * beta - y) / y for x, y in zip(n[1::2], t[1::2])]
    return alpha, beta, statistics.median(errors), max(errors)


def fit_line(p: int, alpha: float, beta: float, fitted: int) -> str:
    """The fit, in words. beta <= 0 (the fit keeps beta >= 0) means the times did not grow with the size: the
    sizes swept are all latency (or noise), and there is no bandwidth to report or to price with."""
    if beta <= 0:
        return (f"p={p} sendrecv fit on {fitted} sizes: alpha {alpha * 1e6:.1f} µs, beta = {beta:g} s/B: the times do "
                "not grow with the size up to --max-bytes, so no bandwidth can be fitted (sweep larger sizes)")
    return f"p={p} sendrecv fit on {fitted} sizes: alpha {alpha * 1e6:.1f} µs, {1 / beta / 1e9:.3f} GB/s"


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--max-bytes", type=arguments.size(8 << 10), default=64 << 20,
                    help="largest size, at least 8K: 4 sizes from 1K, 2 to fit and 2 to check (default 64M)")
    ap.add_argument("--iters", type=arguments.integer(1, 1000000), default=10, help="timed calls per size")
    ap.add_argument("--repeats", type=arguments.integer(1, 1000), default=5, help="interleaved sweeps; each size keeps its median")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(max_bytes=1 << 20, iters=2, repeats=1)
    # 4 ranks at most; bench.sweep holds 4 buffers of a size on each (input, copy, expected, output)
    ap.check_memory(4, 4 * a.max_bytes, f"--max-bytes {a.max_bytes}")
    loop = bench.loopback_link()
    gamma = bench.measure_gamma()
    print(f"machine: {os.cpu_count()} cores; loopback TCP stream {loop.bandwidth / 1e9:.2f} GB/s, "
          f"{loop.latency * 1e6:.1f} µs; gamma {gamma * 1e9:.3f} ns/B")
    for p in (2, 4):
        with cl.Cluster(world_size=p, timeout=1800) as c:
            rows = bench.run_sweep(c, "sendrecv", "builtin", 1024, a.max_bytes, progress=False,
                                   iters=a.iters, warmup=2, repeats=a.repeats)
            alpha, beta, med, worst = held_out_error(rows)
            print(f"{fit_line(p, alpha, beta, len(rows[::2]))}; "
                  f"held-out {len(rows[1::2])} sizes: median error {med:.1%} (target <= 20%), worst {worst:.1%}")
            ring = bench.run_sweep(c, "all_reduce", "ring", 1024, a.max_bytes, progress=False, iters=max(3, a.iters // 2),
                                   warmup=1, factor=4, repeats=a.repeats)
            big = ring[-1]
            if beta > 0:
                link = cost.Link("fit", 1 / beta, alpha, "fit")
                errs = [abs(cost.collective_time("all_reduce", r["nbytes"], p, link, "ring", gamma) - r["time_s"])
                        / r["time_s"] for r in ring]
                print(f"p={p} ring all_reduce predicted from the sendrecv fit: median error "
                      f"{statistics.median(errs):.1%} over {len(ring)} sizes")
            else:   # a loaded machine can hide the bytes' time under the per-call time: the busbw is still measured
                print(f"p={p} ring all_reduce: not predicted (the sendrecv sweep gave no bandwidth to price it with)")
            print(f"p={p} ring busbw at {big['nbytes'] >> 20} MiB: {big['busbw_GBps']:.3f} GB/s = "
                  f"{big['busbw_GBps'] * 1e9 / loop.bandwidth:.0%} of the loopback stream")


if __name__ == "__main__":
    main()
