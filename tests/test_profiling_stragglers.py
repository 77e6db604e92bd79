"""commlib.profiling.stragglers: the root straggler along the wait chain on a 2x2 mesh and on a chain of pairs
with a random slow rank (synthetic jobs, synthetic.group_job), a three-hop chain, a late start of tracing, a
symmetric job within its own noise, and one live 4-rank Gloo run of the chain and the mesh."""

import os
import random
import sys

import cloudpickle
import pytest

import commlib as cl
from commlib.profiling import diagnosis as td
from commlib.profiling.report import diagnosis as rp
from commlib.profiling import stragglers as st
from commlib.profiling.jobs import synthetic as sy
from commlib.profiling import traces as tr

cloudpickle.register_pickle_by_value(sys.modules[__name__])
MESH = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}   # TP pairs 1, 2; DP pairs 3, 4
MESH_PROGRAM = {0: ["1", "3"], 1: ["1", "4"], 2: ["2", "3"], 3: ["2", "4"]}   # TP, then DP, every step
CHAIN = {"1": [0, 1], "2": [1, 2], "3": [2, 3]}
CHAIN_PROGRAM = {0: ["1"], 1: ["1", "2"], 2: ["2", "3"], 3: ["3"]}


def _check_root(found, slow):
    """The slow rank comes first, on its own delay; every other straggler is (mostly) inherited from waiting."""
    late = found["stragglers"]
    assert late and late[0]["rank"] == slow and late[0]["behind"] == [], late
    assert late[0]["own_us"] == pytest.approx(late[0]["delay_us"])
    for s in late:
        if s["rank"] != slow:
            inherited = sum(b["us"] for b in s["behind"])
            assert inherited >= 0.9 * s["delay_us"] and s["own_us"] < 0.1 * s["delay_us"], s
            assert s["own_us"] + inherited == pytest.approx(s["delay_us"])


@pytest.mark.parametrize("seed", range(3))
def test_a_random_slow_rank_on_a_2x2_mesh_is_named_first_and_the_ranks_that_waited_for_it_inherit(seed):
    slow = random.Random(seed).randrange(4)
    ranks = sy.group_job(MESH_PROGRAM, MESH, steps=6, slow={slow: (None, 1, 30e3)}, jitter_us=50, seed=seed)
    found = st.find(ranks)
    _check_root(found, slow)
    # the DP peer waited in its DP call, so it came late to its TP call: inherited from the slow rank, in DP
    peer = {0: 2, 2: 0, 1: 3, 3: 1}[slow]
    (row,) = [s for s in found["stragglers"] if s["rank"] == peer]
    dp = "3" if slow in (0, 2) else "4"
    assert row["group"] in ("1", "2") and [(b["rank"], b["group"]) for b in row["behind"]] == [(slow, dp)]
    assert row["behind"][0]["us"] == pytest.approx(5 * 30e3, rel=0.02)   # the 5 steps after the first


@pytest.mark.parametrize("seed", range(3))
def test_a_random_slow_rank_on_a_chain_of_pairs_is_named_first(seed):
    slow = random.Random(100 + seed).randrange(4)
    ranks = sy.group_job(CHAIN_PROGRAM, CHAIN, steps=4, slow={slow: (None, 0, 30e3)}, jitter_us=50, seed=seed)
    _check_root(st.find(ranks), slow)


def test_a_three_hop_chain_follows_each_wait_back_to_rank_0():
    ranks = sy.group_job(CHAIN_PROGRAM, CHAIN, steps=1, slow={0: 50e3}, transfer_us=100.0)
    late = {s["rank"]: s for s in st.find(ranks)["stragglers"]}
    assert set(late) == {0, 1, 2}
    assert (late[0]["group"], late[0]["own_us"], late[0]["behind"]) == ("1", 50e3, [])
    # each hop waited for the one before it. By hand (compute 1 ms before each call, transfer 0.1 ms): rank 1
    # waited 50 ms for rank 0, then did 1.1 ms more than rank 2 (the transfer and compute of its first call),
    # so rank 2 waited 51.1 ms for it; rank 2 in turn 1.1 ms more than rank 3, which waited 52.2 ms
    assert late[1]["group"] == "2" and late[1]["behind"] == [{"rank": 0, "group": "1", "us": pytest.approx(50e3)}]
    assert late[1]["delay_us"] == pytest.approx(51.1e3) and late[1]["own_us"] == pytest.approx(1.1e3)
    assert late[2]["group"] == "3" and late[2]["behind"] == [{"rank": 1, "group": "2", "us": pytest.approx(51.1e3)}]
    assert late[2]["delay_us"] == pytest.approx(52.2e3) and late[2]["own_us"] == pytest.approx(1.1e3)
    report = td.diagnose(ranks)
    assert report["stragglers"][0]["rank"] == 0
    text = rp.format_report(report)
    assert "rank 2 late in [2, 3] (group 3) by 52.20 ms over 1 call(s), because it waited 51.10 ms for rank 1 in " \
        "[1, 2] (group 2); its own delay 1.10 ms" in text.replace("\n  ", " ")
    assert max(len(line) for line in text.splitlines()) < 100


def test_a_rank_whose_trace_starts_late_is_a_late_start_of_tracing_not_a_straggler():
    ranks = sy.group_job(CHAIN_PROGRAM, CHAIN, steps=2, slow={3: (0, 0, 80e3)})
    r3 = ranks[3]   # rank 3's profiler started just before its first call: its 80 ms before it are not traced
    r3.wall = (r3.calls[0].start_us - 10.0, r3.wall[1])
    r3.compute = [s for s in r3.compute if s[0] >= r3.wall[0]]
    found = st.find(ranks)
    assert all(s["rank"] != 3 for s in found["stragglers"])
    assert [(s["rank"], s["group"]) for s in found["late_starts"]] == [(3, "3")]
    # rank 2 reached [2, 3] at 3.4 ms (its compute, rank 1's, the transfers), rank 3 at 81 ms: 77.6 ms, all but
    # the 10 us of it that rank 3's trace covers
    assert found["late_starts"][0]["us"] == pytest.approx(77.59e3)
    notes = rp.json_report(td.diagnose(ranks))["notes"]
    assert any("rank 3's trace starts" in n and "late start of tracing" in n for n in notes)


def test_a_symmetric_job_within_its_own_spread_names_no_straggler_and_says_the_spread():
    ranks = sy.group_job({0: ["0"], 1: ["0"]}, {"0": [0, 1]}, steps=40, jitter_us=400, seed=7)
    found = st.find(ranks)
    assert found["stragglers"] == [] and found["unnamed"] and found["spread_us"]["0"] > 50
    report = td.diagnose(ranks)
    assert report["stragglers"] == [] and report["noise"]["unnamed"] and not report["notes"]
    text = rp.format_report(report).replace("\n  ", " ")
    assert "stragglers: none above the noise: the last rank to arrive changes from call to call, late by" in text
    assert "ms (median) in group 0" in text
    # one rank 30 ms late once in the same noise is named
    ranks = sy.group_job({0: ["0"], 1: ["0"]}, {"0": [0, 1]}, steps=40, jitter_us=400, seed=7,
                         slow={1: (20, 0, 30e3)})
    assert [s["rank"] for s in st.find(ranks)["stragglers"]] == [1]


# ------------------------------------------------------------------------------------------- live
SLOW_S = 0.15


def _live(folder, shape, slow):
    """One recorded step of the chain (shape "chain": pairs {0, 1}, {1, 2}, {2, 3}, each its own group, every
    rank calling the groups it is in, in order) or the mesh on this rank; rank `slow` sleeps SLOW_S."""
    import time

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank = dist.get_rank()
    x = torch.ones(1 << 12)
    recorded = []
    if shape == "chain":   # Gloo names no group: each call's comes from its worker thread (groups.py)
        pairs = [dist.new_group(r) for r in CHAIN.values()]
        groups = tuple(g for g, r in zip(pairs, CHAIN.values()) if rank in r)
    else:
        mesh = {name: dist.new_group(r) for name, r in sorted(MESH.items())}
        groups = tuple(mesh[name] for name in MESH_PROGRAM[rank])

    def step():   # two iterations: a wait in the first shows as lateness in the second
        recorded.append(1)
        for i in range(2):
            if shape == "chain" and rank == slow and len(recorded) == 2 and i == 1:   # mid-step: at the recorded
                time.sleep(SLOW_S)   # step's start the ranks' traces begin apart; rank 0 -> 1 late -> 2 late
            dist.all_reduce(x, group=groups[0])
            if shape == "mesh" and rank == slow and len(recorded) == 2:
                time.sleep(SLOW_S)   # before its DP call: its DP peer comes late to its TP call
            if len(groups) > 1:
                dist.all_reduce(x, group=groups[1])

    return tr.record(step, folder + "/rank{rank}.json")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The chain (rank 0 slow) and the mesh (rank 3 slow) run live, each in a cluster of its own (Gloo's groups
    are found from worker threads: one job's groups per trace)."""
    folder = tmp_path_factory.mktemp("live")
    for shape, slow in (("chain", 0), ("mesh", 3)):
        with cl.Cluster(world_size=4, timeout=120) as c:
            c.run(_live, str(folder / shape), shape, slow)
    return folder


def test_live_chain_names_the_slow_rank_first_and_each_hop_as_inherited(live):
    chain = td.diagnose(str(live / "chain"))
    named = {tuple(ranks): name for name, ranks in chain["groups"].items()}
    late = chain["stragglers"]
    assert (late[0]["rank"], late[0]["group"]) == (0, named[(0, 1)]) and late[0]["delay_us"] >= 0.5 * SLOW_S * 1e6
    hops = {s["rank"]: s for s in late if s["delay_us"] >= 0.5 * SLOW_S * 1e6}
    assert set(hops) == {0, 1, 2}, late   # rank 1 late in [1, 2] and rank 2 in [2, 3], each for its waiting
    assert (hops[1]["group"], hops[1]["behind"][0]["rank"], hops[1]["behind"][0]["group"]) == (
        named[(1, 2)], 0, named[(0, 1)])
    assert (hops[2]["group"], hops[2]["behind"][0]["rank"], hops[2]["behind"][0]["group"]) == (
        named[(2, 3)], 1, named[(1, 2)])
    for r in (1, 2):   # mostly inherited (its own part: the load's noise on this machine)
        assert sum(b["us"] for b in hops[r]["behind"]) > 0.5 * hops[r]["delay_us"] > hops[r]["own_us"] - 1e-6
        assert not hops[r]["root"] and hops[r]["chain"][-1] == {"rank": 0, "group": named[(0, 1)], "root": True}
    assert not any("no match" in n or "not known" in n for n in rp.json_report(chain)["notes"]), chain["notes"]


def test_live_mesh_names_the_slow_rank_first_and_its_dp_peer_as_inherited(live):
    mesh = td.diagnose(str(live / "mesh"))
    named = {tuple(ranks): name for name, ranks in mesh["groups"].items()}   # the chain's groups were made first
    top = mesh["stragglers"][0]
    assert (top["rank"], top["group"]) == (3, named[(1, 3)]) and top["delay_us"] >= SLOW_S * 1e6, mesh["stragglers"]
    inherited = [s for s in mesh["stragglers"] if s["delay_us"] >= 0.5 * SLOW_S * 1e6 and s["rank"] != 3]
    assert [(s["rank"], s["group"], s["behind"][0]["rank"], s["behind"][0]["group"]) for s in inherited] == [
        (1, named[(0, 1)], 3, named[(1, 3)])]
    text = rp.format_report(mesh).replace("\n  ", " ")
    assert "rank 1 late in [0, 1]" in text and "because it waited" in text and "for rank 3 in [1, 3]" in text
    assert os.path.exists(live / "mesh" / "rank3.json")


def test_the_json_report_holds_own_us_and_behind_in_strict_json():
    import json

    report = td.diagnose(sy.group_job(CHAIN_PROGRAM, CHAIN, steps=1, slow={0: 50e3}, transfer_us=100.0))
    out = json.loads(json.dumps(rp.json_report(report), allow_nan=False))
    rows = {s["rank"]: s for s in out["stragglers"]}
    assert set(rows[2]) == {"rank", "group", "group_size", "delay_us", "own_us", "behind", "calls", "root", "chain"}
    assert rows[2]["behind"] == [{"rank": 1, "group": "2", "us": pytest.approx(51.1e3)}]
    assert [s["rank"] for s in out["stragglers"]][0] == 0


def test_a_late_rank_is_measured_against_its_peers_not_against_a_mean_it_raises_itself():
    """Chapter 10's case: rank 1 slept 50 ms before 8 all-reduces of 4 ranks, its peers waited 180 ms for it in
    all, and the calls' own spread was 4 ms. With rank 1 inside the mean it was measured against, the excess per
    peer (43.5 ms) fell under the bar (4 x 4 ms x sqrt(8) = 45.3 ms) and no straggler was named."""
    from commlib.profiling.stragglers import _above_noise

    rows = {(1, "0"): (180e3, 180e3, 3, []), (0, "0"): (10e3, 10e3, 3, []), (3, "0"): (8e3, 8e3, 2, [])}
    size = {key: 4 for key in rows}
    skews = {"0": [(r, 4000.0) for r in (0, 3, 2, 0, 3, 2, 0, 3)]}
    assert _above_noise((1, "0"), rows, size, skews, 4.0)
    assert not _above_noise((0, "0"), rows, size, skews, 4.0)
