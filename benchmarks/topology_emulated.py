"""Flat ring vs multi-ring vs hierarchical all-reduce, and pairwise all-to-all, on an emulated 2 nodes x 2 GPUs
cluster (4 local ranks), measured against commlib.topology's model of the same links.

    python benchmarks/topology_emulated.py [--sizes 8M 32M] [--ratio 8] [--latency 1e-3] [--nics 1 2] [--repeats 5]
                                           [--json benchmarks/topology_emulated.json] [--quick]

--quick (what CI runs): 256 KiB, 1 and 2 NICs, 1 repeat, 1 ms latency; writes no JSON unless --json.

1. Calibrate the intra-node link (loopback: ranks 0<->1 and 2<->3 exchanging at once, alpha-beta fit over the
   sizes) and gamma (a rank adding tensors while the others do too).
2. Emulate NICs of bandwidth = intra / ratio (1/8 of loopback by default) and the given latency, with 1 and
   then 2 NICs per node (topology.emulate); time each algorithm (median over repeats of the slowest rank).
3. Print measured/model per algorithm and size (target: within 25% at large sizes), the measured speedup of
   hierarchical over the flat ring against the model's (target: within 25%), and how exact the pacing was:
   how late receivers went on after the network's delivery time (the wake-up alone, and all causes,
   including loopback data arriving after that time).
The work is commlib.bench.emulated's (chapter 3 runs the same at one small size); --json saves the result,
which chapter 3 shows as the committed measurement.
"""

import json

import commlib as cl
from commlib.bench import arguments
from commlib.bench import emulated as eb


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--sizes", type=arguments.size(4), nargs="+", default=[8 << 20, 32 << 20], help="all-reduce sizes")
    ap.add_argument("--ratio", type=arguments.number(0, 1e6), default=8.0, help="emulated NIC = intra-node loopback / ratio")
    ap.add_argument("--latency", type=arguments.number(0, 10, strict=False), default=1e-3, help="emulated NIC latency, s")
    ap.add_argument("--nics", type=arguments.integer(1, 2), nargs="+", default=[1, 2], help="NICs per emulated node")
    ap.add_argument("--repeats", type=arguments.integer(1, 1000), default=5, help="repeats; medians")
    ap.add_argument("--json", type=arguments.output_file, help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(sizes=[256 << 10], repeats=1)
    ap.check_memory(4, 4 * max(a.sizes), f"--sizes {max(a.sizes)}")
    with cl.Cluster(world_size=4, timeout=900) as c:
        result = eb.run(c, a.sizes, a.ratio, a.latency, a.nics, a.repeats)
    print(eb.format_result(result))
    if a.json:
        result["command"] = "python benchmarks/topology_emulated.py " + " ".join(
            [f"--sizes {' '.join(map(str, a.sizes))}", f"--ratio {a.ratio:g}", f"--latency {a.latency:g}",
             f"--nics {' '.join(map(str, a.nics))}", f"--repeats {a.repeats}"])
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
