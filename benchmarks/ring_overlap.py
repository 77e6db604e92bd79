"""Exposed communication of ring attention's forward and of the collective matmul on emulated slow links, measured
against the ring model (commlib.parallel.collective_matmul.ring_timelines fed with each rank's measured compute).

    python benchmarks/ring_overlap.py [--bandwidth 100e6 25e6] [--repeats 3] [--quick] [--json out.json]

4 local ranks, one per emulated node (network.emulate): every ring hop crosses a NIC of `bandwidth` bytes/s.
For each kind (attention zig-zag, attention contiguous, matmul) and overlap on/off, the median over repeats of
each rank's exposed time (what it did not spend computing), the model's, and the emulator's own delay past
the model (late_s: wake-ups on a busy machine). Prints the load average at the start: on a shared machine
the measurement runs above the model by about the emulator's delays.
"""

import json
import os
import statistics

import commlib as cl
from commlib.bench import arguments
from commlib.parallel import live


def measure(c, kind, balance, overlap, bandwidth, repeats, sizes):
    runs = [c.run(live.ring_overlap, kind, bandwidth, 0.0, overlap, balance, **sizes) for _ in range(repeats)]
    p = len(runs[0])
    med = lambda key: [statistics.median(run[r][key] for run in runs) for r in range(p)]  # noqa: E731
    return {"kind": kind, "balance": balance, "overlap": overlap, "bandwidth": bandwidth,
            "message_s": runs[0][0]["message_s"], "measured_s": med("measured"), "model_s": med("model"),
            "late_s": med("late_s"), "compute_s": med("compute_s")}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--bandwidth", type=arguments.number(0, 1e15), nargs="+", default=[100e6, 25e6], help="bytes/s per emulated NIC")
    ap.add_argument("--repeats", type=arguments.integer(1, 1000), default=3, help="repeats; medians")
    ap.add_argument("--quick", action="store_true", help="one bandwidth, one repeat, small blocks (CI)")
    ap.add_argument("--json", type=arguments.output_file, help="also write the rows to this file")
    a = ap.parse_args()
    bandwidths, repeats = ([100e6], 1) if a.quick else (a.bandwidth, a.repeats)
    ap.check_memory(4, 64 << 20, "4 ranks")  # the sizes are fixed: blocks of a few MiB
    sizes = {"attention": {"seq": 512 if a.quick else 2048}, "matmul": {"rows": 64 if a.quick else 256,
                                                                          "hidden": 256 if a.quick else 1024}}
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} (2 cores: above ~2, timings run long)")
    rows = []
    with cl.Cluster(world_size=4, timeout=600) as c:
        for bw in bandwidths:
            for kind, balance in (("attention", "zigzag"), ("attention", "contiguous"), ("matmul", "zigzag")):
                for overlap in (True, False):
                    row = measure(c, kind, balance, overlap, bw, repeats, sizes[kind])
                    rows.append(row)
                    name = f"{kind} {balance}" if kind == "attention" else kind
                    ms = lambda xs: " ".join(f"{1e3 * x:6.1f}" for x in xs)  # noqa: E731
                    print(f"{bw / 1e6:5.0f} MB/s {name:>20} overlap={overlap!s:>5} block {1e3 * row['message_s']:5.1f}"
                          f" ms | exposed per rank: measured {ms(row['measured_s'])} | model {ms(row['model_s'])}"
                          f" | emulator late {ms(row['late_s'])} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load_average": load, "repeats": repeats, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
