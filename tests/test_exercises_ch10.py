"""Chapter 10's checkers: the kind of a failure, its culprits, and a send/recv deadlock fixed (live)."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from commlib import exercises as ex
from commlib.exercises.ch10 import KINDS, SCENARIOS, odd_ranks

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_scenario_has_one_right_kind(scenario):
    want = SCENARIOS[scenario][1]
    assert ex.ch10_kind(want, scenario).ok and ex.ch10_kind(want.upper() + " ", scenario).ok
    assert [k for k in KINDS if ex.ch10_kind(k, scenario).ok] == [want]


def test_unknown_scenario_is_the_authors_error():
    with pytest.raises(ValueError, match="scenario"):
        ex.ch10_kind("missing", "no_such_thing")


def test_culprit_reads_ints_lists_and_numpy_and_says_what_is_off():
    d = {"kind": "mismatch", "ranks": [1, 3], "detail": "d"}
    assert ex.ch10_culprit([3, 1], d).ok and ex.ch10_culprit(torch.tensor([1, 3]), d).ok
    assert "some of them" in ex.ch10_culprit(1, d).message
    assert "too many" in ex.ch10_culprit([0, 1, 3], d).message
    assert not ex.ch10_culprit(2, d).ok
    with pytest.raises(TypeError, match="error"):
        ex.ch10_culprit(1, "not an error")


def _snaps(counts):
    rec = lambda n: {"collective_seq_id": n, "profiling_name": "gloo:all_reduce", "input_sizes": [[4]],
                     "input_dtypes": ["Float"], "process_group": ("0", "default_pg")}
    return {r: {"fr": {"entries": [rec(i + 1) for i in range(n)]}} for r, n in enumerate(counts)}


class _Failed(Exception):
    def __init__(self, snapshots, diagnosis):
        self.snapshots, self.diagnosis = snapshots, diagnosis


def test_culprit_is_read_from_the_records_by_majority_not_echoed_from_the_diagnosis():
    wrong = {"kind": "missing", "ranks": [0, 1, 3], "detail": "a diagnosis that blames the majority"}
    err = _Failed(_snaps([3, 3, 2, 3]), wrong)  # exercise 10.2: rank 2 stops one collective early
    assert odd_ranks(err.snapshots)[0] == [2]
    assert ex.ch10_culprit(2, err).ok and not ex.ch10_culprit([0, 1, 3], err).ok
    assert "rank 2 called 2 collective(s) where ranks [0, 1, 3] called 3" in ex.ch10_culprit([2], err).message
    for counts in ([2, 3, 3, 2], [2, 3, 4, 2]):  # 2-2, or 2-1-1: no single answer, the author's error
        with pytest.raises(ValueError, match="one sequence that more than half of the ranks hold"):
            ex.ch10_culprit(0, _Failed(_snaps(counts), wrong))


def deadlock(t):
    out = torch.empty_like(t)
    dist.recv(out, dist.get_rank() ^ 1)
    dist.send(t, dist.get_rank() ^ 1)
    return out


def batched(t):
    out = torch.empty_like(t)
    peer = dist.get_rank() ^ 1
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, out, peer)]):
        w.wait()
    return out


def gathered(t):
    out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(out, t)
    return out[dist.get_rank() ^ 1]


def made_up(t):
    return torch.full_like(t, float(dist.get_rank() ^ 1))   # the right values, never received


def test_fix_exchange_rejects_the_deadlock_with_its_diagnosis_and_takes_two_fixes(cluster4):
    v = ex.ch10_fix_exchange(cluster4, deadlock)
    assert not v.ok and "still a deadlock: p2p: ranks 0, 1, 2, 3 wait" in v.message
    assert ex.ch10_fix_exchange(cluster4, batched).ok


def test_fix_exchange_requires_send_and_recv_not_a_collective_or_a_made_up_tensor(cluster4):
    v = ex.ch10_fix_exchange(cluster4, gathered)
    assert not v.ok and "rank 0 posted no send to rank 1: the exercise is the send/recv exchange" in v.message
    v = ex.ch10_fix_exchange(cluster4, made_up)
    assert not v.ok and "rank 0 posted no send to rank 1" in v.message
    assert cluster4.timeout == 30  # put back
