"""Roots and reduce ops, which no record holds: the per-call log, the debug check's verdict, and the diagnosis
rules that read them (pure: snapshots built by hand; the live faults are in test_cluster_faults.py)."""

from commlib.cluster import call_check, diagnosis


class Opts:
    def __init__(self, root=None, op=None):
        if root is not None:
            self.rootRank = root
        if op is not None:
            self.reduceOp = op


def test_a_fingerprint_names_the_root_as_a_global_rank_and_the_reduce_op():
    assert call_check.fingerprint("broadcast", Opts(root=1), [4, 5, 6]) == "broadcast root=5"
    assert call_check.fingerprint("all_reduce", Opts(op="RedOpType.MAX"), [0, 1]) == "all_reduce op=MAX"
    assert call_check.fingerprint("reduce", Opts(root=0, op="RedOpType.SUM"), [2, 3]) == "reduce root=2 op=SUM"


def _snap(calls, waiting=None):
    return {"calls": calls, "waiting": waiting, "groups": {"0": ("default_pg", [0, 1, 2, 3])}}


def _call(n, what):
    return {"group": "0", "members": [0, 1, 2, 3], "n": n, "call": what}


WAIT = {"op": "broadcast", "p2p": False, "tensor": None, "peer": 0, "group": "0", "where": ""}


def test_the_call_log_names_the_rank_with_another_root_while_a_rank_waits_in_it():
    snaps = {r: _snap([_call(3, "broadcast root=1" if r == 2 else "broadcast root=0")], WAIT if r in (0, 2) else None)
             for r in range(4)}
    d = diagnosis.from_call_log(snaps)
    assert d["kind"] == "mismatch" and d["ranks"] == [2]
    assert "rank 2 called broadcast root=1, where ranks 0, 1, 3 called broadcast root=0" in d["detail"]


def test_a_finished_call_with_another_op_is_not_what_a_later_hang_is_about():
    # an all_reduce with MAX on rank 2 went through (wrong numbers, no error); the ranks now hang in a recv
    snaps = {r: _snap([_call(1, "all_reduce op=MAX" if r == 2 else "all_reduce op=SUM")],
                      {"op": "recv", "p2p": True, "tensor": None, "peer": r ^ 1, "group": "0", "where": ""})
             for r in range(4)}
    assert diagnosis.from_call_log(snaps) is None


def test_the_debug_check_s_error_is_read_back_naming_its_culprits():
    text = (f"RuntimeError: {call_check.MARK}: mismatch in process group 0 at its call #1: rank 2 called all_reduce "
            f"op=MAX; ranks 0, 1, 3 called all_reduce op=SUM [culprits: 2]")
    d = diagnosis.from_call_check({0: text, 1: text})
    assert d["kind"] == "mismatch" and d["ranks"] == [2] and "rank 2 called all_reduce op=MAX" in d["detail"]


def _p2p(posted, pending):
    return {"p2p": {"posted": posted, "pending": pending}, "waiting": None, "groups": {}}


def test_of_a_pair_whose_send_and_recv_differ_in_tag_the_odd_tag_is_the_culprit():
    send = {"op": "send", "peer": 2, "tag": 7, "tensor": None, "where": "", "index": 1}
    recv = {"op": "recv", "peer": 1, "tag": 0, "tensor": None, "where": "", "index": 1}
    snaps = {0: _p2p({("send", 1, 0): 1, ("recv", 3, 0): 1}, []),
             1: _p2p({("send", 2, 7): 1, ("recv", 0, 0): 1}, [send]),
             2: _p2p({("send", 3, 0): 1, ("recv", 1, 0): 1}, [recv]),
             3: _p2p({("send", 0, 0): 1, ("recv", 2, 0): 1}, [])}
    d = diagnosis.from_p2p(snaps)
    assert d["kind"] == "p2p" and d["ranks"] == [1] and "send to rank 2 with tag 7" in d["detail"]


def test_a_rank_that_returned_is_blamed_only_when_the_ranks_left_wait_for_it():
    wait = {"op": "all_reduce", "p2p": False, "tensor": None, "peer": None, "group": "0", "where": ""}
    snaps = {r: {"waiting": None if r == 3 else wait, "groups": {"0": ("default_pg", [0, 1, 2, 3])}, "p2p": None}
             for r in range(4)}
    d = diagnosis.diagnose(snaps, 4, stuck=[0, 1, 2])
    assert d["kind"] == "missing" and d["ranks"] == [3] and d["detail"].startswith("missing: rank 3 never entered")
    # ranks 1 and 2 wait on each other's recv; rank 0 returned, and nobody waits for it: a bystander
    recv = {"op": "recv", "p2p": True, "tensor": None, "group": "0", "where": ""}
    snaps = {0: {"waiting": None, "groups": {}, "p2p": {"posted": {}, "pending": []}},
             1: {"waiting": dict(recv, peer=2), "groups": {}, "p2p": {"posted": {("recv", 2, 0): 1}, "pending": [
                 {"op": "recv", "peer": 2, "tag": 0, "tensor": None, "where": "", "index": 1}]}},
             2: {"waiting": dict(recv, peer=1), "groups": {}, "p2p": {"posted": {("recv", 1, 0): 1}, "pending": [
                 {"op": "recv", "peer": 1, "tag": 0, "tensor": None, "where": "", "index": 1}]}}}
    d = diagnosis.diagnose(snaps, 3, stuck=[1, 2])
    assert d["kind"] == "p2p" and d["ranks"] == [1, 2]


def test_ranks_left_in_a_collective_the_others_returned_without_are_the_culprits():
    wait = {"op": "all_reduce", "p2p": False, "tensor": None, "peer": None, "group": "0", "where": "f() line 3"}
    snaps = {r: {"waiting": wait if r == 1 else None, "groups": {"0": ("default_pg", [0, 1, 2, 3])}, "p2p": None}
             for r in range(4)}
    d = diagnosis.diagnose(snaps, 4, stuck=[1])
    assert d["kind"] == "mismatch" and d["ranks"] == [1] and "ranks 0, 2, 3 never called" in d["detail"]


def test_a_death_is_the_culprit_whatever_the_survivors_records_say():
    rec = lambda seq, name: {"collective_seq_id": seq, "profiling_name": "gloo:all_gather", "process_group": (name, ""),
                             "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"],
                             "output_dtypes": ["Float"], "record_id": seq}
    # rank 3 has a record rank 1 lacks (so the records alone would call rank 1 missing); rank 0 died
    snaps = {0: None, 1: {"fr": {"entries": []}, "groups": {"2": ("mesh_dp", [1, 3])}},
             2: {"fr": {"entries": []}, "groups": {}}, 3: {"fr": {"entries": [rec(1, "2")]}, "groups": {"2": ("mesh_dp", [1, 3])}}}
    d = diagnosis.diagnose(snaps, 4, errors={1: "x", 2: "y", 3: "z"}, dead={0: "killed by SIGKILL"})
    assert d["kind"] == "missing" and d["ranks"] == [0] and "rank 0 died (killed by SIGKILL)" in d["detail"]


def test_a_rank_that_received_from_the_wrong_peer_is_blamed_not_the_peer_that_returned_having_done_its_part():
    # a ring: each rank sends right and receives from the left, but rank 0 receives from the right (rank 1).
    # Ranks 1 and 2 returned; rank 3's send to 0 and rank 0's recv from 1 are unmatched.
    def op(kind, peer):
        return {"op": kind, "peer": peer, "tag": 0, "tensor": None, "where": "", "index": 1}
    posted = {0: {("send", 1, 0): 1, ("recv", 1, 0): 1}, 1: {("send", 2, 0): 1, ("recv", 0, 0): 1},
              2: {("send", 3, 0): 1, ("recv", 1, 0): 1}, 3: {("send", 0, 0): 1, ("recv", 2, 0): 1}}
    pending = {0: [op("recv", 1)], 1: [], 2: [], 3: [op("send", 0)]}
    snaps = {r: {"waiting": None, "groups": {}, "p2p": {"posted": posted[r], "pending": pending[r]}} for r in range(4)}
    d = diagnosis.diagnose(snaps, 4, stuck=[0, 3])
    assert d["kind"] == "p2p" and d["ranks"] == [0], d


def test_a_stage_that_skipped_the_whole_pipeline_is_named_not_the_stages_that_wait_for_it():
    def recv(peer):
        return {"op": "recv", "peer": peer, "tag": 0, "tensor": None, "where": "", "index": 9}
    # every rank has run pipelines before (counts since it started); in this task rank 0 posted nothing
    snaps = {0: {"waiting": None, "groups": {}, "p2p": {"posted": {("send", 1, 0): 8}, "task": {}, "pending": []}},
             **{r: {"waiting": None, "groups": {}, "p2p": {"posted": {("recv", r - 1, 0): 9}, "task": {("recv", r - 1, 0): 1},
                                                           "pending": [recv(r - 1)]}} for r in (1, 2, 3)}}
    d = diagnosis.diagnose(snaps, 4, stuck=[1, 2, 3])
    assert d["kind"] == "missing" and d["ranks"] == [0], d
