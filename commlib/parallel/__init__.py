"""Small real implementations of the parallelisms, run inside ranks, each checked against one process.

    comm.py      Comm: collectives on a group that count the bytes this rank sends, per kind
    zero.py      DDP, ZeRO-1/2/3 (FSDP) with Adam; what DDP broadcasts at start
    ddp.py       BucketedDDP: DDP's buckets, all-reduced while backward runs, and the measured timeline
    tensor.py    Megatron tensor parallelism (f/g operators), and its sequence-parallel variant
    pipeline.py  GPipe and 1F1B over point-to-point; live activations; the measured bubble
    experts.py   a mixture-of-experts layer: top-k routing, all-to-all dispatch and combine
    context.py   context parallelism: ring attention (contiguous or zig-zag), and all-gathered K/V (Llama 3)
    collective_matmul.py  the ring pass, its timeline model, and the collective matmul (async TP)
    mesh.py      FSDP2 x DTensor TP on a 2-D DeviceMesh; CommDebugMode per mesh dimension; redistributions
    live.py      the runs chapters 7 and 8 show (and the tests check): each parallelism beside its reference
    faults.py    the fault matrix: those programs, and faults injected at one rank (chapter 10, its benchmark)

commlib.plan prices the same communication in closed form; tests hold the two equal.
"""

from commlib.parallel.comm import Comm

__all__ = ["Comm"]
