"""Issue 52's exercise and text fixes in chapters 6 and 9: 9.5 counts ranks from 0 and a 1-based answer is told so,
9.1 names the per-call c, 9.9 asks after the rebuild, 6.2 is priced as rings while NCCL would pick its tree, DDP's
single first bucket only without find_unused_parameters, and the too-small buffer's fix (not fewer channels)."""

import json
from pathlib import Path

import numpy as np

from commlib import cost, exercises as ex
from commlib.cost import links
from commlib.cost.timeline import buckets_from_layers, simulate

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _text(name: str) -> str:
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    return " ".join(" ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").split())


def test_a_one_based_straggler_answer_is_told_ranks_count_from_zero_not_that_its_reasoning_is_wrong():
    for answer in (2, np.int64(2), 2.0):
        got = ex.ch9_straggler(answer, [400.0, 120.0, 390.0])
        assert not got.ok and "count from 0" in got.message and "reasoning is right" in got.message
    assert "count from 0" in ex.ch9_straggler(3, [400.0, 390.0, 120.0]).message   # past the last 0-based rank
    assert "arrived first" in ex.ch9_straggler(2, [120.0, 390.0, 400.0]).message    # the longest call, 1-based or not
    assert ex.ch9_straggler(1, [400.0, 120.0, 390.0]).ok
    assert "numbered from 0 as torch numbers them" in _text("09_profiling.ipynb")


def test_the_chunked_time_question_gives_c_and_an_answer_without_it_is_told_so():
    t, count = cost.collective_time("all_reduce", 4096, 8, "ib_ndr"), (16 << 20) / 4096
    c = cost.LINKS["ib_ndr"].call_latency
    assert "per-call cost c" in ex.ch9_chunked_time(count * (t - c), 16 << 20, 4096, 8, "ib_ndr").message
    text = _text("09_profiling.ipynb")
    assert '`cost.LINKS["ib_ndr"].call_latency`' in text and "after the rebuild" in text


def test_the_too_small_buffer_is_not_fixed_by_fewer_channels():
    text = _text("09_profiling.ipynb")
    assert "fewer channels sharing it" not in text and "Fewer channels are no fix" in text
    assert "each channel has its own buffer per peer" in text and "src/transport/p2p.cc" in text


def test_nccl_would_pick_the_tree_for_the_256_rank_buckets_and_small_caps_stop_costing():
    # tuning.cc, ppn = 1: ring 6.6 + 510 x 5.0 = 2556.6 us, tree 6.8 + 2 x 8 x 5.0 = 86.8 us
    assert abs(links.nccl_latency("all_reduce", 256, 1, "ring", "LL") * 1e6 - 2556.6) < 1e-6
    assert abs(links.nccl_latency("all_reduce", 256, 1, "tree", "LL") * 1e6 - 86.8) < 1e-6
    assert links.nccl_choice(256, 1, nvls=False)[:2] == ("tree", "LL")
    layers, secs = [1e8 * 4 / 96] * 96, [0.1 / 96] * 96

    def step(cap, pick):
        compute, ring, _ = buckets_from_layers(layers, secs, 256, "ib_ndr", bucket_cap_mb=cap)
        tree = buckets_from_layers(layers, secs, 256, "ib_ndr", bucket_cap_mb=cap, algorithm="double_binary_tree")[1]
        return simulate(compute, [min(r, t) for r, t in zip(ring, tree)] if pick else ring).total_s

    assert step(1, False) > 2 * step(25, False)          # as rings, 1 MiB buckets pay 96 ring latencies
    assert step(1, True) <= step(25, True) * 1.01        # with the tree, they cost no more than 25 MiB
    got = ex.ch6_best_bucket(25)
    assert got.ok and "every bucket a ring" in got.message
    text = _text("06_overlap.ipynb")
    assert "every bucket priced as a ring" in text and "What NCCL would run" in text


def test_ddp_s_single_first_bucket_is_said_to_need_find_unused_parameters_false():
    text = _text("06_overlap.ipynb")
    assert "With `find_unused_parameters=True` (and no `static_graph`) DDP sizes its buckets" in text
    assert "`compute_bucket_size_limits`" in text and "`should_rebuild_buckets`" in text
