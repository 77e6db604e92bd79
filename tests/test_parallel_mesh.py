"""commlib.parallel.mesh: FSDP2 x DTensor TP on a 2-D mesh equals one process; CommDebugMode's counts per
mesh dimension equal the planner's; the redistribution table."""

import os
import sys

import cloudpickle
import pytest

from commlib import plan
from commlib.parallel import live

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def runs(cluster4):
    return {shape: cluster4.run(live.mesh_training, *shape, table=shape == (2, 2))
            for shape in ((2, 2), (1, 4), (4, 1))}


@pytest.mark.parametrize("dp, tp", [(2, 2), (1, 4), (4, 1)])
def test_mesh_training_equals_one_process_and_the_planner_counts(runs, dp, tp):
    for rank, r in enumerate(runs[(dp, tp)]):
        assert r["max_err"] < 1e-5, (rank, r["max_err"])
        counts = {dim: ops for dim, ops in r["counts"].items() if ops}
        assert counts == {dim: ops for dim, ops in r["expected"].items() if ops}
        assert r["expected"] == plan.mesh_collectives(2, dp, tp)
    if tp > 1:  # 4 all-reduces of b s h (2 rows x 4 tokens x 16 hidden, fp32) per layer
        assert runs[(dp, tp)][0]["bytes"]["tp"]["all_reduce"] == plan.tp_bytes_per_rank(2, 4, 16, tp, act_bytes=4)
    if dp > 1 and tp == 1:  # ZeRO-3: every parameter gathered twice, its gradient reduce-scattered once
        params = (16 * 48 + 48 + 16 * 16 + 16) + (16 * 32 + 32 + 32 * 16 + 16)
        b = runs[(dp, tp)][0]["bytes"]["dp"]
        assert b["all_gather"] + b["reduce_scatter"] == plan.dp_bytes_per_rank(params, dp, 3, grad_bytes=4)


def test_redistribution_table(runs):
    table = {(row["src"], row["dst"]): row for row in runs[(2, 2)][0]["table"]}
    assert len(table) == 16 and all(row["correct"] for row in table.values())
    shard = 8 * 8 * 4 // 2      # an 8x8 fp32 tensor split in two along the tp dimension
    expect = {("Shard(0)", "Replicate"): ("all_gather", shard), ("Shard(0)", "Shard(1)"): ("all_gather", shard),
              ("Partial", "Replicate"): ("all_reduce", 2 * shard), ("Partial", "Shard(0)"): ("reduce_scatter", shard),
              ("Replicate", "Shard(1)"): ("-", 0), ("Replicate", "Partial"): ("not allowed", 0),
              ("Shard(1)", "Partial"): ("not allowed", 0)}
    for pair, (collective, nbytes) in expect.items():
        assert (table[pair]["collective"], table[pair]["bytes"]) == (collective, nbytes), pair
    # torch's cost model agrees where it prices the collective torch issues; on CPU Shard -> Shard is an
    # all-gather (Gloo has no all-to-all), which redistribute_cost prices as an all-to-all: half the bytes here
    assert table[("Shard(0)", "Replicate")]["torch_bytes"] == pytest.approx(shard)
    assert table[("Partial", "Replicate")]["torch_bytes"] == pytest.approx(2 * shard)
    assert table[("Shard(0)", "Shard(1)")]["torch_bytes"] == pytest.approx(shard / 2)
    assert table[("Shard(0)", "Partial")]["torch_bytes"] == float("inf")


def test_importing_live_leaves_dtensor_and_comm_debug_mode_until_a_mesh_counter_is_made():
    """A chapter that imports commlib.parallel.live (7, 8) does not wait 1.4 s for CommDebugMode's imports
    (DTensor, torch._inductor, sympy): mesh.MeshCounter makes its class on first use."""
    import subprocess
    import sys

    code = ("import sys; import commlib.parallel.live; from commlib.parallel import mesh; "
            "print('torch.distributed.tensor' in sys.modules, 'sympy' in sys.modules); "
            "from torch.distributed.tensor.debug import CommDebugMode; "
            "print(issubclass(mesh._mesh_counter(), CommDebugMode), mesh._mesh_counter() is mesh._mesh_counter())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stderr[-2000:]
