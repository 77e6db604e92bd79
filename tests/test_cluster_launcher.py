"""commlib.cluster.launcher: what ranks start dies with them; interrupts, a dead zygote and a dead parent
leave nothing behind (no process, no temp folder), each within its bound."""

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import termios
import textwrap
import time

import cloudpickle
import psutil
import pytest
import torch.distributed as dist

import commlib as cl
from commlib.cluster import launcher as _launcher
from conftest import alive, wait_gone

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def start_descendants() -> list[int]:
    """In a rank: a subprocess and a fork that would outlive the rank if nothing killed them."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    return [child.pid, pid]


def children() -> set[psutil.Process]:
    """This process's children now (a psutil.Process is its pid and its start time: a reused pid is another)."""
    return set(psutil.Process().children())


def started_since(before: set[psutil.Process]) -> set[int]:
    """The pids of the children started since `before` was taken, and all their descendants. Not what an older
    child starts meanwhile: the session's JupyterLab (conftest's lab fixture) and its kernels keep running
    under this process, and a helper one of them starts is not the Cluster's."""
    pids = set()
    for child in children() - before:
        with contextlib.suppress(psutil.NoSuchProcess):
            pids |= {child.pid} | {p.pid for p in child.children(recursive=True)}
    return pids


def temp_folders(root) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith("commlib-"))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """tempfile's folder for this test only: commlib's temp folders are counted there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


SPAWNER = """
import subprocess, sys
sys.stdin.readline()  # a line: start a child, say its pid; end of input: stop it and exit
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
sys.stdin.read()
child.kill()
"""


def test_what_an_older_child_starts_meanwhile_is_not_counted_as_started():
    """A helper that an older child (as the session's JupyterLab) starts during a test is not the test's to wait for;
    a new child and what it starts are. (The count was: every descendant now, less every descendant before.)"""
    spawners = []
    try:
        spawners.append(subprocess.Popen([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True))
        before = children()
        spawners.append(subprocess.Popen([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True))
        grandchildren = []
        for s in spawners:
            s.stdin.write("go\n")
            s.stdin.flush()
            grandchildren.append(int(s.stdout.readline()))
        helper, mine = grandchildren
        assert started_since(before) == {spawners[1].pid, mine}
        assert helper in {p.pid for p in psutil.Process().children(recursive=True)}  # the old count took it
    finally:  # end of input: each spawner stops its child and exits (killed if not: no error to hide the test's)
        for s in spawners:
            s.stdin.close()
            try:
                s.wait(30)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()
    assert wait_gone(grandchildren) == []


def test_what_a_rank_starts_dies_with_it_on_restart_and_close():
    with cl.Cluster(world_size=2, timeout=20) as c:
        started = sum(c.run(start_descendants), [])
        assert len(started) == 4 and all(alive(p) for p in started)
        c.restart()
        assert wait_gone(started) == []
        started = sum(c.run(start_descendants), [])
    assert wait_gone(started) == []


def test_killed_parent_leaves_no_grandchild_and_no_temp_folder(tmp_path):
    script = textwrap.dedent("""
        import json, os, subprocess, sys, time
        import commlib as cl

        def start_child():
            return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]).pid

        c = cl.Cluster(world_size=2, timeout=20)
        pids = c.pids + [c._state.zygote.pid] + c.run(start_child)
        print(json.dumps({"pids": pids, "tmpdir": c._state.tmpdir}), flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        report = json.loads(proc.stdout.readline())
        assert len(report["pids"]) == 5 and all(alive(p) for p in report["pids"])
        assert os.path.isdir(report["tmpdir"])
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone(report["pids"]) == []
    deadline = time.monotonic() + 5
    while os.path.exists(report["tmpdir"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(report["tmpdir"])


# How soon an interrupted start or close is done. Not "about a second": the clean-up itself may wait up to
# ZYGOTE_EXIT_S for the zygote to exit and as long for its reader thread (the bound was 2 s, that very sum: a
# stall of a loaded 2-core machine on top could fail it), and what it rules out takes start_timeout (120 s) or
# forever.
PROMPT_S = 2 * _launcher.ZYGOTE_EXIT_S + 10.0


@contextlib.contextmanager
def ctrl_c(monkeypatch, target: str, when=lambda *a, **k: True):
    """A real SIGINT (what Ctrl-C sends) on the first call of `target` for which when(...) holds.
    Yields a list that gets the time of that interrupt."""
    module, _, name = target.rpartition(".")
    owner = eval(module, {"_launcher": _launcher, "subprocess": subprocess, "cl": cl})
    real, fired = getattr(owner, name), []

    def interrupting(*args, **kwargs):
        if not fired and when(*args, **kwargs):
            fired.append(time.monotonic())
            signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupting)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in an interactive kernel
    try:
        yield fired
    finally:
        signal.signal(signal.SIGINT, saved)
        monkeypatch.setattr(owner, name, real)


def test_two_ctrl_c_while_the_cluster_starts_act_at_once_and_leave_nothing(monkeypatch, private_tmp):
    before = children()
    waiting_for_zygote = lambda self, deadline, what: "zygote" in what  # noqa: E731
    with ctrl_c(monkeypatch, "_launcher.Launcher.next_connection", waiting_for_zygote) as first, \
            ctrl_c(monkeypatch, "subprocess.Popen.wait") as second:  # the second one lands in the clean-up
        with pytest.raises(KeyboardInterrupt):
            cl.Cluster(world_size=2)
        stopped = time.monotonic()
    assert first and second
    assert stopped - first[0] < PROMPT_S, "the interrupt took effect at once, not after start_timeout"
    assert wait_gone(started_since(before)) == []
    assert temp_folders(private_tmp) == []


def test_ctrl_c_while_ranks_start_leaves_nothing(monkeypatch, private_tmp):
    before = children()
    waiting_for_ranks = lambda self, deadline, what: "ranks" in what  # noqa: E731
    with ctrl_c(monkeypatch, "_launcher.Launcher.next_connection", waiting_for_ranks) as fired:
        with pytest.raises(KeyboardInterrupt):
            cl.Cluster(world_size=3)
        stopped = time.monotonic()
    assert stopped - fired[0] < PROMPT_S
    assert wait_gone(started_since(before)) == []
    assert temp_folders(private_tmp) == []


def test_ctrl_c_while_closing_waits_until_everything_is_gone(monkeypatch, private_tmp):
    before = children()
    c = cl.Cluster(world_size=2, timeout=20)
    c.run(start_descendants)
    with ctrl_c(monkeypatch, "subprocess.Popen.wait") as fired:
        with pytest.raises(KeyboardInterrupt):
            c.close()
        stopped = time.monotonic()
    assert stopped - fired[0] < PROMPT_S
    assert wait_gone(started_since(before), within_s=0.5) == []  # gone already, not just on the way
    assert temp_folders(private_tmp) == []


def kill_the_zygote_then_wait():
    if dist.get_rank() == 0:
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(60)


def test_zygote_death_is_reported_within_the_timeout_without_spinning():
    with cl.Cluster(world_size=8, timeout=30) as c:  # ample: the death is reported when it happens
        me = psutil.Process()
        cpu, t0 = sum(me.cpu_times()[:2]), time.monotonic()
        with pytest.raises(cl.RankDied) as info:
            c.run(kill_the_zygote_then_wait)
        wall, cpu = time.monotonic() - t0, sum(me.cpu_times()[:2]) - cpu
        assert wall < c.timeout
        assert cpu < 0.5 * wall, f"the parent used {cpu:.2f} s of CPU in {wall:.2f} s while waiting"
        assert "zygote" in str(info.value)
        assert c.run(dist.get_world_size) == [8] * 8  # a new zygote, new ranks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIONREAD on a socket: Linux")
def test_zygote_exit_reports_are_read_as_they_come(cluster4):
    for _ in range(3):
        old = cluster4.pids
        cluster4.restart()
        deadline = time.monotonic() + 5
        while any(psutil.pid_exists(p) for p in old) and time.monotonic() < deadline:  # reaped: reported
            time.sleep(0.02)
    fd = cluster4._state.zygote_conn.fileno()
    deadline = time.monotonic() + 2
    while True:
        unread = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
        if unread == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert unread == 0, f"{unread} bytes of exit reports left unread"


def test_stale_temp_folders_of_dead_owners_are_swept(private_tmp):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    for name in (f"commlib-{dead}-abc", f"commlib-{os.getpid()}-live", "commlib-old"):
        (private_tmp / name).mkdir()
    (private_tmp / f"commlib-{dead}-file").write_text("not a folder")
    with cl.Cluster(world_size=1, timeout=20) as c:
        mine = os.path.basename(c._state.tmpdir)
        assert temp_folders(private_tmp) == sorted([f"commlib-{os.getpid()}-live", "commlib-old",
                                                    f"commlib-{dead}-file", mine])
    assert temp_folders(private_tmp) == sorted([f"commlib-{os.getpid()}-live", "commlib-old", f"commlib-{dead}-file"])


def test_failed_host_is_a_value_error_and_leaves_no_temp_folder(private_tmp):
    with pytest.warns(UserWarning, match="no authentication"), pytest.raises(ValueError, match="host='10.255.255.1'"):
        cl.Cluster(world_size=1, host="10.255.255.1")  # an address of no interface here: nothing can listen
    assert temp_folders(private_tmp) == []


def test_a_zygote_that_cannot_start_is_reported_at_once(monkeypatch, private_tmp):
    monkeypatch.setattr(_launcher, "command", lambda *args: [sys.executable, "-c", "raise SystemExit(3)"])
    t0 = time.monotonic()
    with pytest.raises(cl.ClusterTimeout, match=r"zygote\) ended \(3\)"):
        cl.Cluster(world_size=2, start_timeout=60)
    took = time.monotonic() - t0
    assert took < 10, f"reported after {took:.1f} s, not at once"
    assert temp_folders(private_tmp) == []
