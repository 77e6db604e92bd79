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
