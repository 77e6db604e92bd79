"""checks.py: a hung job's trace, NCCL kernels overlapping on one stream and impossible bandwidths are said in the
report's notes, naming the calls, ranks and fields; a consistent job gets none of them."""

import json

from commlib.profiling import checks
from commlib.profiling import diagnosis as td
from commlib.profiling import traces as tr
from commlib.profiling.read import streams
from commlib.profiling.report.diagnosis import json_report
from commlib.profiling.report.words import note_text

K = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _notes(report) -> list[str]:
    return json_report(report)["notes"]   # the notes in words, as --json says them


def _kernel(ts, dur, op="allreduce", nelems=1 << 20, stream=7):
    return {"ph": "X", "cat": "kernel", "name": K, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": int(ts), "Collective name": op, "In msg nelems": nelems,
                     "Out msg nelems": nelems, "Group size": 2, "dtype": "Float", "Process Group Name": "0"}}


def _job(tmp_path, calls_by_rank, ends=None):
    """calls_by_rank: {rank: [(op, nelems, start, dur)]} -> the two traces' paths."""
    paths = []
    for rank, calls in calls_by_rank.items():
        info = {"rank": rank, "world_size": 2, "backend": "nccl",
                "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
        events = [_kernel(1000.0 + s, d, op, n) for op, n, s, d in calls]
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps({"distributedInfo": info, "traceEvents": events}))
        paths.append(str(path))
    return paths


STEADY = [("allreduce", 1 << 20, 100.0 * i, 50.0) for i in range(4)]


def test_a_consistent_job_has_no_note(tmp_path):
    report = td.diagnose(_job(tmp_path, {0: STEADY, 1: STEADY}))
    assert _notes(report) == []


def test_a_rank_that_stopped_calling_is_named_with_the_calls_it_lacks(tmp_path):
    report = td.diagnose(_job(tmp_path, {0: STEADY, 1: STEADY[:2]}))
    [note] = [n for n in _notes(report) if n.startswith("group 0")]
    assert "calls 2 to 3 (from all_reduce 4194304 B) have no match on rank 1 (2)" in note
    assert "4 calls on rank 0" in note and "hung" in note


def test_a_call_whose_size_or_op_differs_across_ranks_is_named_with_each_ranks_call(tmp_path):
    odd = STEADY[:1] + [("allgather", 1 << 10, 100.0, 50.0)] + STEADY[2:]
    report = td.diagnose(_job(tmp_path, {0: STEADY, 1: odd}))
    [note] = [n for n in _notes(report) if n.startswith("group 0")]
    assert "call 1 differs across ranks (rank 0: all_reduce 4194304 B; rank 1: all_gather 4096 B)" in note
    sized = STEADY[:3] + [("allreduce", 1 << 12, 300.0, 50.0)]
    report = td.diagnose(_job(tmp_path, {0: STEADY, 1: sized}))
    assert any("call 3 differs across ranks (rank 0: all_reduce 4194304 B; rank 1: all_reduce 16384 B)" in n
               for n in _notes(report))


def test_a_rank_with_no_call_in_a_group_it_belongs_to_is_missing_all_of_them(tmp_path):
    paths = _job(tmp_path, {0: STEADY, 1: []})
    report = td.diagnose(paths)
    assert any("calls 0 to 3 (from all_reduce 4194304 B) have no match on rank 1 (0)" in n for n in _notes(report))


def test_all_to_all_sizes_may_differ_by_rank(tmp_path):
    a2a = [("alltoall", 1 << (10 + i), 100.0 * i, 50.0) for i in range(3)]
    b2b = [("alltoall", 1 << (12 + i), 100.0 * i, 50.0) for i in range(3)]
    assert _notes(td.diagnose(_job(tmp_path, {0: a2a, 1: b2b}))) == []


def test_nccl_kernels_overlapping_on_one_stream_are_said_to_be_no_gpus(tmp_path):
    overlapping = [("allreduce", 1 << 20, 100.0 * i, 150.0) for i in range(4)]   # each starts before the last ends
    paths = _job(tmp_path, {0: overlapping, 1: STEADY})
    [note] = [n for n in _notes(td.diagnose(paths)) if "same stream" in n]
    assert note.startswith("rank0.json: 3 NCCL kernel(s) start before the one before them on the same stream "
                           "ended (stream 7), which no GPU does")
    assert streams.stream_overlaps("x", [r for r in tr.read_records(paths[1]).kernels]) is None


def test_bytes_moved_faster_than_any_link_name_the_size_field(tmp_path):
    fast = [("allreduce", 1 << 60, 100.0 * i, 1.0) for i in range(4)]   # 4 EiB in 1 us
    report = td.diagnose(_job(tmp_path, {0: fast, 1: fast}))
    [note] = [n for n in _notes(report) if "faster than any link" in n]
    assert note.startswith("8 call(s) move bytes faster than any link (100000 GB/s)") and "'In msg nelems'" in note


def test_whatif_carries_every_note_that_makes_its_replay_doubtful_in_diagnoses_words(tmp_path, capsys):
    from commlib.__main__ import main
    from commlib.profiling.replay.whatif import whatif
    from commlib.profiling.report import whatif as wr

    overlapping = [("allreduce", 1 << 20, 100.0 * i, 150.0) for i in range(4)]   # edited times: no GPU's
    paths = _job(tmp_path, {0: overlapping, 1: STEADY[:3]})                      # and rank 1 stopped early
    said = _notes(td.diagnose(paths))
    assert any("same stream" in n for n in said) and any("have no match on rank 1" in n for n in said)
    report = whatif(paths, measured="dgx_h100")
    assert [note_text(d) for d in report["doubts"]] == said
    assert {d["kind"] for d in report["doubts"]} == {"reader", "unmatched"}
    text = wr.format_report(report)
    flat = " ".join(line[6:] if line.startswith("      ") else line for line in text.splitlines())
    assert "diagnose's note(s) on them (2):" in text and all(n in flat.replace("note: ", "") for n in said)
    out = json.loads(json.dumps(wr.json_report(report), allow_nan=False))
    assert [d["text"] for d in out["doubts"]] == said
    (tmp_path / "sound").mkdir()
    assert checks.doubts(tr.load(_job(tmp_path / "sound", {0: STEADY, 1: STEADY})), 2) == []   # a sound job: none
    capsys.readouterr()
    assert main(["whatif", *paths, "--hardware", "dgx_h100", "--measured-on", "dgx_h100", "--json"]) == 0
    assert [d["text"] for d in json.loads(capsys.readouterr().out)["doubts"]] == said
