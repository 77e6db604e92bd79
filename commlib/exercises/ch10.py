"""Chapter 10 (debugging): which kind of failure, who is the culprit, and a deadlock fixed.

Each checker returns a Verdict and never raises on a wrong, odd or missing answer (commlib.exercises.answers
reads it); a nonsensical parameter, the notebook author's, is a ValueError/TypeError naming it.
"""

from __future__ import annotations

from commlib.exercises.answers import (Verdict, _choice, _first_line, _function_problem, _is, _missing, _plain,
                                       _unwrap, _values)

KINDS = ("mismatch", "missing", "p2p", "unknown")

# scenario -> (what happens, the kind, why)
SCENARIOS = {
    "nan_skip": ("rank 3 sees a NaN loss and skips the step, and with it the step's all_reduce of the gradients",
                 "missing", "rank 3 never enters the all_reduce the others wait in."),
    "ragged_last_batch": ("in a Cluster(debug=True), the last batch is shorter on rank 1, and each rank "
                          "all-reduces a buffer sized by its own batch", "mismatch", "same collective, same position, a different size on rank 1."),
    "both_send_first": ("pipeline stages 0 and 1 both call recv first, then send: each waits for the other's "
                        "message", "p2p", "two recvs with no send to match them: both ranks are left waiting."),
    "eval_branch": ("rank 2 takes an evaluation branch that broadcasts a metric while the others all-reduce "
                    "gradients", "mismatch", "different collectives at the same position in the group."),
    "loader_error": ("rank 1 raises a KeyError while loading its batch, before the step's all_reduce; the other "
                     "ranks are already in it", "missing", "a rank that raised never enters the collective: to the "
                     "others it is missing, like a rank that returned early."),
    "all_raise": ("every rank raises the same ValueError in its data loader before any collective of the step",
                  "unknown", "no rank waits for another: the records all agree, and the error itself is the story."),
}


def ch10_kind(answer, scenario: str) -> Verdict:
    """The diagnosis kind ('mismatch', 'missing', 'p2p' or 'unknown') a Cluster reports for SCENARIOS[scenario]."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {tuple(SCENARIOS)}, got {scenario!r}")
    answer = _plain(answer)  # a str subclass as the plain str it holds; nothing of the answer's own runs
    value, bad = _choice(answer.strip().lower() if _is(answer, str) else answer, KINDS)
    if bad is not None:
        return bad
    _, want, why = SCENARIOS[scenario]
    if value == want:
        return Verdict(True, f"{want}: {why}")
    hints = {"mismatch": "a mismatch needs every rank to call a collective there, and them to differ.",
             "missing": "a missing rank is one that never calls the collective the others wait in.",
             "p2p": "p2p is about send and recv, not collectives.",
             "unknown": "one of the three kinds fits: who calls what, at which position?"}
    return Verdict(False, hints[value])


def _ranks_of(answer) -> tuple[list[int] | None, Verdict | None]:
    missing = _missing(answer)
    if missing is not None:
        return None, missing
    value, several = _unwrap(answer)
    if several:
        try:
            value = [int(x) for x in answer.reshape(-1).tolist()]
        except Exception:
            return None, Verdict(False, f"give a rank (an int) or a list of ranks, got {several}.")
    if _is(value, bool):
        return None, Verdict(False, "give a rank (an int) or a list of ranks, not True/False.")
    if _is(value, int):
        return [value], None
    if _is(value, (list, tuple, set)) and value and all(_is(r, int) and not _is(r, bool) for r in value):
        try:
            return sorted({int.__index__(r) for r in value}), None  # plain ints: no subclass method runs
        except Exception:
            pass
    return None, Verdict(False, f"give a rank (an int) or a list of ranks, got {type(value).__name__}.")


def odd_ranks(snapshots: dict) -> tuple[list[int], str]:
    """From the records alone, not the diagnosis: the ranks whose sequence of collectives (op, sizes, dtypes, in
    order) differs from the one more than half of the ranks hold -> (ranks, why). No such majority: ValueError
    (a puzzle with no single answer is the notebook author's error)."""
    from commlib.cluster import flight_recorder

    seqs = {r: tuple(flight_recorder.describe(e) for e in flight_recorder.records(s)) for r, s in snapshots.items()}
    classes: dict = {}
    for r, seq in sorted(seqs.items()):
        classes.setdefault(seq, []).append(r)
    if len(classes) < 2 or 2 * max(len(v) for v in classes.values()) <= len(seqs):
        raise ValueError(f"error's records must have one sequence that more than half of the ranks hold, and "
                         f"ranks that differ from it, got {sorted(classes.values())}")
    majority = max(classes, key=lambda k: len(classes[k]))
    odd = sorted(r for k, v in classes.items() if k != majority for r in v)
    why = "; ".join(f"rank {r} called {len(seqs[r])} collective(s) where ranks {classes[majority]} called "
                    f"{len(majority)}" for r in odd)
    return odd, why


def ch10_culprit(answer, error) -> Verdict:
    """The culprit rank(s) of a failed run, read from its records (error.snapshots) by majority and sequence: the
    ranks whose collectives differ from what more ranks called. error: the exception run() raised; a diagnosis
    dict (no records) is taken at its word."""
    diagnosis = getattr(error, "diagnosis", error)
    if not isinstance(diagnosis, dict) or "ranks" not in diagnosis:
        raise TypeError(f"error must be a RankError/ClusterTimeout with .diagnosis, or a diagnosis dict, "
                        f"got {type(error).__name__}")
    ranks, bad = _ranks_of(answer)
    if bad is not None:
        return bad
    snapshots = getattr(error, "snapshots", None)
    want, why = odd_ranks(snapshots) if snapshots else (sorted(diagnosis["ranks"]), diagnosis["detail"])
    if ranks == want:
        return Verdict(True, why)
    if set(ranks) < set(want):
        return Verdict(False, "some of them: more than one rank is to blame here.")
    if set(want) < set(ranks):
        return Verdict(False, "too many: some of those ranks did what the majority did.")
    return Verdict(False, "compare the ranks' records at the first collective number where they differ: "
                          "the culprits are the ranks that differ from the majority, or that have no record there.")


def ch10_fix_exchange(cluster, fn) -> Verdict:
    """fn(t) on rank r must return the tensor of rank r ^ 1 (pairs 0-1, 2-3, ...) using dist.send/dist.recv
    (or isend/irecv, batch_isend_irecv), without the recv-recv deadlock. Each rank passes torch.full((4,), rank);
    each rank must post a send to its partner and a receive from it (counted by the cluster's p2p log)."""
    from commlib.cluster import ClusterTimeout, RankError

    if cluster.world_size % 2:
        raise ValueError(f"cluster must have an even world_size for pairs r, r ^ 1, got {cluster.world_size}")
    bad = _function_problem(fn)
    if bad is not None:
        return bad
    old, cluster.timeout = cluster.timeout, min(cluster.timeout, 5.0)  # a deadlock is reported in seconds
    try:
        got = cluster.run(_exchange_on_rank, fn)
    except (RankError, ClusterTimeout) as e:
        d = getattr(e, "diagnosis", None) or {}
        if d.get("kind") in (None, "unknown") and isinstance(e, RankError):  # a plain error: its last line says it
            lines = (e.remote_traceback or "").strip().splitlines()
            return Verdict(False, f"rank {e.rank} raised: {lines[-1] if lines else _first_line(str(e))}")
        if d.get("kind") == "p2p":
            return Verdict(False, f"still a deadlock: {d['detail']} Let even ranks send first and odd ranks "
                                  "receive first, or post both with isend/irecv and wait.")
        return Verdict(False, d.get("detail") or _first_line(str(e)))
    except Exception as e:  # the function cannot be pickled, ...
        return Verdict(False, f"it could not run on the ranks: {type(e).__name__}: {_first_line(str(e))}")
    finally:
        cluster.timeout = old
    for rank, (value, ok, unposted) in enumerate(got):
        if unposted:
            return Verdict(False, f"rank {rank} {unposted}: the exercise is the send/recv exchange, not a collective.")
        if not ok:
            return Verdict(False, f"rank {rank} returned {value}: return the tensor you received.")
    return Verdict(True, "every pair swapped its tensors with send/recv, without waiting on each other.")


def _exchange_on_rank(fn):
    import torch
    import torch.distributed as dist

    from commlib.cluster import p2p_log

    rank = dist.get_rank()
    before = p2p_log.snapshot()["posted"]
    out = fn(torch.full((4,), float(rank)))
    after = p2p_log.snapshot()["posted"]
    new = {k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)}
    sent = any(op == "send" and peer == rank ^ 1 for op, peer, _ in new)
    got = any(op == "recv" and peer in (rank ^ 1, None) for op, peer, _ in new)
    unposted = "" if sent and got else f"posted no {'send to' if not sent else 'recv from'} rank {rank ^ 1}"
    want = torch.full((4,), float(rank ^ 1))
    if isinstance(out, torch.Tensor) and out.shape == want.shape and torch.equal(out.float(), want):
        return None, True, unposted
    return (_values(out) if isinstance(out, torch.Tensor) else type(out).__name__), False, unposted
