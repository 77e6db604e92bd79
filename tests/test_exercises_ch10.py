"""Chapter 10's checkers: the kind of a failure, its culprits, and a send/recv deadlock fixed (live)."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from commlib import exercises as ex
from commlib.exercises.ch10 import KINDS, SCENARIOS

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


def test_fix_exchange_rejects_the_deadlock_with_its_diagnosis_and_takes_two_fixes(cluster4):
    v = ex.ch10_fix_exchange(cluster4, deadlock)
    assert not v.ok and "still a deadlock: p2p: ranks 0, 1, 2, 3 wait" in v.message
    assert ex.ch10_fix_exchange(cluster4, batched).ok
    assert cluster4.timeout == 30  # put back
