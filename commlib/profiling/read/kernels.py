"""What an NCCL kernel's name says: its op and, where the name proves it, its algorithm.

    kernel_info("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(...)")   # -> {op, algorithm, form}

From NCCL's source, checked: NCCL compiles specialised kernels for a few functions only
and runs every other (algorithm, protocol) through the same kernel by a function table.
  old form, NCCL <= 2.18  ncclKernel_AllReduce_RING_LL_Sum_float: one kernel per algorithm, always the LL one
                          ("Only generate inline kernels for LL", v2.17.1 src/enqueue.cc and
                          src/collectives/device/common.h): the ALGORITHM is real, the protocol is not in it.
  new form, NCCL >= 2.19  ncclDevKernel_AllReduce_Sum_f32_RING_LL: best_kernel() in src/device/generate.py
                          (v2.30.7) names TREE for the tree and RING_LL for every other algorithm (ring, NVLS,
                          CollNet, PAT) and protocol: only TREE is an answer.
So `algorithm` is what the name proves (None otherwise) and `protocol` is None: from NCCL 2.20, rank 0 prints
NCCL's choice per call with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING ("AllReduce: N Bytes -> Algo RING proto
SIMPLE ...", by name from 2.24; v2.30.7 src/enqueue.cc); before 2.20 the line is commented out.
"""

import re

KERNEL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather",
              "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce",
              "SendRecv": "send_recv", "AllToAll": "all_to_all", "Generic": None}
_ALGOS = "COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|COLLNET|TREE|RING|PAT"
_OLD = re.compile(rf"^ncclKernel_(?P<op>[A-Za-z]+)_(?P<algo>{_ALGOS})_(?P<proto>LL128|LL|SIMPLE)_")
_NEW = re.compile(rf"^ncclDevKernel_(?P<op>[A-Za-z]+?)(?:_(?P<rest>[A-Za-z0-9_]*?))?(?:_(?P<algo>{_ALGOS})_"
                  rf"(?P<proto>LL128|LL|SIMPLE))?(?:\(|$)")


def kernel_info(name: str) -> dict:
    """op, algorithm and the name's form ('old' | 'new' | None) of an NCCL kernel name; see the module
    docstring for why the protocol is never read from it and the algorithm only where the name proves it."""
    short = name.split("(")[0]
    m = _OLD.match(short)
    if m:  # one kernel per algorithm; p2p kernels name no algorithm of theirs
        op = KERNEL_OPS.get(m["op"])
        return {"op": op, "algorithm": None if op == "send_recv" else m["algo"].lower(), "form": "old"}
    m = _NEW.match(short)
    if m:
        return {"op": KERNEL_OPS.get(m["op"]), "algorithm": "tree" if m["algo"] == "TREE" else None, "form": "new"}
    return {"op": None, "algorithm": None, "form": None}
