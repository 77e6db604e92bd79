"""A small data-parallel training job for the emulated cluster: torch DDP on a toy model, profiled with the
README's recipe, its traces saying which network they ran on. Edit it: the model, the batch, the steps.

    python -m commlib network run --nodes 2 --bandwidth 20e6 examples/ddp_train.py --traces traces
    python -m commlib diagnose traces/
    python -m commlib whatif traces/ --measured-network 2x1@20e6 --network 4x1@80e6

Under `network run` each rank finds the network in COMMLIB_NETWORK; commlib.network.spec.record(prof) writes it
into the trace (top-level key "commlib_network"), so the what-if knows what the traces were measured on. The same
steps are first run and timed without the profiler: their step goes into the trace too ("commlib_untraced"), and
the what-if scales the traced compute to it, so that it predicts the job as it runs unprofiled. Before the profiler
stops, settle(prof) waits (unrecorded) for Gloo's threads to finish writing their events: torch 2.13 lets DDP's last
step end before they have, and a profiler that stops then can corrupt the process's heap (commlib.profiling.jobs.live).
Runs under plain torchrun too (then the traces carry no network).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule

from commlib.network import spec
from commlib.profiling.jobs.live import settle
from commlib.profiling.jobs.recording import job_step_s, stamp_untraced


def time_then_record(train_step, traces: str, steps: int) -> tuple[int, float, str]:
    """The README's recipe: `steps` training steps timed without the profiler, then 1 warm-up and `steps` more
    recorded into traces/rankR.json -> (the last step's number, its loss, the trace's path)."""
    times = []
    for _ in range(steps):                     # the same steps without the profiler, timed
        t = time.perf_counter()
        train_step()
        times.append(time.perf_counter() - t)
    untraced = job_step_s(times)               # the slowest rank per step, the median over steps

    os.makedirs(traces, exist_ok=True)
    path = os.path.join(traces, f"rank{dist.get_rank()}.json")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),   # 1 warm-up step, then
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:  # `steps` recorded, once
        spec.record(prof)                      # the network (COMMLIB_NETWORK) into the trace, if there is one
        stamp_untraced(prof, untraced)         # the untraced step: whatif keeps the profiler's time out
        for step in range(1 + steps):          # warm-up + active steps: the trace is written as the last ends
            loss = train_step()
            if step == steps:                  # Gloo's threads done writing before the profiler stops (live.settle:
                settle(prof)                   # a race in torch that corrupts the heap; no barrier in the trace)
            prof.step()
    return step, loss, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", required=True, help="folder for the per-rank traces (rankR.json)")
    ap.add_argument("--hidden", type=int, default=256, help="width of each layer (default 256)")
    ap.add_argument("--layers", type=int, default=4, help="linear layers (default 4)")
    ap.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (default 25)")
    ap.add_argument("--steps", type=int, default=2, help="training steps timed without the profiler, then recorded, "
                                                         "each after 1 warm-up (default 2)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error(f"argument --steps: must be at least 1, got {args.steps}")

    dist.init_process_group("gloo")            # torchrun's variables; Gloo: the emulated nodes talk TCP
    torch.set_num_threads(1)                   # the ranks share the machine's cores
    rank = dist.get_rank()
    torch.manual_seed(0)                       # the same initial weights on every rank (DDP checks)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, args.hidden, generator=torch.Generator().manual_seed(rank))

    def train_step() -> float:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()                        # DDP all-reduces the gradients, bucket by bucket
        opt.step()
        return loss.item()

    train_step()                               # warm-up: DDP builds its buckets
    step, loss, path = time_then_record(train_step, args.traces, args.steps)
    print(f"step {step}: loss {loss:.4f}; trace {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
