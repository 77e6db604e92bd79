"""commlib's ZeRO-3 (commlib.parallel.zero) against torch's FSDP2 (fully_shard) on the same MLP, CPU/Gloo.

    python benchmarks/zero_vs_fsdp2.py [--world-sizes 2 4] [--hidden 1024] [--layers 8] [--steps 10] [--quick]

--quick (what CI runs): 2 ranks, 2 x Linear(64, 64), 4 steps: checks it runs and agrees, not speed.

Both shard every nn.Linear as one unit (FSDP2: fully_shard per Linear, then the root) and train with Adam
on the same data; the script checks that they end with the same parameters, then reports the median step
time (ours without and with prefetch, torch impl; FSDP2) and the per-rank peak memory of one step as torch's
own trackers see it: torch.distributed._tools MemTracker for ours (with the shards and optimizer registered),
FSDPMemTracker for FSDP2; and ours' exact ledger (memory()).
"""

import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import MAX_WORLD_SIZE
from commlib.parallel import Comm, zero


def run(which: str, hidden: int, layers: int, steps: int, rows: int):
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    sizes = [hidden] * (layers + 1)
    torch.manual_seed(dist.get_rank())
    data = [(torch.randn(rows, hidden), torch.randn(rows, hidden)) for _ in range(steps)]
    if which == "fsdp2":
        model = zero.torch_fsdp2(zero.mlp(sizes))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

        def step(x, y):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        tracker = lambda: FSDPMemTracker(model, opt)  # noqa: E731
        final = lambda: [p.full_tensor() for p in model.parameters()]  # noqa: E731
        ledger = None
    else:
        sdp = zero.ShardedDataParallel(zero.mlp(sizes), Comm(), 3, lr=1e-3, prefetch=which == "ours+prefetch")

        def step(x, y):
            F.mse_loss(sdp(x), y).backward()
            sdp.step()

        def tracker():
            # MemTracker.track_external takes modules, torch.optim optimizers and tensors only (torch 2.13,
            # torch/distributed/_tools/mem_tracker.py): commlib's Adam is none, so register its state tensors
            t = MemTracker()
            t.track_external(*[x for pair in sdp.optimizer.state for x in pair], *[u.shard for u in sdp.units])
            return t
        final = sdp.parameters
        ledger = sdp.memory()
    times = []
    for i, (x, y) in enumerate(data[:-1]):
        dist.barrier()
        t0 = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - t0)
    mt = tracker()
    with mt:
        step(*data[-1])
    peak = mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    if ledger is not None:
        ledger = sdp.memory()
    return statistics.median(times[1:]), peak, ledger, [p.detach().clone() for p in final()]


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--world-sizes", type=arguments.integer(1, MAX_WORLD_SIZE), nargs="+", default=[2, 4], help="ranks")
    ap.add_argument("--hidden", type=arguments.integer(1, 65536), default=1024, help="width of the MLP")
    ap.add_argument("--layers", type=arguments.integer(1, 1000), default=8, help="Linear layers")
    ap.add_argument("--steps", type=arguments.integer(3, 100000), default=10, help="Adam steps (the first 2 are not timed)")
    ap.add_argument("--rows", type=arguments.integer(1, 65536), default=32, help="rows of the batch per rank")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI (overrides the sizes)")
    a = ap.parse_args()
    if a.quick:
        vars(a).update(world_sizes=[2], hidden=64, layers=2, steps=4)
    params = a.layers * (a.hidden * a.hidden + a.hidden)
    # fp32 parameters, gradients and Adam's two moments (16 B/param), the whole model gathered at the peak, and
    # the one-process reference each rank keeps to compare with: about 24 B/param, whatever the sharding
    ap.check_memory(max(a.world_sizes), 24 * params, f"--hidden {a.hidden} --layers {a.layers}")
    params = a.layers * (a.hidden * a.hidden + a.hidden)
    print(f"torch {torch.__version__}; {os.cpu_count()} cores; MLP {a.layers} x Linear({a.hidden}, {a.hidden}) = "
          f"{params / 1e6:.1f}M params ({4 * params / 2**20:.0f} MiB fp32); {a.rows} rows per rank; "
          f"median of {a.steps - 2} steps; load average {os.getloadavg()[0]:.2f}")
    print(f"{'p':>2} {'run':>14} {'step ms':>9} {'peak MiB (torch tracker)':>25} "
          f"{'ours: params+grads+adam, gathered peak MiB':>44}")
    for p in a.world_sizes:
        with cl.Cluster(world_size=p, timeout=900) as c:
            results = {}
            for which in ("ours", "ours+prefetch", "fsdp2"):
                out = c.run(run, which, a.hidden, a.layers, a.steps, a.rows)
                results[which] = out
                step_s = max(o[0] for o in out)
                peak = max(o[1] for o in out)
                led = out[0][2]
                state = None if led is None else (led["params"] + led["grads"] + led["optimizer"]) / 2**20
                mine = "" if led is None else f"{state:.1f}, {led['gathered_peak'] / 2**20:.1f}"
                print(f"{p:>2} {which:>14} {1e3 * step_s:>9.1f} {peak / 2**20:>25.1f} {mine:>44}")
            err = max((x - y).abs().max().item() for x, y in zip(results["ours"][0][3], results["fsdp2"][0][3]))
            print(f"   final parameters, ours vs FSDP2: max |difference| = {err:.2e}")


if __name__ == "__main__":
    main()
