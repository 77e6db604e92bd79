"""Gradient compression, the longer sweep: every variant of commlib.compression.tradeoff, more steps, several seeds.

    python benchmarks/compression_tradeoff.py [--world-size 4] [--steps 400] [--seeds 0 1 2]
                                              [--out benchmarks/compression_tradeoff.json]

The notebook's live run is tradeoff(cluster, steps=100) with one seed (about 20 s on 2 cores); this
script is the committed result the notebook plots where a live run would be too long. It writes JSON:
  meta:     conditions (world size, steps, seeds, torch version, CPUs, load average before and after);
  variants: per variant, means over seeds: bytes per step (counted, busiest rank) and the closed form,
            test loss and accuracy (with min and max over seeds), train-loss curve, hook / communication /
            overhead / step seconds (medians per step), and the crossover bandwidth (bytes/s) below which
            it beats the plain all-reduce on a link with the latency of each LINKS entry named in
            CROSSOVER_LINKS, from its measured overhead (closed_form.crossover_bandwidth);
  rows:     every (variant, seed) row as tradeoff() returned it, without the loss curve.
Times are host clock readings on loopback Gloo with every rank on a shared CPU: communication there
includes waiting for the slowest rank, and the overheads are CPU ones (a GPU compresses much faster).
"""

import argparse
import json
import os
import statistics
import time

import torch

import commlib as cl
from commlib.compression import tradeoff as tr

CROSSOVER_LINKS = ("tcp100", "ib_hdr", "nvlink4")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "compression_tradeoff.json"))
    args = ap.parse_args()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
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
            "train_loss_curve": [statistics.fmean(x) for x in zip(*(r["losses"] for r in mine))],
            **{k: mean(k) for k in ("hook_s", "comm_s", "overhead_s", "step_s")}}
    summary = [{"variant": n, "method": v["method"], "params": v["params"], "world_size": args.world_size,
                "overhead_s": v["overhead_s"]} for n, v in variants.items()]
    for link in CROSSOVER_LINKS:
        for name, bw in tr.crossovers(summary, link).items():
            variants[name].setdefault("crossover_bandwidth", {})[link] = bw if bw != float("inf") else "inf"
    meta = {"world_size": args.world_size, "steps": args.steps, "seeds": args.seeds, "torch": torch.__version__,
            "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg(),
            "wall_s": time.perf_counter() - t0, "backend": "gloo (loopback)",
            "task": "teacher-student: linear teacher 32->10, student MLP 32-256-256-10, "
                    "plain SGD lr 0.3, batch 32/rank"}
    for r in rows:
        r.pop("losses")
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "variants": variants, "rows": rows}, f, indent=1)
    print(tr.table([{**v, "variant": n} for n, v in variants.items()]))
    print(f"wrote {args.out} ({meta['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
