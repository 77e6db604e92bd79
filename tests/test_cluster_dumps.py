"""Flight Recorder dumps are data: read back as torch wrote them, anything that asks to run code refused with one
line naming the file; and the lone-rank CLI case says what is missing."""

import os
import pickle
import pickletools
import subprocess
import sys
import time

import pytest

from commlib.cluster import dumps, flight_recorder


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_dump_of_plain_data_round_trips(tmp_path):
    fr = {"version": "2.10", "entries": [{"collective_seq_id": 1, "input_sizes": [[4]], "process_group": ("0", "d"),
                                          "profiling_name": "gloo:all_reduce", "time_created_ns": 5}],
          "pg_config": {}, "pg_status": {}}
    flight_recorder.write_dumps({0: {"fr": fr}}, str(tmp_path))
    assert flight_recorder.read_dumps(str(tmp_path))[0]["fr"] == fr


@pytest.mark.parametrize("payload", [Payload(), [1, Payload()], {"entries": Payload()}])
def test_a_dump_that_asks_to_import_anything_is_refused_naming_the_file(tmp_path, payload, monkeypatch):
    (tmp_path / "rank_0").write_bytes(pickle.dumps(payload))  # unpickled plainly, it would call os.system
    called = []
    monkeypatch.setattr(os, "system", lambda *a: called.append(a))
    with pytest.raises(dumps.DumpRefused, match=r"rank_0: refused, not a Flight Recorder dump \(it asks to import"):
        flight_recorder.read_dumps(str(tmp_path))
    assert called == []


def test_a_fifo_or_a_huge_file_is_refused_without_reading_it(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "rank_0")
    with pytest.raises(dumps.DumpRefused, match="not a regular file"):  # no writer: a plain open() would hang
        flight_recorder.read_dumps(str(tmp_path))
    os.remove(tmp_path / "rank_0")
    (tmp_path / "rank_1").write_bytes(pickle.dumps({"entries": []}))
    monkeypatch.setattr(dumps, "MAX_BYTES", 4)
    with pytest.raises(dumps.DumpRefused, match="rank_1: refused, .* bytes is more than"):
        flight_recorder.read_dumps(str(tmp_path))


def test_a_pickle_that_is_not_a_dump_is_refused(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(dumps.DumpRefused, match="no list of entries"):
        flight_recorder.read_dumps(str(tmp_path))


def test_a_lone_rank_without_master_addr_says_what_is_missing_and_exits_2():
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-m", "commlib", "bench", "--op", "all_reduce", "--max-bytes", "1K"],
                          env=dict(env, RANK="1", WORLD_SIZE="1"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "MASTER_ADDR, MASTER_PORT are not set" in done.stderr


def _entry(**changes):
    e = {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "gloo:all_reduce",
         "time_created_ns": 1, "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]],
         "output_dtypes": ["Float"]}
    e.update(changes)
    return {k: v for k, v in e.items() if v is not None}


def test_a_rank_that_is_not_an_ascii_number_is_refused_naming_the_file(tmp_path):
    (tmp_path / "rank_²").write_bytes(pickle.dumps({"entries": []}))  # '²'.isdigit() is True, int('²') raises
    with pytest.raises(dumps.DumpRefused, match="rank_²: refused, '²' is not a rank number"):
        flight_recorder.read_dumps(str(tmp_path))


def test_a_folder_or_an_unreadable_file_named_like_a_dump_is_refused(tmp_path):
    (tmp_path / "rank_0").mkdir()
    with pytest.raises(dumps.DumpRefused, match="rank_0: refused, not a regular file"):
        flight_recorder.read_dumps(str(tmp_path))
    (tmp_path / "rank_0").rmdir()
    os.symlink("/proc/self/mem", tmp_path / "rank_0")  # a regular file of size 0 whose read fails (EIO)
    with pytest.raises(dumps.DumpRefused, match="rank_0: cannot read it"):
        flight_recorder.read_dumps(str(tmp_path))


@pytest.mark.parametrize("entries, said", [
    ([1, 2], "entry 0 is a int, not a record"),
    ([_entry(), _entry(time_created_ns=None)], "entry 1 has no time_created_ns"),
    ([_entry(process_group=None)], "entry 0 has no process_group"),
    ([_entry(process_group=["0"])], "entry 0's process_group is not"),
    ([_entry(collective_seq_id="1")], "entry 0 has no collective_seq_id"),
    ([_entry(profiling_name=None)], "entry 0 has no profiling_name"),
    ([_entry(input_sizes=[4])], "entry 0's input_sizes is not a list of shapes"),
    ([_entry(output_dtypes=[1])], "entry 0's output_dtypes is not a list of dtype names"),
])
def test_entries_that_table_and_arrivals_cannot_read_are_refused(tmp_path, entries, said):
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": entries}))
    with pytest.raises(dumps.DumpRefused, match=f"rank_0: refused, {said}"):
        flight_recorder.read_dumps(str(tmp_path))


def test_a_well_formed_dump_reads_into_table_and_arrivals(tmp_path):
    (tmp_path / "rank_0").write_bytes(pickle.dumps({"entries": [_entry(), _entry(collective_seq_id=2)]}))
    snaps = flight_recorder.read_dumps(str(tmp_path))
    assert flight_recorder.table(snaps) == "rank 0: #1 all_reduce [4] float32 | #2 all_reduce [4] float32"
    assert flight_recorder.arrivals(snaps) == {1: {0: 0.0}, 2: {0: 0.0}}


def _bomb(levels: int) -> bytes:
    """A pickle of a few hundred bytes whose top list holds the one below it twice, `levels` times: 2**levels
    leaves when walked (printed, compared), built from the memo (BINPUT/BINGET), never expanded."""
    x: list = ["x"]
    for _ in range(levels):
        x = [x, x]
    return pickletools.optimize(pickle.dumps({"entries": [_entry(input_sizes=x)]}, protocol=2))


def test_a_small_pickle_that_expands_when_walked_is_refused_in_well_under_a_second(tmp_path):
    data = _bomb(60)  # 2**60 leaves; refused for its depth before anything walks it
    (tmp_path / "rank_0").write_bytes(data)
    assert len(data) < 1000
    start = time.process_time()
    with pytest.raises(dumps.DumpRefused, match="rank_0: refused, not a Flight Recorder dump"):
        flight_recorder.read_dumps(str(tmp_path))
    assert time.process_time() - start < 1.0


def test_a_shallow_dag_is_bounded_by_the_values_a_walk_visits_not_by_its_depth(monkeypatch):
    shared = list(range(1000))
    wide = {"entries": [], "x": [[shared] * 1000] * 1000}  # depth 4, 10**9 values when walked
    with pytest.raises(dumps.DumpRefused, match=r"walking it visits \d+ values"):
        dumps.check_shape(wide, "wide")
    cyclic: list = []
    cyclic.append(cyclic)
    with pytest.raises(dumps.DumpRefused, match="contains itself"):
        dumps.check_shape(cyclic, "cyclic")
    dumps.check_shape({"entries": [_entry()] * 2000})  # a real dump's size and depth pass
