"""Planning a training job: memory per GPU, bytes per rank and step time of DP / ZeRO 1-3 / TP / SP / PP / EP,
and a search over configurations. Pure Python (no torch); sizes in bytes, times in seconds.

    planner.py    the formulas (ZeRO, Megatron, GPipe/1F1B, MoE), Config/Estimate, estimate() and search()
    hardware_model.py  the machine: a commlib.topology.Topology of GPUs with their memory and FLOP/s, and what a
                  parallel group's collectives cost on it
    models.py     the model: a decoder's shape, its parameter count, published presets
    flops.py      FLOPs of a step: 6 x params x tokens and the causal attention scores
    context.py    context parallelism: ring attention's bytes and what the attention hides of them
    summary.py    a cluster as people read it: one line (describe_topology) and its sources
    zero_variants.py  what DeepSpeed's ZeRO-1/2 and FSDP2's kept units send, beside the ZeRO paper's collectives
"""

from commlib.plan.hardware_model import (ALGORITHM, ALL_TO_ALL, GPU, GPUS, PRESET_GPU, Hardware, clear_cache,  # noqa: F401
                                   collective_s, group_shape, group_topology, hardware, p2p_s)
from commlib.plan.models import MODELS, SOURCES, Model  # noqa: F401
from commlib.plan.planner import (BLOCKS, DP_COLLECTIVES, RECOMPUTE, SCHEDULES, STATE_BYTES, Assumptions,  # noqa: F401
                                  Config, Estimate, activation_bytes_per_layer, configurations, dp_bytes_per_rank,
                                  ep_bytes_per_rank, estimate, groups, init_broadcast_bytes, logits_bytes,
                                  microbatches_in_flight, model_activation_bytes_per_layer,
                                  megatron_state_bytes, model_state_breakdown, model_state_bytes,
                                  pipeline_bubble, pp_bytes_per_rank, search, tp_bytes_per_rank,
                                  mesh_collectives, validate)
from commlib.plan.flops import attention_flops, step_flops  # noqa: F401
from commlib.plan.context import (cp_backward_bytes_per_rank, cp_bytes_per_rank, cp_layer_times,  # noqa: F401
                                  ring_exposed_s)
from commlib.plan.summary import NODE_NAMES, describe_topology, topology_sources  # noqa: F401
from commlib.plan.zero_variants import (ZERO12, fsdp_bytes_per_rank, zero12_bytes_per_rank,  # noqa: F401
                                        zero12_collectives)
