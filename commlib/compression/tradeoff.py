"""The trade-off, measured: a small task trained on p ranks with each compression method.

Task, generated, with a known optimum: inputs x ~ N(0, I_32), labels the argmax of a fixed random
linear teacher (32 -> 10): linearly separable, so 100% test accuracy is reachable, and the student
(32 -> 256 -> 256 -> 10, ReLU) can represent the teacher. Each rank draws its own batches; torch DDP (one bucket,
the model is 0.3 MB) averages the gradients through the method's hook; plain SGD (lr 0.3), the setting of
the error-feedback analyses (Karimireddy et al. 2019); with momentum, DGC adds a momentum correction
that is left out here.

    rows = tradeoff(cluster, steps=100)      # one row per variant in VARIANTS, ranks of a commlib.Cluster
    train("topk", fraction=0.01)             # inside a rank: one variant -> this rank's numbers

Per variant: bytes a rank sends per step (counted by compression.HookComm) and the closed form, the test
loss and accuracy at the end, and per step (median) the seconds inside the hook, inside its collectives,
and their difference: the compute cost of compressing and decompressing. On a shared laptop the
seconds are noisy; the bytes and the losses are not (same seed, same result).

context: a zero-argument callable returning a context manager that wraps the training loop on every
rank, e.g. an emulated slow link, `context=lambda: network.emulate(...)`; with algorithm="ring" the hooks
send through commlib's point-to-point layer, which emulate() paces (torch's built-in collectives it does not).

    rows = link_sweep(cluster, [10e6, 100e6])   # the same on loopback and on emulated NICs of 10 and 100 MB/s
    measured_crossovers(rows)                   # where each variant's step time meets the plain all-reduce's
    crossovers(on_link(rows), loopback_link(rows, latency=1e-4))   # where the alpha-beta model says they meet
    load_sweep()                                # the committed longer sweep (benchmarks/compression_tradeoff.py)
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from commlib import columns, cost, network
from commlib.compression import closed_form
from commlib.compression.comm import HookComm, HookState, allreduce_hook
from commlib.compression.powersgd import PowerSGDState, powersgd_hook
from commlib.compression.quantization import QuantState, fp16_hook, quantize_hook
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


def hook_for(method: str, comm: HookComm | None = None, **params):
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
    """Inside a rank: train the student with torch DDP and the method's hook -> this rank's numbers.
    Besides bytes, losses and seconds: inter_node_bytes_per_step (what this rank's messages sent across
    emulated node boundaries, from their trace; None without emulate()), paced_bytes_per_step (what the
    emulated network delivered to this rank; None without it), updated_fraction (of the student's weights,
    those that moved from their initial value)."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    teacher, student = models(seed)
    initial = [p.detach().clone() for p in student.parameters()]
    test_x, test_y = batch(teacher, 2048, torch.Generator().manual_seed(seed + 999_983))
    gen = torch.Generator().manual_seed(seed * 1000 + 1 + rank)  # each rank its own batches
    ddp = torch.nn.parallel.DistributedDataParallel(student)
    state, hook = hook_for(method, HookComm(algorithm), **params)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
    rows, losses = [], []
    with context() if context is not None else contextlib.nullcontext() as net:
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
        paced = getattr(net, "log", None)  # network.emulate() yields an Emulator: its paced receives
    events = state.comm.trace.events
    nodes_known = any(e.inter_node is not None for e in events)  # under emulate(), with algorithm="ring"
    with torch.no_grad():
        logits = student(test_x)
        moved = sum(int((p != p0).sum()) for p, p0 in zip(student.parameters(), initial))
    shapes = [tuple(p.shape) for p in student.parameters()]
    median = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    closed = {k: v for k, v in params.items() if k in closed_form.PARAMS[method]}
    return {"method": method, "params": params, "steps": steps,
            "bytes_per_step": rows[-1][0],
            "closed_form_bytes": closed_form.bytes_per_rank(method, shapes, dist.get_world_size(), 4, **closed),
            "inter_node_bytes_per_step": sum(e.nbytes for e in events if e.inter_node) / steps
            if nodes_known else None,
            "paced_bytes_per_step": None if paced is None else sum(m.nbytes for m in paced) / steps,
            "updated_fraction": moved / sum(p.numel() for p in initial),
            "test_loss": torch.nn.functional.cross_entropy(logits, test_y).item(),
            "test_accuracy": (logits.argmax(1) == test_y).float().mean().item(),
            "train_loss": statistics.fmean(losses[-10:]), "losses": losses,
            "hook_s": median(1), "comm_s": median(2), "overhead_s": statistics.median(r[1] - r[2] for r in rows),
            "step_s": median(3)}


def tradeoff(cluster, variants: dict | None = None, steps: int = 100, seed: int = 0, context=None,
             **train_kw) -> list[dict]:
    """Train every variant on the cluster's ranks -> one row per variant: bytes per step (the busiest rank),
    its closed form, the busiest rank's inter-node and paced bytes per step (None without emulate()), test
    loss and accuracy, the fraction of weights updated, the train-loss curve (mean over ranks), and per step
    the hook, communication and overhead seconds (means over ranks of each rank's median)."""
    rows = []
    for name, (method, params) in (VARIANTS if variants is None else variants).items():
        ranks = cluster.run(train, method, steps=steps, seed=seed, context=context, **train_kw, **params)
        mean = lambda key: statistics.fmean(r[key] for r in ranks)  # noqa: E731
        rows.append({"variant": name, "method": method, "params": params, "world_size": len(ranks), "steps": steps,
                     "bytes_per_step": max(r["bytes_per_step"] for r in ranks),
                     "closed_form_bytes": ranks[0]["closed_form_bytes"],
                     **{k: None if ranks[0][k] is None else max(r[k] for r in ranks)
                        for k in ("inter_node_bytes_per_step", "paced_bytes_per_step")},
                     "updated_fraction": ranks[0]["updated_fraction"],
                     "test_loss": ranks[0]["test_loss"], "test_accuracy": ranks[0]["test_accuracy"],
                     "train_loss": mean("train_loss"),
                     "losses": [statistics.fmean(x) for x in zip(*(r["losses"] for r in ranks))],
                     "hook_s": mean("hook_s"), "comm_s": mean("comm_s"),
                     "overhead_s": mean("overhead_s"), "step_s": mean("step_s")})
    return rows


def crossovers(rows: list[dict], link) -> dict[str, float]:
    """Per variant: the link bandwidth (bytes/s) below which it beats the plain all-reduce of the student's
    gradients on a link with `link`'s latencies (closed_form.crossover_bandwidth), its compression time
    taken as its measured overhead minus the plain hook's. rows: one per variant, one of them "none"
    (from tradeoff(), or on_link(link_sweep(...)))."""
    shapes = [tuple(p.shape) for p in models()[1].parameters()]
    plain = next(r["overhead_s"] for r in rows if r["method"] == "none")
    out = {}
    for r in rows:
        out[r["variant"]] = closed_form.crossover_bandwidth(r["method"], shapes, r["world_size"],
                                                            max(0.0, r["overhead_s"] - plain), link, 4, **_closed(r))
    return out


def _closed(row: dict) -> dict:
    """The row's parameters that change its bytes (not error_feedback)."""
    return {k: v for k, v in row["params"].items() if k in closed_form.PARAMS[row["method"]]}


# ------------------------------------------------------------------------ slow links: emulated, swept, modelled
def link_sweep(cluster, bandwidths, variants: dict | None = None, steps: int = 40, seed: int = 0,
               gpus_per_node: int = 2, latency: float = 1e-4, **train_kw) -> list[dict]:
    """tradeoff() with commlib's ring (algorithm="ring") on plain loopback, then on emulated nodes of
    gpus_per_node ranks whose one NIC each has `bandwidth` bytes/s per direction and `latency` s
    (network.emulate), for each of bandwidths -> its rows, each with "bandwidth" (None: loopback)."""
    rows = []
    for bw in [None, *bandwidths]:
        context = None if bw is None else functools.partial(network.emulate, gpus_per_node, bw, latency)
        for r in tradeoff(cluster, variants, steps, seed, context=context, algorithm="ring", **train_kw):
            rows.append({**r, "bandwidth": bw, "latency": None if bw is None else latency,
                         "gpus_per_node": None if bw is None else gpus_per_node})
    return rows


def on_link(rows: list[dict], bandwidth=None) -> list[dict]:
    """The rows of link_sweep() taken at one bandwidth (None: loopback)."""
    return [r for r in rows if r.get("bandwidth") == bandwidth]


def _path(row: dict) -> tuple[int, float, float]:
    """(collective calls, messages, bytes) on the busiest rank's path for one step of the row's variant."""
    shapes = [tuple(p.shape) for p in models()[1].parameters()]
    calls = closed_form.collectives(row["method"], shapes, row["world_size"], 4, **_closed(row))
    paths = [cost.critical_path(op, nb, row["world_size"]) for op, nb in calls]
    return len(calls), sum(m for m, _, _ in paths), sum(b for _, b, _ in paths)


def loopback_link(rows: list[dict], latency: float = 0.0, bandwidth: float = 1e9) -> cost.Link:
    """commlib's ring on this machine's loopback as a link, fitted to the loopback rows of link_sweep():
    comm_s = calls c + messages a + bytes b (least squares, each >= 0), -> Link(bandwidth, a + latency, c):
    the laptop's cost per call and per message, plus an emulated NIC's latency and bandwidth."""
    fast = on_link(rows) if any("bandwidth" in r for r in rows) else rows
    if len(fast) < 3:
        raise ValueError(f"loopback_link needs the loopback rows of at least 3 variants, got {len(fast)}")
    a = np.array([_path(r) for r in fast], dtype=float)
    t = np.array([r["comm_s"] for r in fast])
    best = (math.inf, np.zeros(3))
    for keep in itertools.product((True, False), repeat=3):  # non-negative least squares by trying every support
        cols = [i for i in range(3) if keep[i]]
        x = np.zeros(3)
        if cols:
            x[cols] = np.linalg.lstsq(a[:, cols], t, rcond=None)[0]
        err = float(np.sum((a @ x - t) ** 2))
        if (x >= 0).all() and err < best[0]:
            best = (err, x)
    c, alpha, _ = best[1]
    return cost.Link("emulated NIC + this machine's loopback", float(bandwidth), float(alpha) + float(latency),
                     f"fitted to {len(fast)} loopback runs: {c * 1e3:.3g} ms a call, {alpha * 1e3:.3g} ms a message, "
                     f"plus {latency * 1e3:g} ms of emulated latency", float(c))


def measured_crossovers(rows: list[dict]) -> dict[str, dict]:
    """Per variant of link_sweep() rows: where its step time meets the plain all-reduce's. -> {"low", "high":
    the measured bandwidths around the first change of sign, from the slowest up (loopback counts as inf),
    "bandwidth": interpolated linearly in log bandwidth between them (0.0: slower at every bandwidth measured;
    inf: faster at every one, loopback included; None: the change lies between the fastest emulated link and
    loopback)}."""
    bw = lambda r: math.inf if r["bandwidth"] is None else r["bandwidth"]  # noqa: E731
    plain = {bw(r): r["step_s"] for r in rows if r["method"] == "none"}
    out = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        diff = sorted((bw(r), r["step_s"] - plain[bw(r)]) for r in rows if r["variant"] == name)
        if name == "none" or diff[0][1] >= 0:
            out[name] = {"low": 0.0, "high": diff[0][0], "bandwidth": 0.0}
            continue
        wins = list(itertools.takewhile(lambda d: d[1] < 0, diff))
        if len(wins) == len(diff):
            out[name] = {"low": diff[-1][0], "high": math.inf, "bandwidth": math.inf}
            continue
        (b0, d0), (b1, d1) = wins[-1], diff[len(wins)]
        at = None if math.isinf(b1) else math.exp(math.log(b0) + (math.log(b1) - math.log(b0)) * d0 / (d0 - d1))
        out[name] = {"low": b0, "high": b1, "bandwidth": at}
    return out


SWEEP = Path(__file__).resolve().parents[2] / "benchmarks" / "compression_tradeoff.json"


def load_sweep(path=None) -> dict:
    """The committed sweep of benchmarks/compression_tradeoff.py (its docstring describes the keys)."""
    path = Path(SWEEP if path is None else path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run benchmarks/compression_tradeoff.py from a clone of the course")
    with open(path) as f:
        return json.load(f)


def link_label(bandwidth) -> str:
    """A link_sweep() bandwidth as text: "loopback" for None, else MB/s (1e6 bytes/s)."""
    return "loopback" if bandwidth is None else f"{bandwidth / 1e6:g} MB/s"


def table(rows: list[dict]) -> str:
    """The rows as a text table: bytes per step and their ratio to the first row, loss, accuracy, seconds
    (and the link, for rows of link_sweep())."""
    base = rows[0]["bytes_per_step"] or 1
    link = any("bandwidth" in r for r in rows)
    head = ["variant", "bytes/step", "ratio", "test loss", "accuracy", "overhead ms", "comm ms", "step ms"]
    cells = [head] + [[r["variant"], f"{r['bytes_per_step']:,.0f}", f"{r['bytes_per_step'] / base:.3f}",
                       f"{r['test_loss']:.4f}", f"{r['test_accuracy']:.3f}", f"{r['overhead_s'] * 1e3:.3f}",
                       f"{r['comm_s'] * 1e3:.3f}", f"{r['step_s'] * 1e3:.3f}"] for r in rows]
    widths, align = [16, 12, 8, 11, 10, 13, 9, 9], "<>>>>>>>"
    if link:
        cells = [[c] + row for c, row in zip(["link"] + [link_label(r.get("bandwidth")) for r in rows], cells)]
        widths, align = [11] + widths, "<" + align
    lines = columns.fit(cells, widths, align)  # widths grow with the values: no column runs into the next
    return "\n".join(lines)
