"""What torch.profiler adds to each CPU op it records: the bound whatif's profiler correction uses
(commlib.profiling.replay.compute.PER_OP_US, through compute.floor).

    python benchmarks/profiler_overhead.py [--quick] [--rounds 5] [--busy 2]

Two workloads in one process on one thread, each timed without the profiler and then under it, rounds
interleaved: "small adds" (torch.add on 16 floats, the most ops a second a step can have) and "MLP step" (a
training step of a 4-layer MLP of width 64: forward, backward and SGD, the kind of many small ops whose traced
steps run longest over their untraced ones). Profiled as jobs/recording.record does (ProfilerActivity.CPU,
record_shapes=True), and with with_stack=True as a learner's recipe may. Per op: (traced - untraced) / the CPU
ops the profiler recorded (nested ones each count, as RankTrace.ops does), the median over rounds, and that over
PER_OP_US (with_stack's Python frames are recorded but not counted: their cost falls on the ops). --busy N runs N busy loops beside it (a loaded host). --quick (CI): fewer ops and rounds.
"""

import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile

from commlib.bench import arguments
from commlib.profiling.replay import compute

SETTINGS = {"record_shapes": {"record_shapes": True}, "+ with_stack": {"record_shapes": True, "with_stack": True}}


def small_adds(n: int):
    x = torch.ones(16)

    def run():
        y = x
        for _ in range(n):
            y = torch.add(y, 1.0)
        return y
    return run


def mlp_steps(n: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64)

    def run():
        for _ in range(n):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
    return run


def per_op_us(run, settings: dict, rounds: int) -> tuple[float, float, int]:
    """-> (median us the profiler adds to each recorded CPU op, median untraced us per op, ops recorded)."""
    run()   # warm up: first-call dispatch, allocator
    added, base, ops = [], [], 0
    for _ in range(rounds):
        t = time.perf_counter()
        run()
        untraced = time.perf_counter() - t
        with profile(activities=[ProfilerActivity.CPU], **settings) as prof:
            t = time.perf_counter()
            run()
            traced = time.perf_counter() - t
        ops = cpu_ops(prof)
        added.append((traced - untraced) / ops * 1e6)
        base.append(untraced / ops * 1e6)
    return statistics.median(added), statistics.median(base), ops


def cpu_ops(prof) -> int:
    """The CPU ops in prof's trace as RankTrace.ops counts them (events of category cpu_op: with_stack's Python
    frames are not ops, though the profiler records them too)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return sum(1 for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op")


def busy_loop(stop):
    while not stop.is_set():
        pass


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--rounds", type=arguments.integer(1, 100), default=5, help="traced/untraced pairs per row")
    ap.add_argument("--busy", type=arguments.integer(0, 64), default=0, help="busy loops run beside it")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: fewer ops and rounds")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rounds = 2 if a.quick else a.rounds
    adds, steps = (2000, 20) if a.quick else (20000, 200)
    stop = mp.get_context("spawn").Event()
    loops = [mp.get_context("spawn").Process(target=busy_loop, args=(stop,), daemon=True) for _ in range(a.busy)]
    for p in loops:
        p.start()
    try:
        print(f"torch {torch.__version__}, {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.2f}, {a.busy} busy "
              f"loop(s) beside, {rounds} round(s); compute.PER_OP_US = {compute.PER_OP_US:g} us")
        print(f"{'workload':<12} {'profiler':<15} {'ops':>7} {'op us':>7} {'added us/op':>12} {'/ PER_OP_US':>12}")
        worst = 0.0
        for name, run in (("small adds", small_adds(adds)), ("MLP step", mlp_steps(steps))):
            for label, settings in SETTINGS.items():
                added, base, ops = per_op_us(run, settings, rounds)
                worst = max(worst, added)
                print(f"{name:<12} {label:<15} {ops:>7} {base:>7.2f} {added:>12.2f} {added / compute.PER_OP_US:>12.2f}")
        print(f"most added per op: {worst:.2f} us, {worst / compute.PER_OP_US:.2f} of compute.PER_OP_US "
              f"(load {os.getloadavg()[0]:.2f} at the end)")
    finally:
        stop.set()
        for p in loops:
            p.join(timeout=5)


if __name__ == "__main__":
    main()
