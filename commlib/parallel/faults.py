"""The fault matrix's programs and faults (issues 31 and 42), run inside ranks: the course's multi-rank programs,
and the faults people actually hit, each injected at one rank, the culprit. tests/test_cluster_faults.py holds the
diagnosis to them; benchmarks/fault_diagnosis.py counts how often commlib and torch's analyser name the culprit.

    PROGRAMS   name -> a program (DDP, FSDP2, a 2x2 mesh, TP, a 1F1B pipeline, context parallel, experts)
    fault(kind, culprit)    issue 31's: hang, raise, kill, size, op (broadcast for all_reduce), p2p (wrong source)
    fault42(kind, culprit)  issue 42's: kill_in_mesh, skip_<program>, extra, destroy, root, tag, reduce_op
    KINDS, KINDS_42         the diagnosis kind each fault must give
"""

from __future__ import annotations

import os
import signal
import threading
import time

WORLD = 4


def ddp():
    import torch

    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)))
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()


def fsdp2():
    import torch

    from commlib.parallel import zero

    model = zero.torch_fsdp2(zero.mlp([16, 32, 8]))
    for _ in range(2):
        model(torch.randn(4, 16)).sum().backward()


def mesh(steps: int = 1):
    from commlib.parallel import live

    live.mesh_training(2, 2, steps=steps)


def tensor_parallel():
    from commlib.parallel import live

    live.tensor_parallel_block(2, impl="torch")


def pipeline():
    from commlib.parallel import live

    live.pipelined(WORLD, "1f1b", 4)


def context_parallel():
    from commlib.parallel import live

    live.context_parallel_attention(WORLD)


def experts():
    from commlib.parallel import live

    live.expert_parallel(WORLD, 2, impl="torch")


PROGRAMS = {f.__name__: f for f in (ddp, fsdp2, mesh, tensor_parallel, pipeline, context_parallel, experts)}
# torch 2.13 (CPU, Gloo): constructing DistributedDataParallel under TORCH_DISTRIBUTED_DEBUG=DETAIL kills the
# process with SIGSEGV, with or without commlib (two mp.spawn processes and a Linear do it); DDP runs without debug.
NO_DEBUG = {"ddp"}


# ------------------------------------------------------------------- issue 31's faults, each at rank `culprit`
KINDS = {"hang": "missing", "size": "mismatch", "op": "mismatch", "p2p": "p2p", "raise": "missing", "kill": "missing"}


def fault(kind, culprit, variant=0):
    import torch
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    t = torch.ones(4)
    mine = rank == culprit
    if kind == "hang" and mine:
        time.sleep(600)                        # killed with the rank at the timeout
    if kind == "raise" and mine:
        raise RuntimeError("injected: this rank's data loader failed")
    if kind == "kill" and mine:
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "size" and mine:
        t = torch.ones(8)
    if kind == "op" and mine:
        dist.broadcast(t, src=0)
    elif kind == "p2p":
        out = torch.empty(4)
        src = (rank + 1) % p if mine else (rank - 1) % p   # the culprit receives from the wrong neighbour
        if variant == 0:
            works = [dist.isend(t, (rank + 1) % p), dist.irecv(out, src)]
        else:
            works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, out, src), dist.P2POp(dist.isend, t, (rank + 1) % p)])
        for w in works:
            w.wait()
        return rank
    else:
        dist.all_reduce(t)
    return rank


# ------------------------------------------------------------------- issue 42's faults, each at rank `culprit`
KINDS_42 = {"kill_in_mesh": "missing", "skip_mesh": "missing", "skip_pipeline": "missing",
            "skip_context_parallel": "missing", "extra": "mismatch", "destroy": "missing", "root": "mismatch",
            "tag": "p2p", "reduce_op": "mismatch"}
# (program run before, fault, debug settings it is diagnosed under). The reduce op, and a root after context
# parallel, complete with wrong numbers and no error when debug is off (Gloo checks neither, the records hold
# neither): with debug=True commlib's call check (cluster/call_check.py) catches them.
ISSUE_42 = [(None, "kill_in_mesh", (False, True)), (None, "skip_mesh", (False, True)),
            (None, "skip_pipeline", (False, True)), (None, "skip_context_parallel", (False, True)),
            ("fsdp2", "extra", (False, True)), (None, "destroy", (False, True)), ("mesh", "root", (False, True)),
            ("context_parallel", "root", (True,)), (None, "tag", (False, True)), (None, "reduce_op", (True,))]


def fault42(kind, culprit):
    import torch
    import torch.distributed as dist

    rank, p = dist.get_rank(), dist.get_world_size()
    mine, t = rank == culprit, torch.ones(4)
    if kind == "kill_in_mesh":
        if mine:
            threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGKILL)).start()
        mesh(steps=3)
    elif kind.startswith("skip_"):
        if not mine:
            PROGRAMS[kind[5:]]()              # rank `culprit` takes another branch and skips the whole program
    elif kind == "extra":
        dist.all_reduce(t)
        if mine:
            dist.all_reduce(t)                # an extra logging collective on one rank
    elif kind == "destroy":
        if mine:
            dist.destroy_process_group()      # teardown early on one rank
            return rank
        dist.all_reduce(t)
    elif kind == "root":
        dist.broadcast(t, src=(1 if culprit == 0 else culprit) if mine else 0)  # a root from a rank-dependent value
    elif kind == "tag":
        out = torch.empty(4)
        works = [dist.isend(t, (rank + 1) % p, tag=7 if mine else 0), dist.irecv(out, (rank - 1) % p)]
        for w in works:
            w.wait()
    elif kind == "reduce_op":
        dist.all_reduce(t, op=dist.ReduceOp.MAX if mine else dist.ReduceOp.SUM)  # Gloo: 3.0 everywhere, not 4
    return rank


# ------------------------------------------------------------------- benchmarks/fault_diagnosis.py's result
def load_benchmark(path=None) -> dict:
    """The committed run of benchmarks/fault_diagnosis.py: cases, the correct counts and the per-case rows."""
    import json
    from pathlib import Path

    path = Path(path or Path(__file__).resolve().parents[2] / "benchmarks" / "fault_diagnosis.json")
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run benchmarks/fault_diagnosis.py from a clone of the course")
    with open(path) as f:
        return json.load(f)


def verdicts(result: dict) -> dict:
    """{reader: {verdict: cases}} counted from the rows (readers: commlib, commlib_files, torch_analyser)."""
    from collections import Counter

    return {k: dict(Counter(r[k]["verdict"] for r in result["rows"]))
            for k in ("commlib", "commlib_files", "torch_analyser")}


def figures(result: dict) -> str:
    """The committed counts in one sentence (the README states it; a test holds it equal to the JSON)."""
    def part(run: dict, label: str) -> str:
        n = run["cases"]
        return (f"{label}, commlib names the culprit alone in {run['commlib_correct']} of {n} cases "
                f"({run['commlib_correct'] / n:.0%}) and torch's analyser in {run['torch_analyser_correct']} "
                f"({run['torch_analyser_correct'] / n:.0%})")
    said = part(result, "with debug on")
    if "debug_off" in result:
        said += "; " + part(result["debug_off"], "with debug off")
    return said
