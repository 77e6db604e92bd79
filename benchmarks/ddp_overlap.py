"""Step time of commlib's BucketedDDP vs torch DDP (same model, same bucket cap) vs no overlap.

    python benchmarks/ddp_overlap.py [--world-size 2] [--layers 8] [--width 1024] [--batch 64] [--steps 12]
                                     [--backend auto|gloo|nccl] [--quick]

--quick (what CI runs): 2 ranks, 2 x 128 MLP, 3 steps, 1 round: it runs and prints, no speed claim.

On CPU (Gloo) the model and data live in host memory. With NCCL (backend auto picks it when every
rank has a GPU) they live on each rank's GPU, and every timed step ends with torch.cuda.synchronize().

Targets (issue 6): BucketedDDP / torch DDP <= 1.1; with overlap, most of the communication hidden
when compute exceeds it. Each variant runs `steps` timed steps after 3 warm-up steps; median step.
The no-communication baseline (plain module) gives compute alone; exposed communication =
step - compute.
"""

import os
import statistics
import time

import torch
import torch.distributed as dist

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib import overlap
from commlib.cluster.worker import uses_nccl


def mlp(layers: int, width: int):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def measure(variant: str, layers: int, width: int, batch: int, steps: int, cap_mb: float):
    device = torch.device("cuda", torch.cuda.current_device()) if uses_nccl() else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = mlp(layers, width).to(device)
    if variant == "torch DDP":
        ids = [device.index] if device.type == "cuda" else None
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cap_mb)
    elif variant.startswith("BucketedDDP"):
        model = overlap.BucketedDDP(model, bucket_cap_mb=cap_mb, overlap=variant == "BucketedDDP overlap")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    times = []
    for i in range(steps + 3):
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        sync()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    step = torch.tensor([statistics.median(times)], device=device)
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    tl = getattr(model, "timeline", None)
    return step.item(), (tl.overlap_fraction if tl is not None and tl.events else None)


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--world-size", type=arguments.integer(1, MAX_WORLD_SIZE), default=2, help="ranks (default 2)")
    ap.add_argument("--layers", type=arguments.integer(1, 1000), default=8, help="Linear layers of the MLP")
    ap.add_argument("--width", type=arguments.integer(1, 65536), default=1024, help="their width")
    ap.add_argument("--batch", type=arguments.integer(1, 65536), default=64, help="rows per rank")
    ap.add_argument("--steps", type=arguments.integer(3, 100000), default=12, help="steps per variant")
    ap.add_argument("--bucket-cap-mb", type=arguments.number(0, 1e6), default=overlap.DDP_BUCKET_CAP_MB,
                    help="DDP bucket size, MiB (default 25)")
    ap.add_argument("--rounds", type=arguments.integer(1, 1000), default=3, help="variants alternate; median over rounds")
    ap.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"), help="default auto")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_size=2, layers=2, width=128, batch=16, steps=3, rounds=1)
    # parameters, gradients, buckets and torch DDP's copies (about 4x the parameters), and the activations
    weights = a.layers * (a.width * a.width + a.width) * 4
    ap.check_memory(a.world_size, 4 * weights + 4 * a.layers * a.batch * a.width * 4, f"--layers {a.layers} --width {a.width}")
    grad_mb = a.layers * (a.width * a.width + a.width) * 4 / 2**20
    print(f"machine: {os.cpu_count()} cores; {a.world_size} ranks; MLP {a.layers} x {a.width}: {grad_mb:.0f} MiB "
          f"of gradients; batch {a.batch}; bucket cap {a.bucket_cap_mb} MiB")
    variants = ["no communication", "BucketedDDP overlap", "BucketedDDP no-overlap", "torch DDP"]
    got = {v: [] for v in variants}
    frac = {}
    with cl.Cluster(world_size=a.world_size, backend=a.backend, timeout=1200) as c:
        print(f"backend: {c.backend}")
        for _ in range(a.rounds):
            for v in variants:
                step, f = c.run(measure, v, a.layers, a.width, a.batch, a.steps, a.bucket_cap_mb)[0]
                got[v].append(step)
                frac.setdefault(v, []).append(f)
    med = {v: statistics.median(ts) for v, ts in got.items()}
    compute = med["no communication"]
    for v in variants:
        extra = f"  exposed comm {1e3 * (med[v] - compute):7.1f} ms" if v != "no communication" else ""
        fr = [f for f in frac[v] if f is not None]
        extra += f"  overlap fraction {statistics.median(fr):.0%}" if fr else ""
        print(f"{v:>24}: step {med[v] * 1e3:8.1f} ms{extra}")
    print(f"BucketedDDP (overlap) / torch DDP: {med['BucketedDDP overlap'] / med['torch DDP']:.3f}  (target <= 1.1)")
    print(f"overlap / no-overlap: {med['BucketedDDP overlap'] / med['BucketedDDP no-overlap']:.3f}")


if __name__ == "__main__":
    main()
