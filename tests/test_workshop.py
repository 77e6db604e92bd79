"""commlib.workshop: the chapter 9 scenario's numbers, and checkers that accept them and name the usual mistakes."""

import numpy as np
import pytest
import torch

from commlib import cost
from commlib import workshop as ws
from odd_answers import ODD_ANSWERS, verdict_failures


def test_the_model_is_llama_2_7b():
    assert ws.params() == 6_738_415_616                       # Llama-2-7B, its RMSNorm weights included
    assert len(ws.tensors()) == 291                            # 2 + 9 x 32 + 1, as in its state dict
    assert ws.tensors().count(4096) == 65                      # 2 RMSNorms per layer and the final one


def test_workshop_checkers():
    nv, ib = list(ws.CLUSTERS)
    n = ws.params() * 2
    assert ws.comm_s(nv) == pytest.approx(cost.collective_time("all_reduce", n, 8, "nvlink4"))
    assert ws.check_comm_time(ws.comm_s(ib), ib).ok
    assert "2 bytes per parameter" in ws.check_comm_time(2 * ws.comm_s(ib), ib).message
    assert "one copy of the gradients" in ws.check_comm_time(n / 50e9, ib).message
    back = ws.backward_s()
    assert back == pytest.approx(4 * ws.params() * 16384 / (989e12 * 0.4))
    assert ws.check_backward_time(back).ok and "forward + backward" in ws.check_backward_time(1.5 * back).message
    exposed = ws.exposed_s(ib)
    assert 0 < exposed < 0.05 * ws.comm_s(ib)  # overlap hides almost all of it
    assert ws.check_exposed(exposed, ib).ok
    assert "only the tail" in ws.check_exposed(ws.comm_s(ib), ib).message
    assert "always exposed" in ws.check_exposed(0, ib).message
    assert ws.check_best_bucket(25, ib).ok and not ws.check_best_bucket(6400, ib).ok
    assert "33 MiB or more" not in ws.check_best_bucket(25, ib).message  # 4096 x 4096 x 2 B = 32 MiB
    assert "32 MiB or more" in ws.check_best_bucket(25, ib).message
    assert ws.timeline(ib).total_s == pytest.approx(ws.backward_s() + exposed)
    with pytest.raises(ValueError, match="cluster must be one of"):
        ws.check_comm_time(1.0, "a TPU pod")


def test_missing_answers_are_not_errors():
    assert not ws.check_backward_time(None) and "Replace the None" in ws.check_backward_time(None).message
    assert "choose one of" in ws.check_best_bucket(30, list(ws.CLUSTERS)[0]).message


# Every checker of the workshop, with the arguments notebooks/09_workshop.ipynb passes.
NVLINK, INFINIBAND = list(ws.CLUSTERS)
CHECKERS = {
    "check_comm_time": [lambda a: ws.check_comm_time(a, NVLINK), lambda a: ws.check_comm_time(a, INFINIBAND)],
    "check_backward_time": [ws.check_backward_time],
    "check_exposed": [lambda a: ws.check_exposed(a, INFINIBAND)],
    "check_best_bucket": [lambda a: ws.check_best_bucket(a, INFINIBAND)],
}


def test_every_checker_is_in_the_odd_answer_table():
    assert {name for name in dir(ws) if name.startswith(("ch", "check")) and callable(getattr(ws, name))} == set(CHECKERS)


@pytest.mark.parametrize("name", CHECKERS)
def test_odd_answers_get_a_verdict_never_an_exception(name):
    for check in CHECKERS[name]:
        assert verdict_failures(check, ODD_ANSWERS) == []


def test_numpy_and_tensor_answers_are_numbers():
    assert ws.check_backward_time(np.float32(ws.backward_s())).ok
    assert ws.check_exposed(torch.tensor(ws.exposed_s(INFINIBAND)), INFINIBAND).ok
    assert ws.check_best_bucket(np.int64(25), INFINIBAND).ok
    assert "far too large" in ws.check_comm_time(10**400, NVLINK).message
    assert "one of them, not an array of shape (2,)" in ws.check_best_bucket(np.array([25, 400]), INFINIBAND).message
