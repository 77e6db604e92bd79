"""commlib.parallel.pipeline: schedules, gradients against one process, live activations, bytes, the bubble."""

import sys

import cloudpickle
import pytest

from test_algorithms import errors_of

from commlib import plan
from commlib.parallel import live, zero
from commlib.parallel import pipeline as pl

cloudpickle.register_pickle_by_value(sys.modules[__name__])

HIDDEN, ROWS = 16, 4               # micro-batches of 4 rows; every stage boundary carries 16 features
SIZES = [HIDDEN] * 5               # 4 Linear layers: 1, 2 or 4 stages


def test_schedules_order_the_same_work():
    assert pl.schedule("gpipe", 4, 3, 0) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("B", 1), ("B", 2)]
    # 1F1B on stage 1 of 4: two warm-up forwards, then alternate, then drain
    assert pl.schedule("1f1b", 4, 5, 1) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                            ("F", 4), ("B", 2), ("B", 3), ("B", 4)]
    assert pl.schedule("1f1b", 4, 5, 3) == [x for i in range(5) for x in (("F", i), ("B", i))]
    for kind in pl.SCHEDULES:
        for s in range(4):
            order = pl.schedule(kind, 4, 6, s)
            assert sorted(order) == sorted([("F", i) for i in range(6)] + [("B", i) for i in range(6)])
            assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(6))
    with pytest.raises(ValueError, match="kind must be one of"):
        pl.schedule("zb", 2, 2, 0)


def test_split_stages_needs_layers_divisible_by_pp():
    model = zero.mlp([4] * 7)  # 6 Linear layers
    assert [len(s) for s in pl.split_stages(model, 3)] == [4, 4, 3]  # Linear, Tanh, Linear, Tanh | ... | Linear
    with pytest.raises(ValueError, match=r"layers \(6\) must be divisible by pp=4"):
        pl.split_stages(model, 4)


def test_bubble_from_events():
    # 2 stages, one micro-batch: stage 0 works 0-1 and 3-5, stage 1 works 1-3: step 5, busy 3 and 2
    events = [[("F", 0, 0.0, 1.0), ("B", 0, 3.0, 5.0)], [("F", 0, 1.0, 2.0), ("B", 0, 2.0, 3.0)]]
    got = pl.bubble(events)
    assert got["step_s"] == 5.0 and got["busy_s"] == [3.0, 2.0] and got["bubble"] == pytest.approx(0.5)


def pipelined(pp, kind, m):
    r = live.pipelined(pp, kind, m, rows=ROWS, hidden=HIDDEN, layers=len(SIZES) - 1)
    return r["stage"], r["err"], r["peak_live"], len(r["events"]), r["sent"]


@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
@pytest.mark.parametrize("pp", [1, 2, 4])
def test_pipelined_gradients_equal_one_process(cluster4, pp, kind):
    m = 6
    for s, err, peak, n_events, sent in cluster4.run(pipelined, pp, kind, m):
        assert err < 1e-6, (pp, kind, s, err)
        assert n_events == 2 * m
        # live activations: GPipe holds every micro-batch, 1F1B at most p - s (the first stage: min(p, m))
        assert peak == (m if kind == "gpipe" else min(pp - s, m))
        if s == 0:
            assert peak == plan.microbatches_in_flight(pp, m, kind)
        # bytes: one activation forward (not the last stage), one gradient backward (not the first) per micro-batch
        per_direction = m * ROWS * HIDDEN * 4
        assert sent.get("send_activation", 0) == (per_direction if s < pp - 1 else 0)
        assert sent.get("send_grad", 0) == (per_direction if s > 0 else 0)
        if 0 < s < pp - 1:
            assert sum(sent.values()) == plan.pp_bytes_per_rank(ROWS, 1, HIDDEN, m, act_bytes=4)


def test_measure_bubble_gives_every_ranks_compute(cluster4):
    events = cluster4.run(pl.measure_bubble, 3, "1f1b", hidden=8, microbatch_size=2, steps=1)
    assert [sorted((op, i) for op, i, *_ in evs) for evs in events] == \
        [sorted([("F", i) for i in range(3)] + [("B", i) for i in range(3)])] * 4
    got = pl.bubble(events)
    assert 0.0 <= got["bubble"] < 1.0 and all(b <= got["step_s"] for b in got["busy_s"])


def test_bubble_on_repeats_reports_the_median_step(cluster4):
    """repeats=3: three measured steps after a warm-up; the one of median bubble is reported, with its events."""
    got = pl.bubble_on(cluster4, 2, "1f1b", repeats=3, hidden=8, microbatch_size=2)
    assert got["repeats"] == 3 and len(got["events"]) == 4
    assert got["bubble"] == pytest.approx(pl.bubble(got["events"])["bubble"])
    assert [sorted((op, i) for op, i, *_ in evs) for evs in got["events"]] == \
        [sorted([("F", i) for i in range(2)] + [("B", i) for i in range(2)])] * 4
    with pytest.raises(ValueError, match="repeats"):
        pl.bubble_on(cluster4, 2, "1f1b", repeats=0)


@pytest.mark.parametrize("kind", pl.SCHEDULES)
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (4, 4), (4, 8), (3, 5)])
def test_ideal_stages_idle_for_the_bubble(kind, p, m):
    events = pl.simulate(kind, p, m, forward_s=1.0, backward_s=2.0)
    got = pl.bubble(events)
    assert got["step_s"] == (m + p - 1) * 3.0                   # (m + p - 1)(t_f + t_b)
    assert got["bubble"] == pytest.approx(plan.pipeline_bubble(p, m, kind))
    assert [[(op, i) for op, i, *_ in evs] for evs in events] == [pl.schedule(kind, p, m, s) for s in range(p)]


# ------------------------------------------------------------------ sizes that do not fit (issue 24)
@pytest.mark.parametrize("call, words", [
    (lambda: pl.schedule("1f1b", 0, 4, 0), "pp must be an int >= 1"),
    (lambda: pl.schedule("1f1b", 4, 0, 0), "microbatches must be an int >= 1"),
    (lambda: pl.schedule("1f1b", 4, 4, 9), "stage must be an int >= 0 and <= 3"),
    (lambda: pl.schedule("1f1b", 4, 4, -1), "stage must be"),
    (lambda: pl.schedule("gpipe", 2.0, 4, 0), "pp must be an int"),
    (lambda: pl.simulate("1f1b", 4, 4, forward_s=float("nan")), "forward_s must be a finite number"),
    (lambda: pl.simulate("1f1b", 4, 4, backward_s=-1.0), "backward_s must be"),
    (lambda: pl.simulate("1f1b", 10**400, 4), "pp must be"),
])
def test_degenerate_schedules_are_named(call, words):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert words in str(info.value)


def live_sizes():
    from commlib.parallel import live as lv  # by reference: the ranks import it
    return errors_of({
        "pp=8": lambda: lv.pipelined(8, "1f1b", 4),
        "pp=3": lambda: lv.pipelined(3, "1f1b", 4),
        "pp=0": lambda: lv.pipelined(0, "1f1b", 4),
        "microbatches=0": lambda: lv.pipelined(2, "1f1b", 0),
        "ep=8": lambda: lv.expert_parallel(8, 2),
        "t=8": lambda: lv.tensor_parallel_block(8),
        "steps=0": lambda: lv.sharded_training(1, steps=0),
        "batch=10": lambda: lv.sharded_training(1, batch=10),
    })


def test_live_sizes_that_do_not_fit_the_world_are_named(cluster4):
    """Before: pp=8 and ep=8 on 4 ranks returned errors of 0.02-0.10, t=8 shrank to 4, others raised
    'chunk expects...', 'range() arg 3...', UnboundLocalError."""
    want = {"pp=8": "pp must be an int >= 1 and <= 4", "pp=3": "pp must divide the world size (4)",
            "pp=0": "pp must be an int >= 1", "microbatches=0": "microbatches must be an int >= 1",
            "ep=8": "ep must be an int >= 1 and <= 4", "t=8": "t must be an int >= 1 and <= 4",
            "steps=0": "steps must be an int >= 1", "batch=10": "batch must be divisible by the data-parallel size"}
    for errors in cluster4.run(live_sizes):
        for name, words in want.items():
            assert errors[name] is not None and words in errors[name], (name, errors[name])
