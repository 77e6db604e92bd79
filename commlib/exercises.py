"""Checkers for the notebooks' exercises: each returns a Verdict, and rejects wrong answers with a hint.

A checker never raises on a wrong or missing answer (the notebook keeps running); it says what is
wrong. `Verdict.ok` is what tests assert on.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str

    def __repr__(self) -> str:
        return ("Correct. " if self.ok else "Not yet. ") + self.message

    def __bool__(self) -> bool:
        return self.ok


def _missing(answer) -> Verdict | None:
    if answer is None or answer is Ellipsis:
        return Verdict(False, "Replace the None (or ...) with your answer, then run the cell again.")
    return None


def _number(answer, name: str) -> Verdict | None:
    if isinstance(answer, bool) or not isinstance(answer, Real):
        return Verdict(False, f"{name} should be a number, got {type(answer).__name__}.")
    return None


def _first_problem(*problems: Verdict | None) -> Verdict | None:
    # Not `a or b`: a Verdict is falsy when it rejects, which is exactly when it must be returned.
    return next((p for p in problems if p is not None), None)


# ------------------------------------------------------------------------------ chapter 0
def ch0_all_reduce_value(answer, world_size: int = 4) -> Verdict:
    """Each rank r holds r + 1; after all_reduce(SUM) every rank holds 1 + 2 + ... + p = p(p+1)/2."""
    bad = _first_problem(_missing(answer), _number(answer, "the value"))
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
    bad = _missing(fn)
    if bad is not None:
        return bad
    if not callable(fn):
        return Verdict(False, f"pass your function itself (no parentheses), got {type(fn).__name__}.")
    from commlib.cluster import ClusterTimeout, RankError

    p = cluster.world_size
    expected = max((3 * r) % p for r in range(p))
    try:
        got = cluster.run(fn)
    except RankError as e:
        return Verdict(False, f"rank {e.rank} raised: {e.remote_traceback.strip().splitlines()[-1]}")
    except ClusterTimeout:
        return Verdict(False, "it never finished: does every rank call the same collective?")
    values = [float(g.item() if hasattr(g, "item") else g) for g in got]
    if values == [expected] * p:
        return Verdict(True, f"every rank returned {expected}.")
    own = [float((3 * r) % p) for r in range(p)]
    if values == own:
        return Verdict(False, "each rank returned its own value: use dist.all_reduce with op=dist.ReduceOp.MAX.")
    if values == [float(sum(own))] * p:
        return Verdict(False, "that is the sum: pass op=dist.ReduceOp.MAX to all_reduce.")
    return Verdict(False, f"expected {expected} on every rank, got {values}.")
