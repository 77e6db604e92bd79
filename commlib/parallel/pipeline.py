"""Pipeline parallelism: stages exchange activations and their gradients by point-to-point, GPipe and 1F1B.

A model of L layers is cut into p stages of L/p consecutive layers, one per rank; a batch into m
micro-batches. Stage s receives micro-batch i's activation from s-1, runs its layers, sends the result
to s+1; backward sends the gradient of that activation back to s-1. Two orders of the same work:

    GPipe (Huang et al. 2019)  all m forwards, then all m backwards: holds m micro-batches of activations
    1F1B  (Narayanan et al. 2021, PipeDream-Flush)  p-s-1 warm-up forwards, then one forward, one backward,
          ...: holds at most min(p - s, m) micro-batches on stage s

Both idle each stage for (p-1)(t_f + t_b) of a step that lasts (m + p - 1)(t_f + t_b): the bubble is
(p-1)/(m+p-1) of the step (measure_bubble measures it). Each stage (not the last) sends m activations
and (not the first) m gradients: a middle stage sends 2 m b s h bytes per step.
"""

from __future__ import annotations

import time

import torch

from commlib import _validate as check
from commlib.parallel.comm import Comm

SCHEDULES = ("gpipe", "1f1b")
MAX_STAGES, MAX_MICROBATCHES = 2**10, 2**14  # simulate() walks every (stage, micro-batch): bounded to seconds


def schedule(kind: str, pp: int, microbatches: int, stage: int) -> list[tuple[str, int]]:
    """The order of work on one stage: [("F", i) | ("B", i)] for micro-batches i = 0..m-1."""
    kind = check.choice("kind", kind, SCHEDULES)
    pp = check.integer("pp", pp, 1, MAX_STAGES)
    m = check.integer("microbatches", microbatches, 1, MAX_MICROBATCHES)
    stage = check.integer("stage", stage, 0, pp - 1)
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(pp - stage - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state: one forward, one backward
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(m - warmup, m)]


def simulate(kind: str, pp: int, microbatches: int, forward_s: float = 1.0, backward_s: float = 2.0) -> list:
    """The schedule on ideal stages (every forward forward_s, every backward backward_s, free messages): each
    stage runs its ops in order, F(s, i) once F(s-1, i) is done, B(s, i) once B(s+1, i) is. -> the compute
    events of every stage, as train_step records them: [[(op, i, start, end)] per stage]."""
    forward_s = check.number("forward_s", forward_s, 0, unit="seconds", high=1e9)
    backward_s = check.number("backward_s", backward_s, 0, unit="seconds", high=1e9)
    pp, microbatches = check.integer("pp", pp, 1, MAX_STAGES), check.integer("microbatches", microbatches, 1)
    if pp * microbatches > MAX_MICROBATCHES * 16:
        raise ValueError(f"pp x microbatches must be <= {MAX_MICROBATCHES * 16}, got {pp} x {microbatches}")
    orders = [schedule(kind, pp, microbatches, s) for s in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    events: list[list] = [[] for _ in range(pp)]
    clock, nxt = [0.0] * pp, [0] * pp
    while any(n < len(o) for n, o in zip(nxt, orders)):
        progressed = False
        for s in range(pp):
            if nxt[s] == len(orders[s]):
                continue
            op, i = orders[s][nxt[s]]
            dep = ("F", s - 1, i) if op == "F" and s > 0 else ("B", s + 1, i) if op == "B" and s < pp - 1 else None
            if dep is not None and dep not in done:
                continue
            start = max(clock[s], done.get(dep, 0.0))
            end = start + (forward_s if op == "F" else backward_s)
            done[(op, s, i)], clock[s] = end, end
            events[s].append((op, i, start, end))
            nxt[s] += 1
            progressed = True
        if not progressed:
            raise AssertionError("the schedule deadlocks")  # schedule() never makes one
    return events


def split_stages(model: torch.nn.Sequential, pp: int) -> list[torch.nn.Sequential]:
    """Cut a Sequential into pp stages of equal numbers of nn.Linear layers (each with what follows it)."""
    starts = [i for i, m in enumerate(model) if isinstance(m, torch.nn.Linear)]
    pp = check.integer("pp", pp, 1)
    if len(starts) % pp:
        raise ValueError(f"layers ({len(starts)}) must be divisible by pp={pp}")
    per = len(starts) // pp
    bounds = [starts[k * per] for k in range(pp)] + [len(model)]
    return [torch.nn.Sequential(*list(model)[bounds[k]:bounds[k + 1]]) for k in range(pp)]


def train_step(stage_module: torch.nn.Module, comm: Comm, inputs, targets, loss_fn, kind: str = "1f1b",
               io_shape=None, compute_s: float = 0.0) -> dict:
    """One pipelined forward/backward over len(inputs) micro-batches; gradients accumulate in stage_module.

    inputs: the micro-batches (used by stage 0); targets: their targets (used by the last stage); the loss
    of each micro-batch is divided by m, so the gradients are those of the mean loss over the batch.
    io_shape(i) -> (input shape, output shape) of this stage for micro-batch i (receive buffers).
    compute_s: also sleep compute_s per forward and 2 compute_s per backward, a stage of known cost.
    -> {"peak_live": most micro-batches whose activations this stage held at once, "events": [(op, i,
    start, end)] of compute (time.perf_counter, comparable across ranks of one machine), "loss": sum}."""
    p, s, m = comm.size, comm.rank, len(inputs)
    if m < 1:
        raise ValueError("inputs must hold at least one micro-batch, got none")
    device = next(stage_module.parameters()).device
    live: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    peak, events, sends, loss_total = 0, [], [], 0.0
    for op, i in schedule(kind, p, m, s):
        in_shape, out_shape = io_shape(i)
        if op == "F":
            x = inputs[i] if s == 0 else comm.recv(torch.empty(in_shape, device=device), s - 1)
            x = x.detach().requires_grad_(s > 0)
            t0 = time.perf_counter()
            y = stage_module(x)
            if s == p - 1:
                y = loss_fn(y, targets[i]) / m
                loss_total += y.item()
            time.sleep(compute_s)
            events.append(("F", i, t0, time.perf_counter()))
            live[i] = (x, y)
            peak = max(peak, len(live))
            if s < p - 1:
                out = y.detach().contiguous()
                sends.append((comm.isend(out, s + 1, kind="send_activation"), out))
        else:
            x, y = live.pop(i)
            grad = None if s == p - 1 else comm.recv(torch.empty(out_shape, device=device), s + 1)
            t0 = time.perf_counter()
            y.backward(grad)
            time.sleep(2 * compute_s)
            events.append(("B", i, t0, time.perf_counter()))
            if s > 0:
                g = x.grad.contiguous()
                sends.append((comm.isend(g, s - 1, kind="send_grad"), g))
    for work, _ in sends:
        work.wait()
    return {"peak_live": peak, "events": events, "loss": loss_total}


def bubble(events_by_rank) -> dict:
    """From every rank's compute events: step_s (first start to last end, all ranks), busy_s per rank,
    and the measured bubble, 1 - mean(busy) / step."""
    start = min(e[2] for evs in events_by_rank for e in evs)
    end = max(e[3] for evs in events_by_rank for e in evs)
    busy = [sum(e[3] - e[2] for e in evs) for evs in events_by_rank]
    step = end - start
    return {"step_s": step, "busy_s": busy, "bubble": 1 - sum(busy) / len(busy) / step}


def measure_bubble(microbatches: int, kind: str = "1f1b", hidden: int = 64, microbatch_size: int = 8,
                   compute_s: float = 0.0, layers_per_stage: int = 2, steps: int = 3, comm: Comm | None = None,
                   all_steps: bool = False):
    """Inside ranks: run `steps` pipelined steps of an MLP on all ranks (p = world size) and return this
    rank's compute events of the last one (pass every rank's to bubble()); all_steps: a list of every step's
    events. compute_s > 0 makes each
    forward last compute_s more (backward 2 compute_s): a stage of known cost, so that a laptop with fewer
    cores than ranks measures the schedule rather than its own contention."""
    comm = comm or Comm()
    torch.manual_seed(comm.rank)
    layers = []
    for _ in range(layers_per_stage):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.Tanh()]
    stage = torch.nn.Sequential(*layers)
    inputs = [torch.randn(microbatch_size, hidden) for _ in range(microbatches)]
    shape = (microbatch_size, hidden)
    each = []
    for _ in range(steps):
        torch.distributed.barrier(group=comm.group)
        each.append(train_step(stage, comm, inputs, inputs, torch.nn.functional.mse_loss, kind,
                               io_shape=lambda i: (shape, shape), compute_s=compute_s)["events"])
    return each if all_steps else each[-1]


def bubble_on(cluster, microbatches: int, kind: str = "1f1b", repeats: int = 1, **kwargs) -> dict:
    """From the notebook: measure_bubble on every rank of a commlib Cluster (p = its world size);
    -> bubble() of the events plus "theory", (p-1)/(m+p-1), and the events themselves. repeats > 1: that many
    measured steps after one warm-up, and the step of median bubble (one late wake-up does not decide it)."""
    repeats = check.integer("repeats", repeats, 1, 100)
    if repeats == 1:
        events = cluster.run(measure_bubble, microbatches, kind, **kwargs)
    else:
        kwargs = kwargs | {"steps": repeats + 1, "all_steps": True}
        per_rank = cluster.run(measure_bubble, microbatches, kind, **kwargs)
        steps = sorted((bubble([r[i] for r in per_rank])["bubble"], i) for i in range(1, repeats + 1))
        events = [r[steps[(repeats - 1) // 2][1]] for r in per_rank]
    p = cluster.world_size
    return {**bubble(events), "theory": (p - 1) / (microbatches + p - 1), "events": events, "repeats": repeats}
