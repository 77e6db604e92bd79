"""Gradient compression as DDP communication hooks: fewer bytes on the wire, and what it costs the model.

    state = compression.PowerSGDState(rank=4)                   # TopKState(fraction=0.01), QuantState("int8"), ...
    ddp.register_comm_hook(state, compression.powersgd_hook)    # torch DDP, or overlap.BucketedDDP
    compression.bytes_per_rank("powersgd", (m, n), p, rank=4)   # 2(p-1)/p * r(m+n) * itemsize

| method   | hook            | collective              | survives all-reduce | source                          |
|----------|-----------------|-------------------------|---------------------|---------------------------------|
| none     | allreduce_hook  | all-reduce              | yes                 | torch default_hooks.py          |
| fp16     | fp16_hook       | all-reduce in fp16      | yes                 | torch default_hooks.py          |
| powersgd | powersgd_hook   | all-reduce of P, then Q | yes (P, Q linear)   | Vogels et al. 2019              |
| topk     | topk_hook       | all-gather (index, val) | no                  | Lin et al. 2018 (DGC)           |
| int8/fp8 | quantize_hook   | all-gather codes+scale  | no                  | 8-bit codes, per-bucket scale   |

closed_form: bytes and collectives per method, and the link bandwidth below which compressing pays.
hook_for(method, **params) -> (state, hook); tradeoff: a small teacher-student task trained on ranks
with each method of VARIANTS (bytes per step, final loss, compression overhead), on loopback and on
emulated slow inter-node links (link_sweep), and the crossovers, measured and modelled.
against_torch: our hooks next to torch's own (powerSGD_hook, fp16_compress_hook) on one model.
"""

from commlib.compression.closed_form import (METHODS, bytes_per_rank, collectives, comm_time,
                                             crossover_bandwidth, topk_count)
from commlib.compression.comm import Bucket, HookComm, HookState, allreduce_hook
from commlib.compression.powersgd import PowerSGDState, orthogonalize_, powersgd_hook
from commlib.compression.quantization import QuantState, dequantize, fp16_hook, int8_ring_sum, quantize, quantize_hook
from commlib.compression.sparse import TopKState, topk, topk_hook
from commlib.compression.tradeoff import VARIANTS, hook_for

__all__ = ["METHODS", "bytes_per_rank", "collectives", "comm_time", "crossover_bandwidth", "topk_count",
           "Bucket", "HookComm", "HookState", "allreduce_hook", "PowerSGDState", "orthogonalize_", "powersgd_hook",
           "QuantState", "dequantize", "fp16_hook", "int8_ring_sum", "quantize", "quantize_hook",
           "TopKState", "topk", "topk_hook", "VARIANTS", "hook_for"]
