"""A small tensor-parallel training job for the emulated cluster: a Megatron-style MLP split over every rank, no
data parallelism, profiled with the README's recipe (examples/ddp_train.py's time_then_record), its traces saying
which network they ran on. Edit it: the width, the layers, the batch, the steps.

    python -m commlib network run --nodes 2 --bandwidth 20e6 examples/tp_train.py --traces traces
    python -m commlib whatif traces/ --measured-network 2x1@20e6 --network 2x1@60e6

Each layer keeps its rank's share of the hidden units: a column-parallel linear (this rank's rows of the first
weight), ReLU, a row-parallel linear (this rank's columns of the second), whose partial sums are all-reduced
forward; backward all-reduces the gradient of the layer's input (Megatron-LM's f and g, Shoeybi et al. 2019,
section 3: commlib.profiling.jobs.emulated_job's Copy and Reduce, which its tensor-parallel job uses too). Every rank sees the same batch. So each step makes two all-reduces per layer of batch x width
activations, small messages whose number does not change with the bandwidth: the latency-bound kind of job.
Runs under plain torchrun too (then the traces carry no network).
"""

import argparse

import torch
import torch.distributed as dist

from commlib.profiling.jobs.emulated_job import Copy, Reduce   # Megatron's f and g, on Gloo's all-reduce
from ddp_train import time_then_record   # examples/ddp_train.py's recording recipe (this script's folder)


class ParallelMLP(torch.nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = torch.nn.Linear(width, hidden // dist.get_world_size())               # this rank's hidden units
        self.down = torch.nn.Linear(hidden // dist.get_world_size(), width, bias=False)  # their share of the output

    def forward(self, x):
        return Reduce.apply(self.down(torch.relu(self.up(Copy.apply(x)))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", required=True, help="folder for the per-rank traces (rankR.json)")
    ap.add_argument("--width", type=int, default=256, help="the model's width (default 256)")
    ap.add_argument("--layers", type=int, default=4, help="MLP layers (default 4)")
    ap.add_argument("--batch", type=int, default=64, help="samples per step, the same on every rank (default 64)")
    ap.add_argument("--steps", type=int, default=2, help="training steps timed without the profiler, then recorded, "
                                                         "each after 1 warm-up (default 2)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error(f"argument --steps: must be at least 1, got {args.steps}")

    dist.init_process_group("gloo")            # torchrun's variables; Gloo: the emulated nodes talk TCP
    torch.set_num_threads(1)                   # the ranks share the machine's cores
    rank = dist.get_rank()
    torch.manual_seed(rank)                    # each rank its own shard of the weights
    model = torch.nn.Sequential(*[ParallelMLP(args.width, 4 * args.width) for _ in range(args.layers)])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(0))   # the same batch

    def train_step() -> float:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()                        # an all-reduce per layer, as forward made one per layer
        opt.step()
        return loss.item()

    train_step()                               # warm-up
    step, loss, path = time_then_record(train_step, args.traces, args.steps)
    print(f"step {step}: loss {loss:.4f}; trace {path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
