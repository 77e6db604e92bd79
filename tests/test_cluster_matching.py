"""The pure part of the diagnosis, on records made by hand: only live records count, groups are names and
members, p2p operations pair up in order, dead and raising ranks are named, and no report has an empty list."""

import pytest

from commlib.cluster import diagnosis, matching, p2p_log


def record(seq, op="all_reduce", size=(4,), out=None, pg="0", desc="default_pg", record_id=0, dtype="Float"):
    return {"record_id": record_id, "process_group": (pg, desc), "collective_seq_id": seq, "p2p_seq_id": 0,
            "op_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": [list(size)],
            "output_sizes": [list(out or size)], "input_dtypes": [dtype], "output_dtypes": [dtype], "is_p2p": False,
            "state": "scheduled", "time_created_ns": 0, "frames": []}


def snap(entries, groups, waiting=None, p2p=None):
    for i, e in enumerate(entries):
        e["record_id"] = i
    return {"fr": {"entries": entries, "version": "2.10"}, "waiting": waiting, "failed": None, "groups": groups,
            "p2p": p2p}


def mesh_snaps(culprit):
    """A 2x2 mesh after DTensor work: each rank's "3" is its own tp pair, its gathers recorded as Gloo does
    ([1, *shape] out); then every rank but the culprit enters all_reduce #2 of the world."""
    out = {}
    for r in range(4):
        groups = {"0": ("default_pg", [0, 1, 2, 3]), "3": ("mesh_tp", [0, 1] if r < 2 else [2, 3])}
        entries = [record(1), record(1, "all_gather", (16, 16), (1, 16, 16), pg="3", desc="mesh_tp"),
                   record(2, "all_gather", (8,), (1, 8), pg="3", desc="mesh_tp")]
        if r != culprit:
            entries.append(record(2))
        out[r] = snap(entries, groups)
    return out


@pytest.mark.parametrize("culprit", [0, 3])
def test_stale_dtensor_gathers_blame_no_one_and_the_hang_names_the_culprit(culprit):
    d = diagnosis.diagnose(mesh_snaps(culprit), 4, stuck=[0, 1, 2, 3])
    assert d["kind"] == "missing" and d["ranks"] == [culprit], d


def test_torch_s_own_matcher_rejects_those_gathers_which_is_why_identical_records_match_first():
    from torch.distributed.flight_recorder.components.types import MatchState, Op

    a = record(1, "all_gather", (16, 16), (1, 16, 16), pg="3")
    assert Op(a, {"3": {0, 1}}, "3").match(Op(dict(a), {"3": {0, 1}}, "3")).state == MatchState.SIZE_OR_SYNTAX_MISMATCH
    assert matching.same_call(a, dict(a), "3", [0, 1])
    assert not matching.same_call(a, record(1, "all_gather", (8, 16), (1, 8, 16), pg="3"), "3", [0, 1])


def test_records_every_rank_moved_past_are_never_compared():
    # #1 differs (a dtype bug long finished), then all entered #2 and #3; rank 2 never entered #3's partner #4
    snaps = {r: snap([record(1, dtype="Double" if r == 1 else "Float"), record(2)] + ([record(3)] if r != 2 else []),
                     {"0": ("default_pg", [0, 1, 2])}) for r in range(3)}
    d = diagnosis.diagnose(snaps, 3)
    assert d["kind"] == "missing" and d["ranks"] == [2]


def test_a_barrier_is_described_without_empty_sizes():
    e = record(2, "barrier")
    e["input_sizes"], e["output_sizes"], e["input_dtypes"], e["output_dtypes"] = [], [], [], []
    assert matching.call_text(e) == "barrier #2" and matching.describe_record(e) == "#2 barrier"


def pending(op, peer, index=1, tag=0):
    return {"op": op, "peer": peer, "tag": tag, "index": index, "tensor": {"shape": [4], "dtype": "float32"},
            "where": "step() line 3"}


def test_p2p_a_rank_that_receives_from_the_wrong_peer_is_the_culprit_not_the_sender_behind_it():
    world = {0: {("send", 1, 0): 1, ("recv", 3, 0): 1}, 1: {("send", 2, 0): 1, ("recv", 2, 0): 1},
             2: {("send", 3, 0): 1, ("recv", 1, 0): 1}, 3: {("send", 0, 0): 1, ("recv", 2, 0): 1}}
    # rank 1 receives from 2 (wrong: its left neighbour is 0); rank 0's send to 1 waits behind it
    p2p = {r: {"posted": posted, "pending": []} for r, posted in world.items()}
    p2p[1]["pending"] = [pending("recv", 2)]
    p2p[0]["pending"] = [pending("send", 1)]
    snaps = {r: snap([], {"0": ("default_pg", [0, 1, 2, 3])}, p2p=p2p[r]) for r in range(4)}
    d = diagnosis.diagnose(snaps, 4, stuck=[0, 1])
    assert d["kind"] == "p2p" and d["ranks"] == [1], d
    assert "rank 1 in recv from rank 2 ([4] float32) at step() line 3: rank 2 never posted the matching send" \
        in d["detail"]
    assert "rank 0 in send to rank 1" in d["detail"]


def test_p2p_two_ranks_that_wait_on_each_other_are_both_named_and_matched_ops_are_not_blamed():
    p2p = {0: {"posted": {("recv", 1, 0): 1}, "pending": [pending("recv", 1)]},
           1: {"posted": {("recv", 0, 0): 1}, "pending": [pending("recv", 0)]},
           2: {"posted": {("send", 3, 0): 2}, "pending": [pending("send", 3, index=2)]},
           3: {"posted": {("recv", 2, 0): 2}, "pending": []}}
    assert [r for r, _ in p2p_log.unmatched(p2p)] == [0, 1]
    snaps = {r: snap([], {}, p2p=p2p[r]) for r in range(4)}
    assert diagnosis.diagnose(snaps, 4, stuck=[0, 1])["ranks"] == [0, 1]


def test_a_dead_rank_without_records_is_named_from_its_exit():
    snaps = {r: snap([record(1), record(2)], {"0": ("default_pg", [0, 1, 2])},
                     waiting={"op": "all_reduce", "p2p": False, "tensor": None, "peer": None, "group": "0",
                              "where": ""}) for r in (0, 2)}
    d = diagnosis.diagnose(snaps, 3, errors={1: "RankDied: ..."}, dead={1: "killed by SIGKILL"})
    assert d["kind"] == "missing" and d["ranks"] == [1] and "rank 1 died (killed by SIGKILL)" in d["detail"]


def test_with_nothing_to_go_on_the_report_says_so_in_words_not_an_empty_list():
    d = diagnosis.diagnose({}, 2, stuck=[0, 1])
    assert d["ranks"] == [] and "[]" not in d["detail"] and "debug=True" in d["detail"]
    assert "no culprit named" in diagnosis.summary(d) and "[]" not in diagnosis.summary(d)
