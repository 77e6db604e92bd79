"""What-if accuracy: predict a job's step on other links and more nodes from its traces, then run those and
compare (issue 34's test, on the course's emulated multi-node cluster).

    python benchmarks/whatif_accuracy.py [--quick] [--bandwidth 100e6] [--latency 5e-4] [--json out.json]

commlib.profiling.emulated_job: an MLP trained with BucketedDDP whose bucket all-reduces run commlib's ring on a
background thread, through NICs paced by network.emulate (2 emulated nodes of 1 GPU each); its compute an
emulated accelerator (fixed-duration ops that take no core, so that 4 ranks on 2 cores compute as fast as 2).
1. Fit the emulated NIC as the ring sees it: alpha (latency plus software per message), beta.
2. Record the job at --bandwidth; whatif predicts its step at 1/4x and 4x the bandwidth and on 4 nodes.
3. Run each and measure (the slowest rank per step, the median over steps, no profiler).
Prints each scenario's predicted, measured and error, and the median |error| (the issue's goal: <= 10% on a
quiet machine). --quick (CI): fewer steps, twice the nodes predicted but not run (no 4-rank cluster), no JSON.
The full run's --json is what chapter 9 shows.
"""

import json
import os
import platform
import tempfile
import time

import commlib as cl
from commlib.bench import arguments
from commlib.profiling import emulated_job as ej


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--bandwidth", type=arguments.number(1e6, 1e10), default=100e6, help="emulated NIC, bytes/s")
    ap.add_argument("--latency", type=arguments.number(0, 0.05, strict=False), default=5e-4, help="emulated NIC, s")
    ap.add_argument("--json", help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: fewer steps")
    a = ap.parse_args()
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        ap.error(f"argument --json: the folder of {a.json!r} does not exist")
    steps, recorded = (2, 1) if a.quick else (ej.STEPS, ej.RECORDED)
    t0 = time.perf_counter()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, cl.Cluster(world_size=2, timeout=600) as small:
        if a.quick:
            result = ej.predict_and_run(small, None, tmp, a.bandwidth, a.latency, steps, recorded)
        else:
            with cl.Cluster(world_size=4, timeout=600) as large:
                result = ej.predict_and_run(small, large, tmp, a.bandwidth, a.latency, steps, recorded)
    alpha, beta = result["fit"]
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f} -> {os.getloadavg()[0]:.2f}; "
          f"emulated NIC {a.bandwidth / 1e6:g} MB/s, latency {a.latency * 1e3:g} ms; fitted alpha "
          f"{alpha * 1e3:.2f} ms per message, 1/beta {1 / beta / 1e6:.1f} MB/s")
    print(f"{'scenario':>15} {'predicted ms':>13} {'measured ms':>12} {'error':>8}")
    for r in result["rows"]:
        if r["measured_s"] is None:
            print(f"{r['name']:>15} {r['predicted_s'] * 1e3:>13.2f}   not run (--quick: no 4-rank cluster)")
            continue
        print(f"{r['name']:>15} {r['predicted_s'] * 1e3:>13.2f} {r['measured_s'] * 1e3:>12.2f} {r['error']:>+8.1%}")
    print(f"median |error| over the what-ifs: {ej.median_error(result):.1%} (goal: at most 10%); "
          f"{time.perf_counter() - t0:.0f} s")
    if a.json:
        out = {k: v for k, v in result.items() if k != "report"}
        out.update(machine=platform.machine(), cpus=os.cpu_count(), load=load, bandwidth=a.bandwidth,
                   latency=a.latency, steps=steps, recorded=recorded, median_error=ej.median_error(result),
                   command=f"python benchmarks/whatif_accuracy.py --bandwidth {a.bandwidth:g} --latency {a.latency:g}")
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
