"""commlib.parallel.zero: DDP and ZeRO 1-3 against one process and torch's FSDP2; bytes and memory against plan."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from commlib import cost, plan
from commlib.parallel import Comm, live, zero

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIZES, BATCH, STEPS, LR = live.SIZES, live.BATCH, live.STEPS, live.LR   # 12 rows split evenly over 1, 2, 3, 4
PARAMS = 16 * 32 + 32 + 32 * 32 + 32 + 32 * 8 + 8
UNITS = [16 * 32 + 32, 32 * 32 + 32, 32 * 8 + 8]
VARIANTS = [(0, False), (1, False), (2, False), (3, False), (3, True)]
REFERENCE = zero.reference_adam(zero.mlp(SIZES), live.batches(), F.mse_loss, lr=LR)   # one process, torch's Adam


def batches():
    return live.batches()


def train_every_stage(partition, impl, reference):
    """On each rank: every (stage, prefetch) on its group; -> {variant: (p, rank, max error, sent, memory)}."""
    out = {}
    for stage, prefetch in VARIANTS:
        r = live.sharded_training(stage, prefetch, reference, partition, impl)
        out[(stage, prefetch)] = (r["p"], r["rank"], r["err"], r["sent"], r["memory"])
    return out


@pytest.mark.parametrize("partition, impl", [
    ([[0, 1, 2, 3]], "commlib"),        # p = 4 on commlib's ring: the bytes are real messages
    ([[0, 1, 2], [3]], "torch"),        # p = 3 (uneven shards) and p = 1 side by side
    ([[0, 1], [2, 3]], "torch"),        # p = 2
])
def test_sharded_adam_equals_one_process(cluster4, partition, impl):
    for rank, result in enumerate(cluster4.run(train_every_stage, partition, impl, REFERENCE)):
        for (stage, prefetch), (p, r, err, sent, memory) in result.items():
            assert err < 1e-6, (rank, p, stage, prefetch, err)
            # the bytes: what a ring sends, shard by shard (uneven at p = 3), once per unit per step
            ring = {op: STEPS * sum(cost.bytes_sent_by_rank(op, 4 * n, p, "ring", 4)[r] for n in UNITS)
                    if p > 1 else 0 for op in ("all_reduce", "reduce_scatter", "all_gather")}
            want = {0: {"all_reduce": ring["all_reduce"]},
                    1: {"reduce_scatter": ring["reduce_scatter"], "all_gather": ring["all_gather"]},
                    2: {"reduce_scatter": ring["reduce_scatter"], "all_gather": ring["all_gather"]},
                    3: {"reduce_scatter": ring["reduce_scatter"], "all_gather": 2 * ring["all_gather"]}}[stage]
            assert sent == {k: v for k, v in want.items() if p > 1}, (rank, p, stage)
            # the memory between backward and step: what this rank's shards hold
            shard = sum(cost.shard_sizes(n, p)[r] for n in UNITS)
            assert memory["optimizer"] == 8 * (PARAMS if stage == 0 else shard)
            assert memory["grads"] == 4 * (PARAMS if stage < 2 else shard)
            assert memory["params"] == 4 * (PARAMS if stage < 3 else shard)
            pairs = max(a + b for a, b in zip(UNITS, UNITS[1:]))
            assert memory["gathered_peak"] == 4 * (0 if stage < 3 else pairs if prefetch else max(UNITS))


def test_bytes_and_memory_equal_the_plan_at_p4(cluster4):
    result = cluster4.run(train_every_stage, [[0, 1, 2, 3]], "commlib", REFERENCE)
    for (stage, prefetch), (p, _, _, sent, memory) in result[2].items():
        assert sum(sent.values()) == STEPS * plan.dp_bytes_per_rank(PARAMS, 4, stage, grad_bytes=4)
        want = plan.model_state_breakdown(PARAMS, 4, stage, param_bytes=4, grad_bytes=4, optimizer_bytes=8)
        assert {k: memory[k] for k in want} == want
    assert result[0][(3, False)][3]["all_gather"] == 2 * result[0][(3, False)][3]["reduce_scatter"]  # 3(p-1)/p P


def broadcast_at_start(impl):
    torch.manual_seed(dist.get_rank())  # every rank starts from different weights, as without a broadcast
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    model(torch.randn(4, 8))             # buffers differ too (running statistics, batch count)
    comm = Comm(impl=impl)
    nbytes = zero.broadcast_parameters(model, comm)
    torch.manual_seed(dist.get_rank())
    theirs = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8))
    theirs(torch.randn(4, 8))
    theirs = torch.nn.parallel.DistributedDataParallel(theirs)   # torch's own broadcast of rank 0's state
    ours = [t.detach().clone() for t in (*model.parameters(), *model.buffers())]
    torch_ = [t.detach().clone() for t in (*theirs.module.parameters(), *theirs.module.buffers())]
    return nbytes, dict(comm.sent), ours, torch_


@pytest.mark.parametrize("impl", ["commlib", "torch"])
def test_ddp_start_broadcasts_rank0s_parameters_and_buffers(cluster4, impl):
    out = cluster4.run(broadcast_at_start, impl)
    nbytes = out[0][0]
    assert nbytes == (8 * 8 + 8 + 8 + 8) * 4 + (8 + 8) * 4 + 8  # fp32 params, fp32 running stats, int64 count
    for rank, (_, sent, ours, theirs) in enumerate(out):
        for a, b, r0 in zip(ours, theirs, out[0][2]):
            assert torch.equal(a, r0) and torch.equal(b, r0), rank  # ours = torch DDP's = rank 0's
        by_dtype = [4 * 104, 8]  # one broadcast per dtype: 88 parameters + 16 running stats (fp32), the count
        assert sent.get("broadcast", 0) == sum(cost.bytes_sent_by_rank("broadcast", n, 4, "tree")[rank]
                                               for n in by_dtype)
    assert out[0][1]["broadcast"] == plan.init_broadcast_bytes(nbytes, 4)  # the root sends ceil(lg 4) copies
    assert sum(o[1].get("broadcast", 0) for o in out) == 3 * nbytes    # each other rank receives it once


def ours_and_fsdp2():
    data = batches()
    comm = Comm()
    sdp = zero.ShardedDataParallel(zero.mlp(SIZES), comm, 3, lr=LR)
    model = zero.torch_fsdp2(zero.mlp(SIZES))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    rows = BATCH // comm.size
    for x, y in data:
        x, y = x[comm.rank * rows:(comm.rank + 1) * rows], y[comm.rank * rows:(comm.rank + 1) * rows]
        F.mse_loss(sdp(x), y).backward()
        sdp.step()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    theirs = [p.full_tensor() for p in model.parameters()]
    return max((a - b).abs().max().item() for a, b in zip(sdp.parameters(), theirs))


def test_zero3_equals_torch_fsdp2(cluster4):
    assert max(cluster4.run(ours_and_fsdp2)) < 1e-6


def bad_inputs():
    errors = []
    for call in (lambda: zero.ShardedDataParallel(zero.mlp(SIZES), Comm(), stage=4),
                 lambda: zero.ShardedDataParallel(torch.nn.Sequential(torch.nn.LayerNorm(4)), Comm()),
                 lambda: Comm(impl="mpi"),
                 lambda: Comm([0, 1], impl="commlib") if dist.get_rank() < 2 else Comm([2, 3], impl="commlib")):
        try:
            call()
            errors.append(None)
        except (ValueError, TypeError) as e:
            errors.append(str(e))
    return errors


def test_bad_inputs_are_named(cluster4):
    errors = cluster4.run(bad_inputs)[0]
    assert "stage must be one of (0, 1, 2, 3)" in errors[0]
    assert "only nn.Linear layers" in errors[1]
    assert "impl must be one of" in errors[2]
    assert "whole world" in errors[3]


def test_written_out_adam_is_torchs_bit_for_bit():
    torch.manual_seed(0)
    ours = [torch.nn.Parameter(torch.randn(50)) for _ in range(3)]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    a, b = zero.Adam(ours, lr=1e-2, betas=(0.8, 0.99), eps=1e-6), torch.optim.Adam(theirs, lr=1e-2, betas=(0.8, 0.99),
                                                                                   eps=1e-6)
    for _ in range(20):
        for p, q in zip(ours, theirs):
            p.grad = torch.randn(50)
            q.grad = p.grad.clone()
        a.step()
        b.step()
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs))


def every_stage_once():
    return {(s, f): live.sharded_training(s, f) for s, f in VARIANTS}


def test_each_stage_communicates_in_its_phase(cluster4):
    from collections import Counter
    units = len(UNITS)
    want = {0: ({}, {}, {"all_reduce": units}),
            1: ({}, {}, {"reduce_scatter": units, "all_gather": units}),
            2: ({}, {"reduce_scatter": units}, {"all_gather": units}),
            3: ({"all_gather": units}, {"all_gather": units, "reduce_scatter": units}, {})}
    for result in cluster4.run(every_stage_once):
        for (stage, prefetch), r in result.items():
            got = tuple(dict(Counter(kind for kind, _ in r["phases"][ph])) for ph in ("forward", "backward", "step"))
            assert got == want[stage], (stage, prefetch, got)
        # with prefetch the next unit's gather is issued before the current unit's reduce-scatter
        assert [k for k, _ in result[(3, True)]["phases"]["backward"]][:3] == ["all_gather", "all_gather",
                                                                                "reduce_scatter"]


def test_start_broadcast_gives_everyone_rank0s_weights(cluster4):
    out = cluster4.run(live.start_broadcast)
    nbytes = out[0]["nbytes"]
    assert nbytes == 4 * PARAMS and len({o["before"] for o in out}) == 4
    assert all(o["err"] == 0.0 and o["after"] == out[0]["before"] for o in out)
    assert [o["sent"] for o in out] == [2 * nbytes, nbytes, 0, 0]          # binomial tree: 0 -> 1, then 0 -> 2, 1 -> 3
    assert [o["sent"] for o in out] == cost.bytes_sent_by_rank("broadcast", nbytes, 4, "tree")
    assert out[0]["sent"] == plan.init_broadcast_bytes(nbytes, 4)
