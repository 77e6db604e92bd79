"""Flight Recorder dumps are data: read back as torch wrote them, anything that asks to run code refused with one
line naming the file; and the lone-rank CLI case says what is missing."""

import os
import pickle
import subprocess
import sys

import pytest

from commlib.cluster import dumps, flight_recorder


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_dump_of_plain_data_round_trips(tmp_path):
    fr = {"version": "2.10", "entries": [{"collective_seq_id": 1, "input_sizes": [[4]], "process_group": ("0", "d")}],
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
