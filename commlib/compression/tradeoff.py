"""The trade-off, measured: a small task trained on p ranks with each compression method.

Task, generated, with a known optimum: inputs x ~ N(0, I_32), labels the argmax of a fixed random
linear teacher (32 -> 10): linearly separable, so 100% test accuracy is reachable, and the student
(32 -> 256 -> 256 -> 10, ReLU) can represent the teacher. Each rank draws its own batches; torch DDP (one bucket,
the model is 0.3 MB) averages the gradients through the method's hook; plain SGD (lr 0.3), the setting of
the error-feedback analyses (Karimireddy et al. 2019); with momentum, DGC adds a momentum correction
that is left out here.

    rows = tradeoff(cluster, steps=100)      # one row per variant in VARIANTS, ranks of a commlib.Cluster
    train("topk", fraction=0.01)             # inside a rank: one variant -> this rank's numbers

Per variant: bytes a rank sends per step (counted by compression.Comm) and the closed form, the test
loss and accuracy at the end, and per step (median) the seconds inside the hook, inside its collectives,
and their difference: the compute cost of compressing and decompressing. On a shared laptop the
seconds are noisy; the bytes and the losses are not (same seed, same result).

context: a zero-argument callable returning a context manager that wraps the training loop on every
rank, e.g. an emulated slow link, `context=lambda: topology.emulate(...)`.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.distributed as dist

from commlib.compression import closed_form
from commlib.compression.comm import Comm, HookState, allreduce_hook
from commlib.compression.powersgd import PowerSGDState, powersgd_hook
from commlib.compression.quantize import QuantState, fp16_hook, quantize_hook
from commlib.compression.sparse import TopKState, topk_hook

VARIANTS = {  # name -> (method, parameters of its hook)
    "none": ("none", {}),
    "fp16": ("fp16", {}),
    "powersgd r=1": ("powersgd", {"rank": 1}),
    "powersgd r=4": ("powersgd", {"rank": 4}),
    "powersgd r=16": ("powersgd", {"rank": 16}),
    "topk 10%": ("topk", {"fraction": 0.1}),
    "topk 10% no EF": ("topk", {"fraction": 0.1, "error_feedback": False}),
    "topk 1%": ("topk", {"fraction": 0.01}),
    "topk 1% no EF": ("topk", {"fraction": 0.01, "error_feedback": False}),
    "int8": ("int8", {}),
}
IN, HIDDEN, CLASSES = 32, 256, 10


def hook_for(method: str, comm: Comm | None = None, **params):
    """-> (state, hook) for a method of closed_form.METHODS; params go to its state (rank=, fraction=, ...)."""
    closed_form.check_method(method)
    if method in ("none", "fp16"):
        if params:
            raise ValueError(f"method {method!r} takes no parameters, got {sorted(params)}")
        return HookState(comm=comm), allreduce_hook if method == "none" else fp16_hook
    if method == "powersgd":
        return PowerSGDState(comm=comm, **params), powersgd_hook
    if method == "topk":
        return TopKState(comm=comm, **params), topk_hook
    return QuantState(method, comm=comm, **params), quantize_hook


def models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """-> (teacher, student), the same on every rank for a seed."""
    torch.manual_seed(seed)
    teacher = torch.nn.Linear(IN, CLASSES)
    student = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                                  torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    return teacher, student


def batch(teacher: torch.nn.Module, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(size, IN, generator=generator)
    with torch.no_grad():
        return x, teacher(x).argmax(1)


def train(method: str = "none", steps: int = 100, seed: int = 0, batch_size: int = 32, lr: float = 0.3,
          momentum: float = 0.0, context=None, algorithm: str = "builtin", **params) -> dict:
    """Inside a rank: train the student with torch DDP and the method's hook -> this rank's numbers."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    teacher, student = models(seed)
    test_x, test_y = batch(teacher, 2048, torch.Generator().manual_seed(seed + 999_983))
    gen = torch.Generator().manual_seed(seed * 1000 + 1 + rank)  # each rank its own batches
    ddp = torch.nn.parallel.DistributedDataParallel(student)
    state, hook = hook_for(method, Comm(algorithm), **params)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
    rows, losses = [], []
    with context() if context is not None else contextlib.nullcontext():
        for _ in range(steps):
            x, y = batch(teacher, batch_size, gen)
            before = (state.comm.bytes_sent, state.hook_seconds, state.comm.seconds, time.perf_counter())
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            after = (state.comm.bytes_sent, state.hook_seconds, state.comm.seconds, time.perf_counter())
            rows.append([b - a for a, b in zip(before, after)])
            losses.append(loss.item())
    with torch.no_grad():
        logits = student(test_x)
    shapes = [tuple(p.shape) for p in student.parameters()]
    median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    closed = {k: v for k, v in params.items() if k in closed_form.PARAMS[method]}
    return {"method": method, "params": params, "steps": steps,
            "bytes_per_step": rows[-1][0],
            "closed_form_bytes": closed_form.bytes_per_rank(method, shapes, dist.get_world_size(), 4, **closed),
            "test_loss": torch.nn.functional.cross_entropy(logits, test_y).item(),
            "test_accuracy": (logits.argmax(1) == test_y).float().mean().item(),
            "train_loss": statistics.fmean(losses[-10:]), "losses": losses,
            "hook_s": median(1), "comm_s": median(2), "overhead_s": statistics.median(r[1] - r[2] for r in rows),
            "step_s": median(3)}


def tradeoff(cluster, variants: dict | None = None, steps: int = 100, seed: int = 0, context=None,
             **train_kw) -> list[dict]:
    """Train every variant on the cluster's ranks -> one row per variant: bytes per step (the busiest rank),
    its closed form, test loss and accuracy, the train-loss curve (mean over ranks), and per step the hook,
    communication and overhead seconds (means over ranks of each rank's median)."""
    rows = []
    for name, (method, params) in (VARIANTS if variants is None else variants).items():
        ranks = cluster.run(train, method, steps=steps, seed=seed, context=context, **train_kw, **params)
        mean = lambda key: statistics.fmean(r[key] for r in ranks)  # noqa: E731
        rows.append({"variant": name, "method": method, "params": params, "world_size": len(ranks), "steps": steps,
                     "bytes_per_step": max(r["bytes_per_step"] for r in ranks),
                     "closed_form_bytes": ranks[0]["closed_form_bytes"],
                     "test_loss": ranks[0]["test_loss"], "test_accuracy": ranks[0]["test_accuracy"],
                     "train_loss": mean("train_loss"),
                     "losses": [statistics.fmean(x) for x in zip(*(r["losses"] for r in ranks))],
                     "hook_s": mean("hook_s"), "comm_s": mean("comm_s"),
                     "overhead_s": mean("overhead_s"), "step_s": mean("step_s")})
    return rows


def crossovers(rows: list[dict], link) -> dict[str, float]:
    """Per variant: the link bandwidth (bytes/s) below which it beats the plain all-reduce of the student's
    gradients on a link with `link`'s latency (closed_form.crossover_bandwidth), its compression time
    taken as its measured overhead minus the plain hook's (rows from tradeoff(), one of them "none")."""
    shapes = [tuple(p.shape) for p in models()[1].parameters()]
    plain = next(r["overhead_s"] for r in rows if r["method"] == "none")
    out = {}
    for r in rows:
        closed = {k: v for k, v in r["params"].items() if k in closed_form.PARAMS[r["method"]]}
        out[r["variant"]] = closed_form.crossover_bandwidth(r["method"], shapes, r["world_size"],
                                                            max(0.0, r["overhead_s"] - plain), link, 4, **closed)
    return out


def table(rows: list[dict]) -> str:
    """The rows as a text table: bytes per step and their ratio to the first row, loss, accuracy, seconds."""
    base = rows[0]["bytes_per_step"] or 1
    lines = [f"{'variant':<16}{'bytes/step':>12}{'ratio':>8}{'test loss':>11}{'accuracy':>10}"
             f"{'overhead ms':>13}{'comm ms':>9}{'step ms':>9}"]
    for r in rows:
        lines.append(f"{r['variant']:<16}{r['bytes_per_step']:>12,.0f}{r['bytes_per_step'] / base:>8.3f}"
                     f"{r['test_loss']:>11.4f}{r['test_accuracy']:>10.3f}{r['overhead_s'] * 1e3:>13.3f}"
                     f"{r['comm_s'] * 1e3:>9.3f}{r['step_s'] * 1e3:>9.3f}")
    return "\n".join(lines)
