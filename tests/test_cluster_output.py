"""commlib.cluster.output: a rank's stdout is a real text stream, all it prints arrives labelled, and a
timeout while output still arrives says so."""

import io
import os
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest
import torch.distributed as dist

import commlib as cl
from commlib.cluster.output import RankOutput
from conftest import timeout_of

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def use_stdout_as_a_file():
    out = sys.stdout
    facts = (isinstance(out, io.TextIOBase), out.encoding.lower(), out.closed, out.isatty(), out.writable())
    out.writelines(["writelines a\n", "writelines b\n"])
    out.flush()
    os.write(out.fileno(), "via fileno é\n".encode())
    subprocess.run([sys.executable, "-c", "print('from a subprocess')"], stdout=sys.stdout, check=True)
    print("to stderr", file=sys.stderr)
    return facts


def test_rank_stdout_is_a_real_text_stream(cluster4, capsys):
    assert cluster4.run(use_stdout_as_a_file) == [(True, "utf-8", False, False, True)] * 4
    out, err = capsys.readouterr()
    for r in range(4):
        for line in ("writelines a", "writelines b", "via fileno é", "from a subprocess"):
            assert f"[rank {r}] {line}\n" in out
        assert f"[rank {r}] to stderr\n" in err
    assert out.index("[rank 0] writelines b") < out.index("[rank 0] via fileno é")
    cluster4.run(lambda: sys.stdout.close())  # a task may close it; the next task gets it back
    assert cluster4.run(lambda: (print("after close"), sys.stdout.closed)[1]) == [False] * 4
    assert "[rank 3] after close\n" in capsys.readouterr().out


def print_from_a_thread_later(go: str, done: str):
    def later():
        deadline = time.monotonic() + 20
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
        print("late line from a thread")
        sys.stdout.flush()
        open(f"{done}{dist.get_rank()}", "w").close()

    threading.Thread(target=later, daemon=True).start()
    return "returned"


def test_prints_from_threads_after_the_function_returns_are_labelled(cluster4, capsys, tmp_path):
    go, done = str(tmp_path / "go"), str(tmp_path / "done")
    assert cluster4.run(print_from_a_thread_later, go, done) == ["returned"] * 4
    open(go, "w").close()
    deadline = time.monotonic() + 20
    while not all(os.path.exists(f"{done}{r}") for r in range(4)) and time.monotonic() < deadline:
        time.sleep(0.01)
    cluster4.run(dist.barrier)  # what was printed between runs is shown with the next one
    out = capsys.readouterr().out
    assert all(f"[rank {r}] late line from a thread\n" in out for r in range(4)), out


def print_forever():
    while True:
        print("still going", dist.get_rank())
        time.sleep(0.001)


def test_timeout_while_output_still_arrives_says_so(cluster4, capsys):
    with timeout_of(cluster4, 1.0), pytest.raises(cl.ClusterTimeout) as info:
        cluster4.run(print_forever)
    assert "still printing" in str(info.value) and info.value.ranks == [0, 1, 2, 3]
    assert "[rank 2] still going 2" in capsys.readouterr().out
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_character_split_between_two_messages_is_decoded_whole(capsys):
    out = RankOutput(live=False)
    data = "naïve ∑\nno newline".encode()
    cut = data.index("∑".encode()) + 1
    out.write(1, "stdout", data[:cut])
    out.write(1, "stdout", data[cut:])
    out.write(0, "stdout", b"first\n")
    out.flush()
    assert capsys.readouterr().out == "[rank 0] first\n[rank 1] naïve ∑\n[rank 1] no newline\n"
