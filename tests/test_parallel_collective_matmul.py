"""commlib.parallel.collective_matmul: all-gather + matmul in p overlapped steps equals the plain layer."""

import sys

import cloudpickle
import pytest

from commlib.parallel import live

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("tp", [2, 4])
def test_collective_matmul_equals_all_gather_then_matmul(cluster4, tp, overlap):
    for r in cluster4.run(live.collective_matmul, tp, overlap, rows=8, hidden=16, cols=12):
        assert r["max_err"] < 1e-6
        assert r["sent_bytes"] == r["expected_bytes"] == (tp - 1) * 8 * 16 * 4   # a ring all-gather's
        assert r["steps"] == tp


def test_ring_overlap_reports_every_step_and_the_model(cluster4):
    """The emulated run's bookkeeping (no timing asserted): one (compute, wait) per step, the block's bytes and
    transfer time, a model for every rank."""
    for kind, nbytes in (("matmul", 8 * 16 * 4), ("attention", 2 * 1 * 2 * 8 * 8 * 4)):
        for r in cluster4.run(live.ring_overlap, kind, 1e9, 0.0, True, seq=32, heads=2, head_dim=8, rows=8,
                              hidden=16):
            assert len(r["steps"]) == 4 and r["nbytes"] == nbytes
            assert r["message_s"] == nbytes / 1e9
            assert r["model"] >= 0 and r["measured"] >= 0 and r["compute_s"] > 0


def test_ring_overlap_repeats_reports_medians(cluster4):
    """repeats=3: every number is the median of three runs, so ring_s (compute + exposed) >= compute_s still."""
    for r in cluster4.run(live.ring_overlap, "matmul", 1e9, 0.0, True, rows=8, hidden=16, repeats=3):
        assert len(r["steps"]) == 4 and r["ring_s"] >= r["compute_s"] > 0 and r["measured"] >= 0
