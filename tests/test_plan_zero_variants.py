"""commlib.plan.zero_variants: DeepSpeed's ZeRO-1/2 and FSDP2's kept units against the ZeRO paper's bytes, and
FSDP2's default (reshard_after_forward=None) counted live."""

import pytest

import commlib as cl
from commlib import plan


@pytest.mark.parametrize("dp", [2, 4, 8, 64])
def test_deepspeed_zero12_sends_one_and_a_half_times_ddp_by_default(dp):
    params, frac = 7e9, (dp - 1) / dp
    ddp = plan.dp_bytes_per_rank(params, dp, 0)
    assert plan.zero12_bytes_per_rank(params, dp, "paper") == pytest.approx(ddp)
    assert plan.zero12_bytes_per_rank(params, dp, "paper") == pytest.approx(plan.dp_bytes_per_rank(params, dp, 2))
    assert plan.zero12_bytes_per_rank(params, dp, "deepspeed") == pytest.approx(1.5 * ddp)
    assert plan.zero12_bytes_per_rank(params, dp, "deepspeed") == pytest.approx(plan.dp_bytes_per_rank(params, dp, 3))
    assert plan.zero12_bytes_per_rank(params, dp, "deepspeed_reduce") == pytest.approx(ddp)
    assert plan.zero12_collectives(params, dp, "deepspeed") == [("all_reduce", 2 * frac * params * 2),
                                                               ("all_gather", frac * params * 2)]
    assert [op for op, _ in plan.zero12_collectives(params, dp, "deepspeed_reduce")] == ["reduce", "all_gather"]
    assert all("reduce_scatter" not in dict(plan.zero12_collectives(params, dp, i)) for i in plan.ZERO12[1:])


def test_zero12_mixed_bytes_and_bad_input():
    assert plan.zero12_collectives(10, 2, "paper", grad_bytes=4, param_bytes=2) == [("reduce_scatter", 20.0),
                                                                                   ("all_gather", 10.0)]
    with pytest.raises(ValueError, match="implementation"):
        plan.zero12_bytes_per_rank(10, 2, "megatron")
    with pytest.raises(ValueError, match="dp"):
        plan.zero12_bytes_per_rank(10, 0)
    with pytest.raises(ValueError, match="kept_params"):
        plan.fsdp_bytes_per_rank(10, 2, kept_params=11)


@pytest.mark.parametrize("dp", [2, 8])
def test_fsdp_kept_units_skip_their_backward_gather(dp):
    params, root = 1e9, 1e8
    zero3, zero2 = plan.dp_bytes_per_rank(params, dp, 3), plan.dp_bytes_per_rank(params, dp, 2)
    assert plan.fsdp_bytes_per_rank(params, dp) == pytest.approx(zero3)
    assert plan.fsdp_bytes_per_rank(params, dp, kept_params=params) == pytest.approx(zero2)   # Llama 3's FSDP
    saved = zero3 - plan.fsdp_bytes_per_rank(params, dp, kept_params=root)
    assert saved == pytest.approx((dp - 1) / dp * root * 2)


def _fsdp2_step(reshard):
    """One forward and backward of Linear -> Linear under FSDP2, the first Linear its own unit, the second held by
    the root; -> (collectives counted, ring bytes this rank sent, parameters, the root's own)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from commlib.parallel import mesh as pmesh

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    params, root = (sum(t.numel() for t in m.parameters()) for m in (model, model[1]))
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp",))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh, **({} if reshard is None else {"reshard_after_forward": reshard}))
    with pmesh.quiet(), pmesh.MeshCounter(mesh) as counter:
        model(torch.randn(4, 8)).sum().backward()
    return dict(counter.counts["dp"]), sum(counter.bytes["dp"].values()), params, root


def test_fsdp2_default_keeps_the_roots_parameters_gathered_for_backward():
    """torch 2.13 _fully_shard.py: reshard_after_forward=None is True for the units and False for the root."""
    with cl.Cluster(world_size=2, timeout=60) as c:
        (default, sent, params, root), (resharded, sent_all, _, _) = (c.run(_fsdp2_step, r)[0] for r in (None, True))
    assert resharded == {"all_gather": 4, "reduce_scatter": 2}
    assert default == {"all_gather": 3, "reduce_scatter": 2}
    assert sent_all == plan.fsdp_bytes_per_rank(params, 2, grad_bytes=4)
    assert sent == plan.fsdp_bytes_per_rank(params, 2, kept_params=root, grad_bytes=4)
