"""What an NCCL kernel's name says: its op and, where the name proves it, its algorithm (and protocol).

    kernel_info("ncclDevKernel_AllReduce_Sum_f32_TREE_LL(...)")   # -> {op, algorithm, protocol, form, since}

From NCCL's source, checked: NCCL compiles specialised kernels for a few functions only
and runs every other (algorithm, protocol) through the same kernel by a function table.
  old form, NCCL <= 2.18  ncclKernel_AllReduce_RING_LL_Sum_float: one kernel per algorithm, always the LL one
                          ("Only generate inline kernels for LL", v2.17.1 src/enqueue.cc and
                          src/collectives/device/common.h): the ALGORITHM is real, the protocol is not in it.
  new form, NCCL >= 2.19  ncclDevKernel_AllReduce_Sum_f32_RING_LL: best_kernel() in src/device/generate.py
                          (v2.30.7) names TREE for the tree and RING_LL for every other algorithm (ring, NVLS,
                          CollNet, PAT) and protocol: only TREE is an answer.
  symmetric, NCCL >= 2.27 ncclSymDevKernel_AllReduce_AGxLL_R_sum_f32 (2.27), ncclSymkDevKernel_... from 2.28: the
                          kernels for buffers registered as symmetric windows (ncclCommWindowRegister), one kernel
                          per symmetric algorithm, op and type, no function table (kernel_cname() in
                          src/device/symmetric/generate.py, v2.27.3 and v2.30.7; the ids in src/symmetric.cc,
                          v2.27.3, src/sym_kernels.cc, v2.30.7). The name IS the algorithm (AGxLL_R: all-gather in
                          LL form, then reduce; RSxLD_AGxST: reduce-scatter by loads, all-gather by stores; MC:
                          NVLink multicast, NVLS's multimem; Tma: the Hopper copy engine's TMA; Rail..._Lsa..:
                          across nodes, GIN), and LL in it is the LL protocol's flagged 16-byte lines
                          (kernelMask_LL there); the others move plain loads and stores: no protocol named.
A launch's name is one task's: in a batched launch (ncclGroupStart/End, coalesced calls) NCCL takes the kernel of
the first task whose kernel is specialised and runs every task of the launch through it (v2.30.7 src/enqueue.cc,
`if (!plan->kernelSpecialized) plan->kernelFn = ...`), so a name proves the algorithm of one task, not of every
call in the launch; a symmetric launch batches only tasks of the same kernel (src/scheduler/symmetric_sched.cc).
So `algorithm` is what the name proves (None otherwise), `protocol` only a symmetric kernel's LL: from NCCL 2.20,
rank 0 prints NCCL's choice per call with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING ("AllReduce: N Bytes -> Algo
RING proto SIMPLE ...", by name from 2.24; v2.30.7 src/enqueue.cc); before 2.20 the line is commented out.
"""

import re

KERNEL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllGatherV": "all_gather",
              "ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "Reduce": "reduce",
              "SendRecv": "send_recv", "AllToAll": "all_to_all", "Generic": None}
_ALGOS = "COLLNET_DIRECT|COLLNET_CHAIN|NVLS_TREE|NVLS|COLLNET|TREE|RING|PAT"
_OLD = re.compile(rf"^ncclKernel_(?P<op>[A-Za-z]+)_(?P<algo>{_ALGOS})_(?P<proto>LL128|LL|SIMPLE)_")
_NEW = re.compile(rf"^ncclDevKernel_(?P<op>[A-Za-z]+?)(?:_(?P<rest>[A-Za-z0-9_]*?))?(?:_(?P<algo>{_ALGOS})_"
                  rf"(?P<proto>LL128|LL|SIMPLE))?(?:\(|$)")
# ncclSym[k]DevKernel_{Coll}_{Algo}[_{red}_{type}]: red sum | avg, type f32 | f16 | bf16 | f8e4m3 | f8e5m2 (v2.30.7)
_SYM = re.compile(r"^ncclSym(?P<k>k?)DevKernel_(?P<op>AllReduce|AllGather|ReduceScatter)_(?P<algo>[A-Za-z0-9_]+?)"
                  r"(?:_(?:sum|avg|prod|min|max|premulsum)_(?:f32|f16|bf16|f8e4m3|f8e5m2|f64|[iu](?:8|32|64)))?$")
SYMMETRIC_SINCE = {"": "2.27", "k": "2.28"}   # ncclSymDevKernel_ in 2.27; renamed ncclSymkDevKernel_ in 2.28


def kernel_info(name: str) -> dict:
    """op, algorithm, protocol, the name's form ('old' | 'new' | 'symmetric' | None) and the NCCL version that
    introduced that form (since) of an NCCL kernel name; see the module docstring for what a name proves."""
    short = name.split("(")[0]
    m = _OLD.match(short)
    if m:  # one kernel per algorithm; p2p kernels name no algorithm of theirs
        op = KERNEL_OPS.get(m["op"])
        return {"op": op, "algorithm": None if op == "send_recv" else m["algo"].lower(), "protocol": None,
                "form": "old", "since": None}
    m = _NEW.match(short)
    if m:
        return {"op": KERNEL_OPS.get(m["op"]), "algorithm": "tree" if m["algo"] == "TREE" else None,
                "protocol": None, "form": "new", "since": "2.19"}
    m = _SYM.match(short)
    if m:
        algo = m["algo"]
        return {"op": KERNEL_OPS[m["op"]], "algorithm": f"sym_{algo}",
                "protocol": "ll" if re.search(r"(^|x|_)LL", algo) else None,
                "form": "symmetric", "since": SYMMETRIC_SINCE[m["k"]]}
    return {"op": None, "algorithm": None, "protocol": None, "form": None, "since": None}
