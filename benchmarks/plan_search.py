"""How many configurations per second commlib.plan.search evaluates (target: >= 10,000).

    python benchmarks/plan_search.py [--rounds 5] [--quick]

--quick (what CI runs): 1 and 2 nodes, 1 round.

Searches a 7B dense model and a 8-expert MoE on 1-16 nodes of DGX H100 (8 GPUs each) over every
(dp, tp, pp, ep, ZeRO stage, micro-batches) that can run; reports configurations evaluated per second,
cold (the collective price cache cleared first) and warm, and the best configuration found.
"""

import os
import statistics
import time

from commlib import plan
from commlib.bench import arguments

MODELS = {
    "7B dense": plan.Model(layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, ffn=11008 * 3 // 2),
    "8x1B MoE": plan.Model(layers=24, hidden=2048, heads=16, seq=4096, vocab=32000, experts=8, topk=2),
}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=5, help="repeats; medians")
    ap.add_argument("--nodes", type=arguments.integer(1, 4096), nargs="+", default=[1, 2, 4, 16], help="cluster sizes searched")
    ap.add_argument("--global-batch", type=arguments.integer(1, 16777216), default=512, help="sequences per step")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(rounds=1, nodes=[1, 2])
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}; median of {a.rounds} rounds")
    print(f"{'model':>9} {'nodes':>5} {'configs':>8} {'fit':>6} {'cold /s':>9} {'warm /s':>9}  best")
    for name, model in MODELS.items():
        for nodes in a.nodes:
            hw = plan.hardware("dgx_h100", nodes)
            rates = {"cold": [], "warm": []}
            for _ in range(a.rounds):
                plan.clear_cache()
                for kind in ("cold", "warm"):
                    t0 = time.perf_counter()
                    fits, n = plan.search(model, hw, a.global_batch)
                    rates[kind].append(n / (time.perf_counter() - t0))
            best = fits[0] if fits else None
            text = "nothing fits" if best is None else \
                f"{best.config} {best.step_s:.2f} s, {best.memory['total'] / 1e9:.0f} GB"
            print(f"{name:>9} {nodes:>5} {n:>8} {len(fits):>6} {statistics.median(rates['cold']):>9.0f} "
                  f"{statistics.median(rates['warm']):>9.0f}  {text}")


if __name__ == "__main__":
    main()
