"""A property test over the pure functions of the planner (plan, machine, models), the topology and compression:
each parameter in turn gets generated odd values (0, negatives, NaN, inf, 10**400, bool, numpy scalars, wrong
types), the others valid ones. Every call returns finite numbers or raises ValueError/TypeError whose message
names the parameter, within a per-call bound (generous: a hang or a runaway enumeration, not a timing).
"""

import math
import signal
from numbers import Number

import numpy as np
import pytest

from commlib import compression, cost, plan
from commlib import topology as topo
from commlib.compression import closed_form

SECONDS = 20  # per call: every call here takes milliseconds; a runaway loop takes minutes

ODD = [0, -1, -7, 2.5, -0.0, math.nan, math.inf, -math.inf, 1e300, 10**400, -10**400, True, False, None, "3",
       [2], (), object(), 1e-300, 2**63, 10**20, np.int64(0), np.int64(-3), np.float64(math.nan),
       np.float32(math.inf), np.int64(2**62)]

TOPO = topo.Topology(2, 8, "nvlink4", "ib_ndr", 8)
HW = plan.hardware("dgx_h100", 2)
LLAMA = plan.MODELS["llama2_7b"]
GOOD_CONFIG = plan.Config(dp=4, tp=4, pp=1)


def _finite(value) -> bool:
    """Every number in value (nested dicts, lists, tuples, dataclasses' __dict__) is finite."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, Number):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return all(_finite(getattr(value, f)) for f in value.__dataclass_fields__ if not f.startswith("_"))
    return True


class _TooSlow(Exception):
    pass


def _alarm(*_):
    raise _TooSlow


# name: (function, valid keyword arguments, parameters to vary, results allowed to be inf)
CASES = {
    "plan.model_state_bytes": (plan.model_state_bytes, dict(params=7e9, dp=8, zero_stage=1), None),
    "plan.model_state_breakdown": (plan.model_state_breakdown,
                                   dict(params=7e9, dp=8, zero_stage=3, param_bytes=2, grad_bytes=2,
                                        optimizer_bytes=12), None),
    "plan.activation_bytes_per_layer": (plan.activation_bytes_per_layer,
                                        dict(seq=2048, batch=1, hidden=4096, heads=32, tp=8), None),
    "plan.dp_bytes_per_rank": (plan.dp_bytes_per_rank, dict(params=7e9, dp=8, zero_stage=3, grad_bytes=2,
                                                             param_bytes=2), None),
    "plan.tp_bytes_per_rank": (plan.tp_bytes_per_rank, dict(batch=4, seq=2048, hidden=4096, tp=8, act_bytes=2),
                               None),
    "plan.pp_bytes_per_rank": (plan.pp_bytes_per_rank, dict(microbatch=1, seq=2048, hidden=4096, microbatches=8,
                                                            act_bytes=2), None),
    "plan.ep_bytes_per_rank": (plan.ep_bytes_per_rank, dict(tokens=4096, hidden=4096, topk=2, ep=8, act_bytes=2,
                                                            imbalance=1.5), None),
    "plan.init_broadcast_bytes": (plan.init_broadcast_bytes, dict(nbytes=1e9, dp=8), None),
    "plan.pipeline_bubble": (plan.pipeline_bubble, dict(pp=4, microbatches=8, chunks=1), None),
    "plan.microbatches_in_flight": (plan.microbatches_in_flight, dict(pp=4, microbatches=8), None),
    "plan.step_flops": (plan.step_flops, dict(model=LLAMA, tokens=4096), None),
    "models.Model": (lambda **kw: plan.Model(**kw).params,
                     dict(layers=4, hidden=256, heads=8, seq=512, vocab=1000, ffn=1024, experts=4, topk=2,
                          kv_heads=4), None),
    "plan.Assumptions": (plan.Assumptions, dict(mfu=0.4, dp_overlap=0.5, act_bytes=2, imbalance=1.0), None),
    "machine.Hardware": (plan.Hardware, dict(nodes=2, gpus_per_node=8, gpu_memory=80e9, peak_flops=1e15,
                                                nics_per_node=8), None),
    "machine.hardware": (plan.hardware, dict(name="dgx_h100", nodes=2), None),
    "machine.collective_s": (plan.collective_s, dict(op="all_reduce", nbytes=1e9, size=16, stride=1, hw=HW),
                             None),
    "machine.p2p_s": (plan.p2p_s, dict(nbytes=1e6, crosses_nodes=True, hw=HW), ["nbytes", "hw"]),
    "plan.estimate": (lambda **kw: plan.estimate(**kw).step_s,
                      dict(model=LLAMA, hw=HW, config=GOOD_CONFIG, global_batch=64, assume=plan.Assumptions()),
                      None),
    "plan.estimate config": (lambda **kw: plan.estimate(LLAMA, HW, plan.Config(**kw), 64).step_s,
                             dict(dp=4, tp=4, pp=1, ep=1, zero_stage=1, microbatches=2, cp=1), None),
    "plan.cp_bytes_per_rank": (plan.cp_bytes_per_rank, dict(batch=1, seq=8192, kv_hidden=1024, cp=4, itemsize=2),
                               None),
    "plan.search": (lambda **kw: [e.step_s for e in plan.search(**kw)[0]],
                    dict(model=LLAMA, hw=HW, global_batch=64, assume=plan.Assumptions(), zero_stages=(0, 3),
                         max_tp=8, max_cp=2), None),
    "topology.Topology": (lambda **kw: topo.Topology(**kw).world_size,
                          dict(nodes=2, gpus_per_node=8, intra="nvlink4", inter="ib_ndr", nics_per_node=8), None),
    "topology.for_world_size": (lambda **kw: topo.Topology.for_world_size(**kw).nodes,
                                dict(world_size=16, gpus_per_node=8, intra="nvlink4", inter="ib_ndr"), None),
    "topology.preset": (topo.preset, dict(name="dgx_a100", nodes=2), None),
    "topology.collective_time": (topo.collective_time, dict(op="all_reduce", nbytes=1e9, topology=TOPO,
                                                            algorithm="multi_ring", gamma=0.0), None),
    "topology.breakdown": (lambda **kw: {k: v for k, v in topo.breakdown(**kw).items() if k != "algbw_GBps"
                                         and k != "busbw_GBps"},
                           dict(op="all_to_all", nbytes=1e6, topology=TOPO, algorithm="pairwise"), None),
    "topology.best_algorithm": (topo.best_algorithm, dict(op="all_reduce", nbytes=1e9, topology=TOPO), None),
    "topology.share_after": (topo.share_after, dict(share_before=0.6, before_s=1.0, after_s=0.5), None),
    "topology.bytes_per_rank": (topo.bytes_per_rank, dict(op="all_reduce", nbytes=1e9, topology=TOPO,
                                                          algorithm="hierarchical"), None),
    "topology.multi_ring_orders": (topo.multi_ring_orders, dict(nodes=2, gpus_per_node=4), None),
    "topology.bytes_by_rank": (topo.bytes_by_rank, dict(op="all_reduce", nbytes=4096, topology=TOPO,
                                                        algorithm="multi_ring", itemsize=4), None),
    "topology.model_vs_published": (lambda **kw: [r["model_GBps"] for r in topo.model_vs_published(**kw)],
                                    dict(nbytes=2**30), None),
    "compression.bytes_per_rank": (compression.bytes_per_rank, dict(method="powersgd", shape=(256, 512),
                                                                    world_size=8, itemsize=4, rank=4), None),
    "compression.bytes_per_rank topk": (compression.bytes_per_rank, dict(method="topk", shape=[(256, 512), (7,)],
                                                                         world_size=8, fraction=0.01), None),
    "compression.collectives": (compression.collectives, dict(method="int8", shape=(1000,), world_size=4), None),
    "compression.comm_time": (compression.comm_time, dict(method="powersgd", shape=(256, 512), world_size=8,
                                                          link="ib_hdr", itemsize=4, compress_s=1e-3, rank=4,
                                                          min_compression_rate=2.0), None),
    "compression.crossover_bandwidth": (compression.crossover_bandwidth,
                                        dict(method="topk", shape=(4096, 4096), world_size=8, compress_s=1e-3,
                                             link="ib_hdr", itemsize=4, fraction=0.01), None),
    "compression.topk_count": (compression.topk_count, dict(numel=1000, fraction=0.1), None),
    "compression.powersgd_compresses": (closed_form.powersgd_compresses,
                                        dict(m=256, n=512, rank=4, min_compression_rate=2.0), None),
    "compression.matrix_view": (closed_form.matrix_view, dict(shape=(4, 5, 6)), None),
    "compression.PowerSGDState": (lambda **kw: vars(compression.PowerSGDState(**kw)).get("rank"),
                                  dict(rank=2, start_iter=0, min_compression_rate=2.0, epsilon=0.0, seed=0), None),
    "compression.TopKState": (lambda **kw: compression.TopKState(**kw).fraction, dict(fraction=0.1), None),
    "compression.QuantState": (lambda **kw: compression.QuantState(**kw).code, dict(code="int8"), None),
}
INF_OK = {"compression.crossover_bandwidth"}  # documented: inf means compressing is faster on any link


def _calls():
    for case, (fn, good, only) in CASES.items():
        for name in only or good:
            for i, odd in enumerate(ODD):
                yield pytest.param(case, name, odd, id=f"{case}-{name}-{i}")


def test_valid_arguments_give_finite_values():
    for case, (fn, good, _) in CASES.items():
        assert _finite(fn(**good)) or case in INF_OK, case


@pytest.mark.parametrize("case, name, odd", list(_calls()))
def test_odd_value_gives_finite_value_or_names_the_parameter(case, name, odd):
    fn, good, _ = CASES[case]
    kwargs = dict(good, **{name: odd})
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, SECONDS)
    try:
        result = fn(**kwargs)
    except (ValueError, TypeError) as e:
        assert name in str(e), f"{case}({name}={odd!r}) raised {e!r}, which does not name {name}"
        return
    except _TooSlow:
        pytest.fail(f"{case}({name}={odd!r}) ran longer than {SECONDS} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert _finite(result) or (case in INF_OK and not _has_nan(result)), f"{case}({name}={odd!r}) -> {result!r}"


def _has_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def test_cost_bounds_are_in_validate():
    # sanity of the harness: _finite sees a NaN inside a dict
    assert not _finite({"a": [1.0, math.nan]}) and _finite({"a": (1, 2.0)}) and cost.LINKS
