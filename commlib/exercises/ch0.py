"""Chapter 0 (start here): the first collective, and a rank function.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import _function_problem, _number, _run_on_ranks, Verdict


def ch0_all_reduce_value(answer, world_size: int = 4) -> Verdict:
    """Each rank r holds r + 1; after all_reduce(SUM) every rank holds 1 + 2 + ... + p = p(p+1)/2."""
    world_size = check.integer("world_size", world_size, 1, check.MAX_RANKS)
    answer, bad = _number(answer, "the value")
    if bad is not None:
        return bad
    expected = world_size * (world_size + 1) / 2
    if answer == expected:
        return Verdict(True, f"every rank holds 1 + 2 + ... + {world_size} = {expected:g}.")
    if answer == world_size:
        return Verdict(False, "that is the number of ranks; all_reduce with SUM adds the values held by the ranks.")
    if answer in range(1, world_size + 1):
        return Verdict(False, "after an all_reduce every rank holds the same result: the sum over all ranks, "
                              "not only its own value.")
    return Verdict(False, f"add up what the {world_size} ranks hold: rank r holds r + 1.")


def ch0_rank_max(cluster, fn) -> Verdict:
    """fn() must return, on every rank, the maximum over ranks of (3 * rank) % p, computed with a collective."""
    bad = _function_problem(fn)
    if bad is not None:
        return bad
    p = cluster.world_size
    expected = max((3 * r) % p for r in range(p))
    got, bad = _run_on_ranks(cluster, _counting_calls, fn, hang="does every rank call the same collective?")
    if bad is not None:
        return bad
    values = []
    for rank, (g, calls) in enumerate(got):
        if g is None:
            return Verdict(False, f"rank {rank} returned None: end your function with return (the maximum, "
                                  "as a number or a one-element tensor).")
        x, bad = _number(g, f"the result of rank {rank}")
        if bad is not None:
            return bad
        values.append(float(x))
    silent = [rank for rank, (_, calls) in enumerate(got) if calls == 0]
    if values == [expected] * p and silent:
        return Verdict(False, f"the values are right, but rank {silent[0]} called no collective: it worked the "
                              "maximum out alone. Let each rank compute only its own value, then combine them with "
                              "one collective (dist.all_reduce with op=dist.ReduceOp.MAX).")
    if values == [expected] * p:
        return Verdict(True, f"every rank returned {expected}.")
    own = [float((3 * r) % p) for r in range(p)]
    if values == own:
        return Verdict(False, "each rank returned its own value: use dist.all_reduce with op=dist.ReduceOp.MAX.")
    if values == [float(sum(own))] * p:
        return Verdict(False, "that is the sum: pass op=dist.ReduceOp.MAX to all_reduce.")
    return Verdict(False, f"expected {expected} on every rank, got {values}.")


# what a rank's process group does for each collective and point-to-point call (ProcessGroup's methods, torch 2.13);
# barrier is left out: it exchanges no values
_CALLS = ("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced",
          "all_gather_single", "all_gather_single_coalesced", "_allgather_base", "broadcast", "reduce", "reduce_scatter",
          "reduce_scatter_single", "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced",
          "_reduce_scatter_base", "alltoall", "alltoall_base", "all_to_all_single", "gather", "scatter", "send", "recv",
          "recv_anysource")


def _counting_calls(fn):
    """Inside a rank: fn() -> (its result, the collective and point-to-point calls it made on any process group).
    torch.distributed's functions all reach these methods, whatever name the learner imported them by."""
    from torch._C._distributed_c10d import ProcessGroup

    saved, counted = {n: getattr(ProcessGroup, n) for n in _CALLS if hasattr(ProcessGroup, n)}, [0]

    def counting(method):
        def call(self, *args, **kwargs):
            counted[0] += 1
            return method(self, *args, **kwargs)
        return call

    try:
        for name, method in saved.items():
            setattr(ProcessGroup, name, counting(method))
        out = fn()
    finally:
        for name, method in saved.items():
            setattr(ProcessGroup, name, method)
    return out, counted[0]
