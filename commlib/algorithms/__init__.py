"""Collectives written from scratch on torch.distributed point-to-point calls (isend/irecv/send/recv).

Call them inside a rank (the default process group initialised); each returns its result tensor.
The steps of each algorithm are the structure of its code. Pass trace=Trace() to record every
message this rank sends (who, to whom, which chunk, how many bytes).

    ring_all_reduce(t)          = ring_reduce_scatter + ring_all_gather, in place, like dist.all_reduce
    ring_reduce_scatter(t)      -> this rank's shard (sizes: shard_sizes(t.numel(), p))
    ring_all_gather(shard)      -> all shards concatenated in rank order (uneven shards allowed)
    send(t, dst) / recv(t, src) one message, through the same layer (paced under an emulated network)
    naive_all_reduce(t)         reduce to rank 0, then rank 0 sends the result to everyone
    tree_broadcast / tree_reduce / tree_all_reduce     binomial trees                     (mpi.py)
    recursive_doubling_all_reduce / rabenseifner_all_reduce   non-powers of two folded as in MPICH (mpi.py)
    double_binary_tree_all_reduce / ring_broadcast     NCCL's Tree and its chain broadcast     (nccl.py)
    hierarchical_all_reduce / multi_ring_all_reduce / pairwise_all_to_all   nodes of gpus_per_node ranks
                                (nodes.py; emulated slow links between nodes: emulation.py, network.emulate)

One file per family, all on the point-to-point layer of p2p.py (messages, validation, the emulated network);
trace.py records and replays what was sent. Which algorithm runs which op, and what it costs, is registered
once in commlib.cost.registry: the cost model, bench and the notebooks read it there.

Before moving data, every rank checks (one tiny built-in all-gather) that all ranks passed the same
numel, dtype and op; a mismatch raises the same ValueError on every rank instead of hanging.
check=False skips it (benchmarks do, to time the algorithm alone).

The same code runs over Gloo (CPU tensors) and NCCL (CUDA tensors); p2p.py says how each is driven.
Settings for tests and benchmarks live in p2p: p2p.GROUP_P2P, p2p.SEGMENT_BYTES.
"""

from commlib.algorithms.mpi import (rabenseifner_all_reduce, recursive_doubling_all_reduce, tree_all_reduce,
                                    tree_broadcast, tree_reduce)
from commlib.algorithms.naive import naive_all_reduce
from commlib.algorithms.nccl import double_binary_tree_all_reduce, ring_broadcast
from commlib.algorithms.nodes import hierarchical_all_reduce, multi_ring_all_reduce, pairwise_all_to_all
from commlib.algorithms.p2p import DTYPES, REDUCE_OPS, network, recv, send
from commlib.algorithms.ring import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from commlib.algorithms.trace import Event, Trace, replay
from commlib.cost import shard_sizes

__all__ = ["Trace", "Event", "replay", "shard_sizes", "DTYPES", "REDUCE_OPS", "network", "send", "recv",
           "ring_all_reduce", "ring_reduce_scatter", "ring_all_gather", "naive_all_reduce",
           "tree_broadcast", "tree_reduce", "tree_all_reduce", "recursive_doubling_all_reduce",
           "rabenseifner_all_reduce", "double_binary_tree_all_reduce", "ring_broadcast",
           "hierarchical_all_reduce", "multi_ring_all_reduce", "pairwise_all_to_all"]
