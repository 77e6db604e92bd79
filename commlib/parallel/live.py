"""The chapter's live runs, inside ranks: each parallelism next to its single-process reference.

Every function runs on every rank of a Cluster (or under torchrun) and returns plain data: the largest
difference to the reference, the bytes this rank sent per kind (Comm.sent), and what chapter 7 shows
(the order of the collectives, per-rank shapes, memory, live activations). The tests of commlib.parallel
run the same functions.

    start_broadcast        what DDP sends when it starts                        broadcast
    sharded_training       DDP and ZeRO-1/2/3 with Adam, a few steps            all-reduce / reduce-scatter, all-gather
    tensor_parallel_block  a Megatron transformer layer, TP or SP               all-reduce / all-gather, reduce-scatter
    pipelined              GPipe or 1F1B over point-to-point                    send / recv
    expert_parallel        a top-k MoE layer, experts spread over the ranks     all-to-all
    context_parallel_attention  ring attention or all-gathered K/V (chapter 8)  send / recv, all-gather
    collective_matmul      all-gather + matmul in p overlapped steps (async TP)  send / recv
    mesh_training          FSDP2 x TP on a 2-D DeviceMesh, counted by CommDebugMode (commlib.parallel.mesh)
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

from commlib import _validate as check
from commlib import plan
from commlib.parallel import collective_matmul as cmm
from commlib.parallel import context as cpx
from commlib.parallel import experts as ex
from commlib.parallel import mesh as mh
from commlib.parallel import pipeline as pl
from commlib.parallel import sizes as sz
from commlib.parallel import tensor as tp
from commlib.parallel import zero
from commlib.parallel.collective_matmul import RingPass
from commlib.parallel.comm import Comm

SIZES = [16, 32, 32, 8]     # the ZeRO toy MLP: every unit's weight + bias count divides by 4
BATCH, STEPS, LR = 12, 3, 1e-2


def _size(name: str, value) -> int:
    """A group size: an int in [1, world size] dividing the world size (groups of `value` ranks tile it)."""
    p = dist.get_world_size()
    value = check.integer(name, value, 1, p)
    if p % value:
        raise ValueError(f"{name} must divide the world size ({p}), got {value}")
    return value


def _groups(size: int) -> list[list[int]]:
    return [list(range(i, i + size)) for i in range(0, dist.get_world_size(), size)]


def _group_size(name: str, size) -> int:
    """A group size that tiles the world: an int >= 1 dividing it (ValueError naming the parameter otherwise)."""
    return sz.group(name, size, dist.get_world_size())


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# ------------------------------------------------------------------------------ start-up broadcast
def start_broadcast(impl: str = "commlib") -> dict:
    """Every rank initialises the MLP from its own seed, then broadcast_parameters gives everyone rank 0's.
    -> first weight before and after, bytes broadcast, bytes this rank sent, largest difference to rank 0's."""
    torch.manual_seed(dist.get_rank())
    model = zero.mlp(SIZES, seed=dist.get_rank())
    before = model[0].weight[0, 0].item()
    comm = Comm(impl=impl)
    nbytes = zero.broadcast_parameters(model, comm)
    mine = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    rank0 = torch.cat([p.detach().reshape(-1) for p in zero.mlp(SIZES, seed=0).parameters()])
    return {"before": before, "after": model[0].weight[0, 0].item(), "nbytes": nbytes,
            "sent": comm.sent.get("broadcast", 0), "err": _err(mine, rank0)}


# ---------------------------------------------------------------------------------- ZeRO / FSDP
def batches(steps: int = STEPS, batch: int = BATCH, sizes=SIZES) -> list:
    """The same (x, y) batches on every rank and in the reference: rank r of p trains on rows r*batch/p..."""
    torch.manual_seed(123)
    return [(torch.randn(batch, sizes[0]), torch.randn(batch, sizes[-1])) for _ in range(steps)]


def sharded_training(stage: int, prefetch: bool = False, reference=None, partition=None, impl: str = "commlib",
                     sizes=SIZES, steps: int = STEPS, batch: int = BATCH, lr: float = LR) -> dict:
    """`steps` Adam steps of ShardedDataParallel (stage 0-3) on this rank's rows of batches(); reference: the
    parameters of the one-process run (zero.reference_adam) to compare with. -> {p, rank, err, sent, memory
    (between backward and step), phases: the collectives of the last step's forward, backward and step,
    [(kind, bytes)] each}."""
    steps, batch = check.integer("steps", steps, 1, sz.MAX_STEPS), check.integer("batch", batch, 1, sz.MAX_DIM)
    sizes = [check.integer(f"sizes[{i}]", n, 1, sz.MAX_DIM) for i, n in enumerate(check.listed("sizes", sizes))]
    if len(sizes) < 2:
        raise ValueError(f"sizes must list at least 2 layer widths (input, ..., output), got {sizes}")
    lr = check.number("lr", lr, 0, strict=True, high=1e3)
    prefetch = sz.flag("prefetch", prefetch)
    comm = Comm.split(partition, impl) if partition else Comm(impl=impl)
    if batch % comm.size:
        raise ValueError(f"batch must be divisible by the data-parallel size ({comm.size}), got {batch}")
    sdp = zero.ShardedDataParallel(zero.mlp(sizes), comm, stage, lr=lr, prefetch=prefetch)
    rows = batch // comm.size
    lo = comm.rank * rows
    for x, y in batches(steps, batch, sizes):
        marks = [len(comm.log)]
        out = sdp(x[lo:lo + rows])
        marks.append(len(comm.log))
        F.mse_loss(out, y[lo:lo + rows]).backward()
        marks.append(len(comm.log))
        memory = sdp.memory()
        sdp.step()
        marks.append(len(comm.log))
    phases = {name: comm.log[a:b] for name, a, b in zip(("forward", "backward", "step"), marks, marks[1:])}
    result = {"p": comm.size, "rank": comm.rank, "sent": dict(comm.sent), "memory": memory, "phases": phases}
    if reference is not None:
        result["err"] = max(_err(a, b) for a, b in zip(sdp.parameters(), reference))
    return result


def phase_counts(phases: dict) -> dict:
    """{phase: "3 all_gather + 3 reduce_scatter"} from sharded_training's phases ("-" for none)."""
    out = {}
    for name, calls in phases.items():
        kinds: dict[str, int] = {}
        for kind, _ in calls:
            kinds[kind] = kinds.get(kind, 0) + 1
        out[name] = " + ".join(f"{n} {k}" for k, n in kinds.items()) or "-"
    return out


# ------------------------------------------------------------------------------ tensor parallel
def tensor_parallel_block(t: int, sequence_parallel: bool = False, impl: str = "commlib", seq: int = 8,
                          batch: int = 2, hidden: int = 16, heads: int = 4) -> dict:
    """A transformer layer on [seq, batch, hidden] split over groups of t ranks, forward and backward, next to
    the dense layer. -> {errors: output, input grad, param grads; sent; shapes: this rank's weights; x_shape}."""
    t = _size("t", t)
    seq, batch, hidden, heads = sz.dims(seq=seq, batch=batch, hidden=hidden, heads=heads)
    sequence_parallel = sz.flag("sequence_parallel", sequence_parallel)
    sz.divisible("hidden", hidden, "heads", heads)
    sz.at_least("heads", heads, "t", t)  # each rank holds whole heads
    sz.divisible("heads", heads, "t", t)
    if sequence_parallel:
        sz.divisible("seq", seq, "t", t)
    sz.elements("the MLP's activations", seq=seq, batch=batch, ffn=4 * hidden)
    comm = Comm.split(_groups(t), impl) if t < dist.get_world_size() else Comm(impl=impl)
    dense = tp.Block(hidden, heads, seed=0)
    par = tp.ParallelBlock(dense, comm, sequence_parallel=sequence_parallel)
    torch.manual_seed(1)
    x, gy = torch.randn(seq, batch, hidden), torch.randn(seq, batch, hidden)
    xd = x.clone().requires_grad_()
    yd = dense(xd)
    (yd * gy).sum().backward()
    part = (lambda v: tp.split_sequence(v, comm)) if sequence_parallel else (lambda v: v)
    xl = part(x).clone().requires_grad_()
    y = par(xl)
    (y * part(gy)).sum().backward()
    par.sync_replicated_grads()
    errors = {"output": _err(y, part(yd)), "input grad": _err(xl.grad, part(xd.grad)),
              "param grads": max(_err(loc.grad, cut(den.grad)) for loc, den, cut in par.pairs())}
    shapes = {name: tuple(getattr(par, name).weight.shape) for name in ("qkv", "proj", "fc1", "fc2")}
    return {"errors": errors, "sent": dict(comm.sent), "shapes": shapes, "x_shape": tuple(xl.shape)}


# ------------------------------------------------------------------------------------- pipeline
def pipelined(pp: int, kind: str, microbatches: int, rows: int = 4, hidden: int = 16, layers: int = 4) -> dict:
    """An MLP of `layers` Linear layers cut into pp stages, one pipelined step (GPipe or 1F1B) over m
    micro-batches of `rows` rows, next to one process on the whole batch. -> {stage, err (largest gradient
    difference), peak_live (micro-batches held at once), events, sent}."""
    pp, microbatches = _size("pp", pp), check.integer("microbatches", microbatches, 1, pl.MAX_MICROBATCHES)
    kind = check.choice("kind", kind, pl.SCHEDULES)
    rows, hidden, layers = sz.dims(rows=rows, hidden=hidden, layers=layers)
    sz.divisible("layers", layers, "pp", pp)
    sz.elements("the batch", rows=rows, microbatches=microbatches, hidden=hidden)
    comm = Comm.split(_groups(pp)) if pp < dist.get_world_size() else Comm()
    torch.manual_seed(5)
    x, y = torch.randn(rows * microbatches, hidden), torch.randn(rows * microbatches, hidden)
    ref = zero.mlp([hidden] * (layers + 1))
    F.mse_loss(ref(x), y).backward()
    stage = pl.split_stages(zero.mlp([hidden] * (layers + 1)), pp)[comm.rank]
    ref_stage = pl.split_stages(ref, pp)[comm.rank]
    shape = (rows, hidden)
    out = pl.train_step(stage, comm, list(x.chunk(microbatches)), list(y.chunk(microbatches)), F.mse_loss, kind,
                        io_shape=lambda i: (shape, shape))
    err = max(_err(a.grad, b.grad) for a, b in zip(stage.parameters(), ref_stage.parameters()))
    return {"stage": comm.rank, "err": err, "peak_live": out["peak_live"], "events": out["events"],
            "sent": dict(comm.sent)}


# ------------------------------------------------------------------------------------- experts
def expert_parallel(ep: int, topk: int, impl: str = "commlib", imbalance=None, tokens: int = 12, hidden: int = 8,
                    experts: int = 8) -> dict:
    """A top-k MoE layer whose experts are spread over groups of ep ranks, each rank bringing `tokens` tokens,
    next to the one-process layer on all of them; imbalance: skewed_routing's (rank 0's experts draw that
    many times the balanced traffic), None: the router decides. -> {errors, sent, received: token copies
    this rank's experts processed}."""
    ep = _size("ep", ep)
    tokens, hidden, experts = sz.dims(tokens=tokens, hidden=hidden, experts=experts)
    topk = check.integer("topk", topk, 1, experts)
    sz.divisible("experts", experts, "ep", ep)
    if imbalance is not None:
        check.number("imbalance", imbalance, 1, high=ep)
    sz.elements("the routed tokens", ep=ep, tokens=tokens, topk=topk, hidden=hidden)
    comm = Comm.split(_groups(ep), impl) if ep < dist.get_world_size() else Comm(impl=impl)
    dense = ex.MoE(hidden, experts, topk, ffn=16, seed=0)
    par = ex.ExpertParallelMoE(dense, comm)
    torch.manual_seed(3)
    x, g = torch.randn(ep, tokens, hidden), torch.randn(ep, tokens, hidden)   # every group rank's tokens
    idx = None
    if imbalance is not None:
        idx = torch.stack([ex.skewed_routing(tokens, topk, experts, ep, r, imbalance) for r in range(ep)])
    xd = x.reshape(-1, hidden).clone().requires_grad_()
    yd = dense(xd, None if idx is None else idx.reshape(-1, topk))
    (yd * g.reshape(-1, hidden)).sum().backward()
    r = comm.rank
    xl = x[r].clone().requires_grad_()
    y = par(xl, None if idx is None else idx[r])
    (y * g[r]).sum().backward()
    mine = slice(r * tokens, (r + 1) * tokens)
    grad = lambda p: p.grad if p.grad is not None else torch.zeros_like(p)  # noqa: E731  (an expert no token picked)
    errors = {"output": _err(y, yd[mine]), "input grad": _err(xl.grad, xd.grad[mine]),
              "expert grads": max(_err(grad(a), grad(b)) for a, b in par.pairs(dense))}
    picks = (idx.reshape(-1) if idx is not None else dense.route(x.reshape(-1, hidden))[0].reshape(-1))
    per = experts // ep
    received = int(((picks >= r * per) & (picks < (r + 1) * per)).sum())
    return {"errors": errors, "sent": dict(comm.sent), "received": received}


# ------------------------------------------------------------------------- context parallelism
def _cp_inputs(batch, heads, seq, head_dim, seed=7):
    torch.manual_seed(seed)
    q, k, v, g = (torch.randn(batch, heads, seq, head_dim) for _ in range(4))
    return q, k, v, g


def context_parallel_attention(cp: int, causal: bool = True, balance: str = "zigzag", variant: str = "ring",
                               overlap: bool = True, batch: int = 2, heads: int = 2, seq: int = 32,
                               head_dim: int = 8) -> dict:
    """Attention over `seq` tokens split over groups of cp ranks (balance: zigzag | contiguous), by ring attention
    (variant="ring") or by all-gathering K/V ("all_gather"), forward and backward, next to torch's attention on
    the whole sequence in one process. -> {max_err_out, max_err_grad (q, k and v), sent_bytes (forward),
    expected_bytes (plan.cp_bytes_per_rank), backward_bytes, work (chunk pairs per rank, a list over the cp
    ranks), kv_memory (bytes of K/V held at once), positions (this rank's tokens)}."""
    if variant not in ("ring", "all_gather"):
        raise ValueError(f"variant must be 'ring' or 'all_gather', got {variant!r}")
    cp = _group_size("cp", cp)
    balance = check.choice("balance", balance, cpx.BALANCES)
    causal, overlap = sz.flag("causal", causal), sz.flag("overlap", overlap)
    batch, heads, seq, head_dim = sz.dims(batch=batch, heads=heads, seq=seq, head_dim=head_dim)
    sz.divisible("seq", seq, "2*cp (two chunks per rank)", 2 * cp)
    sz.elements("the attention scores", batch=batch, heads=heads, seq_q=seq, seq_k=seq)
    group = _groups(cp)[dist.get_rank() // cp]
    r = group.index(dist.get_rank())
    allpos = [cpx.positions(seq, cp, j, balance) for j in range(cp)]
    q, k, v, g = _cp_inputs(batch, heads, seq, head_dim)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = cpx.reference(*full, causal=causal)
    (ref * g).sum().backward()
    mine = allpos[r]
    local = [t[:, :, mine].clone().requires_grad_() for t in (q, k, v)]
    stats: dict = {}
    if variant == "ring":
        out = cpx.ring_attention(*local, RingPass(group), mine, allpos, causal, overlap, stats)
    else:
        comm = Comm.split(_groups(cp)) if cp < dist.get_world_size() else Comm()
        out = cpx.all_gather_attention(*local, comm, mine, allpos, causal)
    (out * g[:, :, mine]).sum().backward()
    if variant == "all_gather":
        stats = {"forward_bytes": comm.sent["all_gather_kv"], "backward_bytes": comm.sent["reduce_scatter_dkv"],
                 "work": cpx.work_per_rank(cp, causal, balance)[r]}
    work = [None] * dist.get_world_size()
    dist.all_gather_object(work, stats["work"])
    kv_hidden, itemsize = heads * head_dim, q.element_size()
    return {"max_err_out": _err(out, ref[:, :, mine]),
            "max_err_grad": max(_err(a.grad, b.grad[:, :, mine]) for a, b in zip(local, full)),
            "sent_bytes": stats["forward_bytes"], "backward_bytes": stats["backward_bytes"],
            "expected_bytes": plan.cp_bytes_per_rank(batch, seq, kv_hidden, cp, itemsize),
            "work": [work[j] for j in group],
            "kv_memory": cpx.kv_memory(batch, seq, kv_hidden, cp, itemsize, variant),
            "positions": mine.tolist()}


# --------------------------------------------------------------------------- collective matmul
def collective_matmul(tp: int, overlap: bool = True, rows: int = 8, hidden: int = 16, cols: int = 12) -> dict:
    """all_gather(X) @ W_r done in tp steps over a ring (each step passes the next shard on while it multiplies)
    next to the plain all-gather then matmul. -> {max_err, sent_bytes, expected_bytes, steps}."""
    groups = _groups(_group_size("tp", tp))
    overlap = sz.flag("overlap", overlap)
    rows, hidden, cols = sz.dims(rows=rows, hidden=hidden, cols=cols)
    sz.elements("the gathered input", tp=tp, rows=rows, hidden=hidden)
    sz.elements("the weight", hidden=hidden, tp=tp, cols=cols)
    comm = Comm.split(groups) if tp < dist.get_world_size() else Comm()
    torch.manual_seed(11)
    x, w = torch.randn(tp * rows, hidden), torch.randn(hidden, tp * cols)
    r = comm.rank
    xr, wr = x[r * rows:(r + 1) * rows], w[:, r * cols:(r + 1) * cols]
    plain = cmm.all_gather_matmul(xr, wr, comm.group)
    ring = RingPass(comm.ranks)
    y = cmm.collective_matmul(xr, wr, ring, overlap)
    return {"max_err": _err(y, plain), "sent_bytes": ring.sent,
            "expected_bytes": cmm.bytes_per_rank(rows, hidden, tp, xr.element_size()), "steps": len(ring.steps)}


# ---------------------------------------------------------------------------------- 2-D mesh
def mesh_training(dp: int, tp: int, steps: int = 2, batch: int = 2, seq: int = 4, hidden: int = 16,
                  heads: int = 4, table: bool = False) -> dict:
    """A transformer block trained on init_device_mesh("cpu", (dp, tp)): FSDP2 over dp, DTensor TP over tp,
    next to one process on the whole batch. -> {max_err (parameters after `steps` SGD steps), counts and
    bytes: per mesh dimension, what CommDebugMode saw in the last step, expected: the planner's counts
    (plan.mesh_collectives); table: redistribution_table on this mesh (table=True)}."""
    from torch.distributed.device_mesh import init_device_mesh

    if _group_size("dp", dp) * _group_size("tp", tp) != dist.get_world_size():
        raise ValueError(f"dp*tp = {dp}*{tp} must equal the world size {dist.get_world_size()}")
    steps = check.integer("steps", steps, 1, sz.MAX_STEPS)
    batch, seq, hidden, heads = sz.dims(batch=batch, seq=seq, hidden=hidden, heads=heads)
    table = sz.flag("table", table)
    sz.divisible("hidden", hidden, "heads", heads)
    sz.at_least("heads", heads, "tp", tp)  # DTensor's column split hands each tp rank whole heads
    sz.divisible("heads", heads, "tp", tp)
    sz.divisible("the MLP width (mesh.Block's ffn, 32)", 32, "tp", tp)
    sz.elements("the batch", dp=dp, batch=batch, seq=seq, hidden=hidden)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    out = mh.train(mesh, steps, batch, seq, hidden, heads)
    out["expected"] = plan.mesh_collectives(len(mh.UNITS), dp, tp)
    if table:
        out["table"] = mh.redistribution_table(mesh)
    return out


# ------------------------------------------------------------------- overlap on emulated links
def ring_overlap(kind: str = "attention", bandwidth: float = 100e6, latency: float = 0.0, overlap: bool = True,
                 balance: str = "zigzag", seq: int = 2048, heads: int = 4, head_dim: int = 64, rows: int = 256,
                 hidden: int = 1024, repeats: int = 1, pace: bool = True) -> dict:
    """Ring attention's forward (kind="attention", causal) or the collective matmul ("matmul") on all ranks,
    every link between two ranks emulated (network.emulate, one rank per node: bandwidth B/s, latency s).
    pace=False on a Cluster on the kernel network of one rank per node (commlib.network): the kernel shapes the
    links at `bandwidth`, nothing is paced, and late_s is None.
    -> {measured: the time this rank did not compute (exposed communication), model: the same from
    collective_matmul.ring_timelines on every rank's measured compute, compute_s, message_s, steps, late_s: how
    much later than the model this rank's messages arrived (the emulation's error: wake-ups on a busy machine),
    ring_s: compute + exposed}. repeats > 1: each number is the median of that many runs (steps: the median run's),
    so one late wake-up on a loaded machine does not decide a comparison."""
    import statistics

    from commlib.network import emulate

    repeats = check.integer("repeats", repeats, 1, 100)

    if kind not in ("attention", "matmul"):
        raise ValueError(f"kind must be 'attention' or 'matmul', got {kind!r}")
    p = dist.get_world_size()
    bandwidth = check.number("bandwidth", bandwidth, 0, strict=True, unit="bytes/s")
    latency = check.number("latency", latency, 0, unit="seconds", high=10.0)
    overlap, balance = sz.flag("overlap", overlap), check.choice("balance", balance, cpx.BALANCES)
    pace = sz.flag("pace", pace)
    seq, heads, head_dim, rows, hidden = sz.dims(seq=seq, heads=heads, head_dim=head_dim, rows=rows, hidden=hidden)
    if kind == "attention":
        sz.divisible("seq", seq, "2 * world size (two chunks per rank)", 2 * p)
        sz.elements("the attention scores", heads=heads, seq_q=seq // p, seq_k=seq // p)
    else:
        sz.elements("the weight", hidden=hidden, hidden_out=hidden)
    torch.manual_seed(0)
    if kind == "attention":
        allpos = [cpx.positions(seq, p, j, balance) for j in range(p)]
        q, k, v = (torch.randn(1, heads, seq // p, head_dim) for _ in range(3))

        def once(ring):
            with torch.no_grad():
                cpx.ring_attention(q, k, v, ring, allpos[dist.get_rank()], allpos, True, overlap)
        nbytes = 2 * q.numel() * q.element_size()
    else:
        x, w = torch.randn(rows, hidden), torch.randn(hidden, hidden)

        def once(ring):
            cmm.collective_matmul(x, w, ring, overlap)
        nbytes = x.numel() * x.element_size()
    once(RingPass())              # warm up, not paced
    message_s = latency + nbytes / bandwidth
    runs = []
    for _ in range(repeats):
        dist.barrier()
        ring = RingPass()
        with emulate(gpus_per_node=1, bandwidth=bandwidth, latency=latency) if pace else \
                contextlib.nullcontext() as em:
            dist.barrier()
            once(ring)
        compute = [c for c, _ in ring.steps]
        everyone = [None] * p
        dist.all_gather_object(everyone, compute)
        model = cmm.ring_timelines(everyone, message_s, overlap)[dist.get_rank()]
        measured = sum(w for _, w in ring.steps)
        runs.append({"measured": measured, "model": cmm.exposed_s(model), "compute_s": sum(compute),
                     "ring_s": sum(compute) + measured, "steps": ring.steps,
                     "late_s": sum(m.late_s for m in em.log) if pace else None})   # the emulation's own delay
    median = sorted(runs, key=lambda r: r["measured"])[(repeats - 1) // 2]
    out = {k: statistics.median(r[k] for r in runs) for k in ("measured", "model", "compute_s", "ring_s")}
    out["late_s"] = statistics.median(r["late_s"] for r in runs) if pace else None
    return out | {"message_s": message_s, "steps": median["steps"], "nbytes": nbytes}
