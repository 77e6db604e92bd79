"""Gradient compression, the longer sweeps: accuracy (every variant, more steps, several seeds) and speed on
emulated slow inter-node links against plain loopback, with the crossovers measured and modelled.

    python benchmarks/compression_tradeoff.py [--part all|accuracy|links] [--world-size 4]
        [--steps 400] [--seeds 0 1 2]                                      # accuracy
        [--link-steps 60] [--rounds 3] [--bandwidths 5e6 1e7 ...]          # links
        [--out benchmarks/compression_tradeoff.json] [--quick]

--quick (what CI runs): 10 steps, one seed, one round of 2 links (10 MB/s and 1 GB/s, around the crossovers) at 5
steps; writes nothing unless --out.

The notebook (chapter 5) runs a few variants live for a few dozen steps; this script is the committed result
it plots where a live run would be too long. A part that is not run keeps what the file already holds.
JSON:
  meta:       conditions of the accuracy part (world size, steps, seeds, torch, CPUs, load average before and
              after, wall time, date);
  variants:   accuracy part, per variant, means over seeds: bytes per step (counted, busiest rank) and the
              closed form, test loss and accuracy (with min and max over seeds), train-loss curve, hook /
              communication / overhead / step seconds (medians per step), and the crossover bandwidth
              (bytes/s) below which it would beat the plain all-reduce on a link with the latency of each
              LINKS entry of CROSSOVER_LINKS, from its measured (CPU) overhead;
  rows:       accuracy part, every (variant, seed) row as tradeoff() returned it, without the loss curve;
  links:      the speed part: meta (as above, plus nodes, latency, bandwidths, rounds); rows: per variant and
              link (bandwidth None: loopback) the medians over rounds of step, communication and overhead
              seconds, with bytes per step, and the inter-node bytes and paced bytes per step (equal: every
              byte that crosses the emulated NICs is paced); loopback_link: the fitted cost per call and per
              message; crossovers: per variant, measured (low, high, bandwidth), model (the alpha-beta model on
              the fitted loopback link plus the emulated latency) and textbook (the emulated latency alone).
Times are host clock readings on loopback Gloo with every rank on a shared CPU: communication includes
waiting for the slowest rank, and the overheads are CPU ones (a GPU compresses much faster).
"""

import datetime
import json
import os
import statistics
import time

import torch

import commlib as cl
from commlib import cost
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib.compression import tradeoff as tr

CROSSOVER_LINKS = ("tcp100", "ib_hdr", "nvlink4")
LINK_VARIANTS = [k for k in tr.VARIANTS if "no EF" not in k]  # no EF: the same bytes and compute as with it
BANDWIDTHS = [5e6, 10e6, 20e6, 50e6, 100e6, 200e6, 500e6]
GPUS_PER_NODE, LATENCY = 2, 1e-4


def conditions(world_size: int, t0: float, load_before) -> dict:
    return {"world_size": world_size, "torch": torch.__version__, "cpus": os.cpu_count(), "load_before": load_before,
            "load_after": os.getloadavg(), "wall_s": time.perf_counter() - t0, "backend": "gloo (loopback)",
            "date": datetime.date.today().isoformat(),
            "load_note": "1-minute load averages of the whole machine (2 CPUs shared with other users), this "
                         "benchmark's own ranks included",
            "task": "teacher-student: linear teacher 32->10, student MLP 32-256-256-10, plain SGD lr 0.3, "
                    "batch 32/rank"}


def accuracy(args) -> dict:
    load_before, t0 = os.getloadavg(), time.perf_counter()
    rows = []
    with cl.Cluster(world_size=args.world_size, backend="gloo", timeout=600) as c:
        for seed in args.seeds:
            for r in tr.tradeoff(c, steps=args.steps, seed=seed):
                rows.append({**r, "seed": seed})
                print(f"seed {seed} {r['variant']:<16} bytes/step {r['bytes_per_step']:>9,}  "
                      f"test loss {r['test_loss']:.4f}  accuracy {r['test_accuracy']:.3f}  "
                      f"overhead {r['overhead_s'] * 1e3:.2f} ms", flush=True)
    variants = {}
    for name in tr.VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        mean = lambda key: statistics.fmean(r[key] for r in mine)  # noqa: E731
        variants[name] = {
            "method": mine[0]["method"], "params": mine[0]["params"],
            "bytes_per_step": mean("bytes_per_step"), "closed_form_bytes": mine[0]["closed_form_bytes"],
            "test_loss": mean("test_loss"), "test_loss_min": min(r["test_loss"] for r in mine),
            "test_loss_max": max(r["test_loss"] for r in mine), "test_accuracy": mean("test_accuracy"),
            "test_accuracy_min": min(r["test_accuracy"] for r in mine),
            "test_accuracy_max": max(r["test_accuracy"] for r in mine),
            "updated_fraction": mean("updated_fraction"),
            "train_loss_curve": [statistics.fmean(x) for x in zip(*(r["losses"] for r in mine))],
            **{k: mean(k) for k in ("hook_s", "comm_s", "overhead_s", "step_s")}}
    summary = [{"variant": n, "method": v["method"], "params": v["params"], "world_size": args.world_size,
                "overhead_s": v["overhead_s"]} for n, v in variants.items()]
    for link in CROSSOVER_LINKS:
        for name, bw in tr.crossovers(summary, link).items():
            variants[name].setdefault("crossover_bandwidth", {})[link] = bw
    for r in rows:
        r.pop("losses")
    print(tr.table([{**v, "variant": n} for n, v in variants.items()]))
    meta = {**conditions(args.world_size, t0, load_before), "steps": args.steps, "seeds": args.seeds}
    return {"meta": meta, "variants": variants, "rows": rows}


def links(args) -> dict:
    load_before, t0 = os.getloadavg(), time.perf_counter()
    variants = {k: tr.VARIANTS[k] for k in LINK_VARIANTS}
    rounds = []
    with cl.Cluster(world_size=args.world_size, backend="gloo", timeout=600) as c:
        for i in range(args.rounds):  # whole sweeps one after another: drift in the machine's load hits all alike
            rounds.append(tr.link_sweep(c, args.bandwidths, variants, steps=args.link_steps, seed=0,
                                        gpus_per_node=GPUS_PER_NODE, latency=LATENCY))
            print(f"round {i + 1}/{args.rounds} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    rows = []
    for same in zip(*rounds):  # the same (link, variant) in every round
        median = lambda key: statistics.median(r[key] for r in same)  # noqa: E731
        keep = {k: v for k, v in same[0].items() if k not in ("losses",)}
        rows.append({**keep, **{k: median(k) for k in ("step_s", "comm_s", "hook_s", "overhead_s")},
                     "step_s_rounds": [r["step_s"] for r in same]})
    print(tr.table(rows))
    fitted = tr.loopback_link(rows, latency=LATENCY)
    textbook = cost.Link("emulated NIC", 1e9, LATENCY, "network.emulate latency alone")
    measured = tr.measured_crossovers(rows)
    model = tr.crossovers(tr.on_link(rows), fitted)
    book = tr.crossovers(tr.on_link(rows), textbook)
    crossovers = {n: {"measured": measured[n], "model": model[n], "textbook": book[n]} for n in measured}
    for n, x in crossovers.items():
        print(f"{n:<16} measured {x['measured']}  model {x['model'] / 1e6:.3g} MB/s  "
              f"textbook {x['textbook'] / 1e6:.3g} MB/s")
    meta = {**conditions(args.world_size, t0, load_before), "steps": args.link_steps, "rounds": args.rounds,
            "gpus_per_node": GPUS_PER_NODE, "nodes": args.world_size // GPUS_PER_NODE, "nics_per_node": 1,
            "latency": LATENCY, "bandwidths": args.bandwidths, "algorithm": "commlib ring (paced by emulate)"}
    return {"meta": meta, "rows": rows, "crossovers": crossovers,
            "loopback_link": {"call_latency": fitted.call_latency, "latency": fitted.latency - LATENCY,
                              "source": fitted.source}}


def main():
    ap = arguments.Parser(__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "accuracy", "links"), default="all", help="what to measure (default all)")
    ap.add_argument("--world-size", type=arguments.integer(2, MAX_WORLD_SIZE), default=4, help="ranks (default 4)")
    ap.add_argument("--steps", type=arguments.integer(1, 10**6), default=400, help="training steps per run")
    ap.add_argument("--seeds", type=arguments.integer(0, 2**31), nargs="+", default=[0, 1, 2], help="one run per seed")
    ap.add_argument("--link-steps", type=arguments.integer(1, 10**6), default=60, help="steps per emulated link")
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=3, help="repeats; medians")
    ap.add_argument("--bandwidths", type=arguments.number(0, 1e15), nargs="+", default=BANDWIDTHS, help="emulated link bytes/s")
    ap.add_argument("--out", default=None, type=arguments.output_file, help="default: benchmarks/compression_tradeoff.json (none with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    args = ap.parse_args()
    if args.quick:
        vars(args).update(steps=10, seeds=[0], link_steps=5, rounds=1, bandwidths=[1e7, 1e9])
    elif args.out is None:
        args.out = os.path.join(os.path.dirname(__file__), "compression_tradeoff.json")
    ap.check_memory(args.world_size, 0, f"--world-size {args.world_size}")
    out = {}
    if args.out and os.path.exists(args.out):  # earlier results: --part adds to them
        try:
            with open(args.out) as f:
                out = json.loads(f.read(1 << 24))
        except (OSError, ValueError) as e:
            ap.error(f"argument --out: {args.out} exists and is not this script's JSON ({e}); choose another file")
        if not isinstance(out, dict):
            ap.error(f"argument --out: {args.out} exists and is not this script's JSON (a JSON object)")
    if args.part in ("all", "accuracy"):
        out.update(accuracy(args))
    if args.part in ("all", "links"):
        out["links"] = links(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)  # inf is written as Infinity (Python's json reads it back)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
