"""Chapter 1 (collectives): bytes of a ring all-reduce, and a ring all-gather built from send/recv.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib import _validate as check
from commlib.exercises.answers import close, _function_problem, _number, _run_on_ranks, _values, Verdict


def ch1_ring_bytes(answer, nbytes: float, world_size: int) -> Verdict:
    """Bytes each rank sends in a ring all-reduce of nbytes on p ranks: 2(p-1)/p * nbytes."""
    from commlib import cost

    n, p = check.number("nbytes", nbytes, low=0, unit="bytes", high=check.MAX_BYTES), check.integer("world_size", world_size, 1, check.MAX_RANKS)
    answer, bad = _number(answer, "the number of bytes")
    if bad is not None:
        return bad
    want = cost.bytes_sent_per_rank("all_reduce", n, p, "ring")
    if close(answer, want, rel=1e-6, atol=1e-6):
        return Verdict(True, f"2(p-1)/p * n = 2*{p - 1}/{p} * {n:g} = {want:g} bytes.")
    if close(answer, (p - 1) / p * n, rel=1e-6, atol=1e-6):
        return Verdict(False, "that is one phase. All-reduce = reduce-scatter + all-gather: both send (p-1)/p * n.")
    if close(answer, 2 * n, rel=1e-6, atol=1e-6):
        return Verdict(False, "2n is the limit for many ranks. With p ranks each of the 2(p-1) steps sends n/p bytes.")
    if close(answer, 2 * (p - 1) * n, rel=1e-6, atol=1e-6) or close(answer, (p - 1) * n, rel=1e-6, atol=1e-6):
        return Verdict(False, "each ring step sends one chunk of n/p bytes, not the whole tensor.")
    if close(answer, n, rel=1e-6, atol=1e-6):
        return Verdict(False, "count the steps: 2(p-1) of them, each sending n/p bytes.")
    return Verdict(False, "count the steps (2(p-1)) and the size of one message (n/p).")


_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_single", "all_gather_into_tensor", "all_gather_object",
                "broadcast", "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor",
                "all_to_all", "all_to_all_single", "scatter", "gather", "gather_object", "broadcast_object_list")


def _run_p2p_only(fn, shard_len_of_rank):
    """Inside a rank: run fn(shard) with the built-in collectives disabled; -> (result, expected)."""
    import torch
    import torch.distributed as dist

    r, p = dist.get_rank(), dist.get_world_size()
    shards = [torch.arange(shard_len_of_rank(q), dtype=torch.float32) + 100 * q for q in range(p)]
    saved = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}

    def forbidden(*_a, **_k):
        raise RuntimeError("this exercise is about building the collective: use only "
                           "dist.send/recv/isend/irecv, not the built-in collectives")

    try:
        for name in saved:
            setattr(dist, name, forbidden)
        got = fn(shards[r].clone())
    finally:
        for name, f in saved.items():
            setattr(dist, name, f)
    return got, torch.cat(shards)


def ch1_ring_all_gather(cluster, fn) -> Verdict:
    """fn(shard) -> every rank's shard concatenated in rank order, built from send/recv only."""
    bad = _function_problem(fn)
    if bad is not None:
        return bad
    import torch

    for label, lengths in (("equal shards", lambda q: 3), ("shards of different lengths", lambda q: q + 1)):
        out, bad = _run_on_ranks(cluster, _run_p2p_only, fn, lengths, context=f"with {label}, ",
                                 hang="does every send have a matching recv, posted in an order that cannot "
                                      "deadlock (isend + irecv, then wait)?")
        if bad is not None:
            return bad
        for rank, (got, want) in enumerate(out):
            if not isinstance(got, torch.Tensor):
                if got is None:  # its own message: the question is a sentence of its own in the catalog
                    return Verdict(False, f"return the gathered tensor; rank {rank} returned NoneType (does your "
                                          f"function end with return?).")
                return Verdict(False, f"return the gathered tensor; rank {rank} returned {type(got).__name__}.")
            try:
                same = got.shape == want.shape and torch.equal(got, want)
            except Exception as e:  # a meta, sparse or complex tensor
                return Verdict(False, f"with {label}, rank {rank} returned a {got.dtype} tensor on {got.device} "
                                      f"that cannot be compared with the expected one ({type(e).__name__}).")
            if not same:
                return Verdict(False, f"with {label}, rank {rank} returned {_values(got)}, expected {_values(want)}. "
                                      "Is each received chunk stored at the offset of the rank it came from?")
    return Verdict(True, "every rank ends with all shards in rank order, for equal and unequal shard lengths.")
