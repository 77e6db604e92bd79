"""commlib.cluster: results, output, persistence, and every way a rank can fail, each bounded in time."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import cloudpickle
import psutil
import pytest
import torch
import torch.distributed as dist

import commlib as cl
from conftest import alive, wait_gone

# Ship this module's functions by value, as cloudpickle does for functions defined in a notebook.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def rank_and_sum(scale):
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    return dist.get_rank(), dist.get_world_size(), scale * t.item()


def test_run_returns_results_in_rank_order(cluster4):
    assert cluster4.run(rank_and_sum, 2.0) == [(r, 4, 2.0 * 10) for r in range(4)]
    assert cluster4.world_size == 4 and cluster4.backend == "gloo"


def test_closures_and_kwargs_ship_by_value(cluster4):
    offset = 100
    out = cluster4.run(lambda x, y=0: dist.get_rank() + offset + x + y, 1, y=10)
    assert out == [111, 112, 113, 114]


def test_tensors_come_back_with_their_values(cluster4):
    def make():
        return torch.arange(5, dtype=torch.float64) * dist.get_rank()

    out = cluster4.run(make)
    for r, t in enumerate(out):
        assert t.dtype == torch.float64 and torch.equal(t, torch.arange(5, dtype=torch.float64) * r)


def test_print_is_shown_labelled_by_rank(cluster4, capsys):
    def talk():
        print("hello", dist.get_rank())
        print("to stderr", file=sys.stderr)
        print("no newline", end="")

    cluster4.run(talk)
    out, err = capsys.readouterr()
    for r in range(4):
        assert f"[rank {r}] hello {r}\n" in out
        assert f"[rank {r}] no newline\n" in out
        assert f"[rank {r}] to stderr\n" in err


def test_ordered_output_is_grouped_in_rank_order(cluster4, capsys):
    def talk():
        time.sleep(0.05 * (3 - dist.get_rank()))  # rank 3 finishes first
        print("a", dist.get_rank())
        print("b", dist.get_rank())

    cluster4.run(talk)
    assert capsys.readouterr().out == "".join(f"[rank {r}] a {r}\n[rank {r}] b {r}\n" for r in range(4))


def test_live_output_arrives_while_the_run_goes_on(cluster4, tmp_path):
    # Causal, not timed: each rank prints, then waits until the notebook side has seen all four lines (it
    # touches a file then). With output held back until the run ends, the ranks would give up waiting.
    seen_all = tmp_path / "seen_all"

    def talk_then_wait_to_be_heard(flag):
        print("started", flush=True)
        deadline = time.monotonic() + 20
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.01)
        return os.path.exists(flag)

    import io
    real, started = sys.stdout, []

    class Spy(io.StringIO):
        def write(self, s):
            if "started" in s:
                started.append(s)
                if len(started) == 4:
                    seen_all.touch()
            return real.write(s)

    cluster4.output = "live"
    try:
        sys.stdout = Spy()
        heard = cluster4.run(talk_then_wait_to_be_heard, str(seen_all))
    finally:
        sys.stdout = real
        cluster4.output = "ordered"
    assert heard == [True] * 4 and len(started) == 4
    with pytest.raises(ValueError, match="'ordered', 'live'"):
        cluster4.output = "loud"


def test_ranks_persist_between_runs(cluster4):
    pids = cluster4.pids
    cluster4.run(lambda: setattr(sys.modules["commlib"], "_test_mark", dist.get_rank()))
    assert cluster4.run(lambda: getattr(sys.modules["commlib"], "_test_mark", None)) == [0, 1, 2, 3]
    assert cluster4.pids == pids and all(alive(p) for p in pids)


def test_ranks_use_one_thread(cluster4):
    assert cluster4.run(torch.get_num_threads) == [1] * 4


def test_rank_that_raises_gives_rank_error_with_traceback_then_recovers(cluster4):
    def fail_on_2():
        if dist.get_rank() == 2:
            raise ValueError("bad value on purpose")
        dist.barrier()  # the others wait for rank 2, which never comes

    old = cluster4.pids
    t0 = time.monotonic()
    with pytest.raises(cl.RankError) as info:
        cluster4.run(fail_on_2)
    assert time.monotonic() - t0 < cluster4.timeout  # at once, not when the others' barrier times out
    assert info.value.rank == 2
    assert "ValueError: bad value on purpose" in str(info.value)
    assert "fail_on_2" in info.value.remote_traceback
    assert not isinstance(info.value, cl.ClusterTimeout)
    assert wait_gone(old) == []  # the old ranks are killed, not left blocked in the barrier
    assert [r for r, _, _ in cluster4.run(rank_and_sum, 1.0)] == [0, 1, 2, 3]


def test_blocked_recv_times_out_naming_the_rank_and_where_it_waits():
    def recv_without_send():
        if dist.get_rank() == 1:
            dist.recv(torch.zeros(1), src=0)
        return "done"

    with cl.Cluster(world_size=2, timeout=2.0) as c:
        t0 = time.monotonic()
        with pytest.raises(cl.ClusterTimeout) as info:
            c.run(recv_without_send)
        # not before the timeout; after it, at most the stack-dump wait (2 s) and a loaded machine's slack, not
        # Gloo's own 30-minute timeout
        assert 2.0 <= time.monotonic() - t0 < 2.0 + 10
        assert info.value.ranks == [1]
        assert isinstance(info.value, TimeoutError)
        assert "recv_without_send" in str(info.value)  # the stack dump points at the learner's line
        assert c.run(lambda: "ok") == ["ok", "ok"]


def test_deadlock_in_user_send_recv_times_out():
    def both_recv_first():  # the classic deadlock: each waits for the other to send
        peer = 1 - dist.get_rank()
        buf = torch.zeros(1)
        dist.recv(buf, src=peer)
        dist.send(buf, dst=peer)

    with cl.Cluster(world_size=2, timeout=1.5) as c:
        t0 = time.monotonic()
        with pytest.raises(cl.ClusterTimeout) as info:
            c.run(both_recv_first)
        assert time.monotonic() - t0 < 1.5 + 10  # the timeout, the stack-dump wait and slack: not Gloo's 30 min
        assert info.value.ranks == [0, 1]
        assert c.run(dist.get_rank) == [0, 1]


def test_collective_a_rank_never_joins_times_out():
    def skip_barrier_on_0():
        if dist.get_rank() != 0:
            dist.barrier()

    with cl.Cluster(world_size=3, timeout=1.5) as c:
        with pytest.raises(cl.ClusterTimeout) as info:
            c.run(skip_barrier_on_0)
        assert info.value.ranks == [1, 2]


def test_killed_rank_is_reported_by_rank_within_the_timeout(cluster4):
    def die_on_3():
        if dist.get_rank() == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()

    t0 = time.monotonic()
    with pytest.raises(cl.ClusterTimeout) as info:
        cluster4.run(die_on_3)
    assert time.monotonic() - t0 < cluster4.timeout
    assert isinstance(info.value, cl.RankDied) and isinstance(info.value, cl.RankError)
    assert info.value.rank == 3 and "SIGKILL" in str(info.value)
    assert cluster4.run(dist.get_world_size) == [4] * 4


def test_rank_killed_from_outside_while_idle_is_noticed_at_next_run(cluster4):
    os.kill(cluster4.pids[1], signal.SIGKILL)
    wait_gone([cluster4.pids[1]])
    with pytest.raises(cl.RankDied) as info:
        cluster4.run(dist.get_rank)
    assert info.value.rank == 1
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def interrupt_then_sleep(notebook_pid):
    """Rank 0 presses Ctrl-C in the notebook once every rank is running (so: while run() waits), then all sleep."""
    dist.barrier()
    if dist.get_rank() == 0:
        os.kill(notebook_pid, signal.SIGINT)
    time.sleep(20)


def test_keyboard_interrupt_kills_ranks_and_the_cluster_recovers(cluster4):
    # A runner started as a background job without job control inherits SIGINT as ignored, and Python then
    # installs no KeyboardInterrupt handler: set Python's own for this test, as an interactive kernel has it.
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    old = cluster4.pids
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster4.run(interrupt_then_sleep, os.getpid())
    finally:
        signal.signal(signal.SIGINT, saved)
    assert wait_gone(old) == []
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_second_interrupt_while_ranks_are_killed_waits_until_all_are_dead(cluster4, monkeypatch):
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    old = cluster4.pids
    real_kill, calls = os.killpg, []

    def kill_then_interrupt(pid, sig):  # Ctrl-C arrives right after the first rank was killed
        real_kill(pid, sig)
        calls.append(pid)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr("commlib.cluster.core.os.killpg", kill_then_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            cluster4._kill_ranks()
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGINT, saved)
    assert calls == old, "every rank got its SIGKILL before the interrupt was delivered"
    assert wait_gone(old) == [] and cluster4.pids == []
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_unpicklable_result_and_argument_give_clear_errors(cluster4):
    with pytest.raises(cl.RankError, match="cannot be pickled"):
        cluster4.run(threading.Lock)
    with pytest.raises(TypeError, match="pickling failed"):
        cluster4.run(print, threading.Lock())
    with pytest.raises(TypeError, match="fn must be callable"):
        cluster4.run(42)


def test_close_and_context_exit_leave_no_process():
    with cl.Cluster(world_size=3, timeout=10) as c:
        pids = c.pids + [c._state.zygote.pid]
        assert all(alive(p) for p in pids)
    assert wait_gone(pids) == []
    c.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        c.run(dist.get_rank)


def test_garbage_collected_cluster_leaves_no_process():
    c = cl.Cluster(world_size=2, timeout=10)
    pids = c.pids + [c._state.zygote.pid]
    del c
    import gc

    gc.collect()
    assert wait_gone(pids) == []


def test_killed_parent_leaves_no_process(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        import commlib as cl
        c = cl.Cluster(world_size=3, timeout=10)
        print(*c.pids, c._state.zygote.pid, flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        assert len(pids) == 4 and all(alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    assert wait_gone(pids) == []


def test_two_clusters_at_once_are_independent():
    with cl.Cluster(world_size=2, timeout=20) as a, cl.Cluster(world_size=3, timeout=20) as b:
        assert a.run(rank_and_sum, 1.0) == [(0, 2, 3.0), (1, 2, 3.0)]
        assert b.run(rank_and_sum, 1.0) == [(r, 3, 6.0) for r in range(3)]


def test_world_size_one():
    with cl.Cluster(world_size=1, timeout=10) as c:
        assert c.run(rank_and_sum, 3.0) == [(0, 1, 3.0)]


def test_listens_on_loopback_only(cluster4):
    cluster4.run(rank_and_sum, 1.0)  # Gloo pairs are connected
    procs = [psutil.Process(os.getpid()), psutil.Process(cluster4._state.zygote.pid)]
    procs += [psutil.Process(p) for p in cluster4.pids]
    listening = [c for p in procs for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening, "expected the listener, the store and Gloo's sockets"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}


def test_ranks_started_without_fork(monkeypatch):
    monkeypatch.setenv("COMMLIB_START_METHOD", "spawn")
    with cl.Cluster(world_size=2, timeout=30) as c:
        assert c.run(rank_and_sum, 1.0) == [(0, 2, 3.0), (1, 2, 3.0)]
        zygote = psutil.Process(c._state.zygote.pid)
        assert sorted(ch.pid for ch in zygote.children()) == sorted(c.pids)
        pids = c.pids + [zygote.pid]
    assert wait_gone(pids) == []


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(world_size=0), ValueError, "world_size"),
    (dict(world_size=65), ValueError, "[1, 64]"),
    (dict(world_size="4"), TypeError, "world_size"),
    (dict(world_size=True), TypeError, "world_size"),
    (dict(backend="mpi"), ValueError, "'auto', 'gloo', 'nccl'"),
    (dict(timeout=0), ValueError, "timeout"),
    (dict(timeout=-1.0), ValueError, "timeout"),
    (dict(timeout=float("nan")), ValueError, "timeout"),
    (dict(timeout="5"), TypeError, "timeout"),
    (dict(start_timeout=0), ValueError, "start_timeout"),
    (dict(timeout=1e10), ValueError, "timeout"),           # past what poll() and torch's store can wait
    (dict(start_timeout=1e7), ValueError, "start_timeout"),
    (dict(output="quiet"), ValueError, "output"),
    (dict(host=""), TypeError, "host"),
    (dict(host=5), TypeError, "host"),
    (dict(host="256.1.1.1"), ValueError, "host"),
    (dict(host="no such host"), ValueError, "host"),
])
def test_invalid_arguments_are_rejected_before_anything_starts(kwargs, exc, words):
    with pytest.raises(exc, match=None) as info:
        cl.Cluster(**kwargs)
    assert words in str(info.value)


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has GPUs: nccl is valid")
def test_nccl_without_gpus_is_a_clear_value_error():
    with pytest.raises(ValueError, match="one GPU per rank"):
        cl.Cluster(world_size=2, backend="nccl")
    assert cl.cluster.resolve_backend("auto", 2) == "gloo"


def test_nccl_groups_keep_gloo_for_cpu_tensors():
    from commlib.cluster.worker import process_group_backend

    assert process_group_backend("nccl") == "cpu:gloo,cuda:nccl"
    assert process_group_backend("gloo") == "gloo"




def only_in_this_rank():
    """An object whose class lives in a module only this rank has imported."""
    import types

    module = types.ModuleType("commlib_test_module_only_in_the_rank")
    module.__file__ = "/nowhere/commlib_test_module_only_in_the_rank.py"  # importable-looking: pickled by reference
    exec("class Thing:\n    pass\n", module.__dict__)
    sys.modules[module.__name__] = module
    return module.Thing()


def _refuse_to_load():
    raise RuntimeError("this object cannot be rebuilt here")


class LoadsBadly:
    def __reduce__(self):
        return (_refuse_to_load, ())


class DumpsBadly:
    def __reduce__(self):
        raise RuntimeError("no pickling for you")


@pytest.mark.parametrize("fn, words", [
    (only_in_this_rank, "No module named 'commlib_test_module_only_in_the_rank'"),
    (lambda: LoadsBadly() if dist.get_rank() == 1 else 0, "cannot be rebuilt here"),
    (lambda: DumpsBadly() if dist.get_rank() == 1 else 0, "no pickling for you"),
], ids=["class-only-the-rank-imported", "reduce-fails-on-load", "reduce-raises"])
def test_results_the_parent_cannot_unpickle_are_rank_errors_naming_the_rank(cluster4, fn, words):
    with pytest.raises(cl.RankError) as info:
        cluster4.run(fn)
    assert info.value.rank in (0, 1) and f"rank {info.value.rank}" in str(info.value)
    assert words in str(info.value) and words in info.value.remote_traceback.strip().splitlines()[-1]
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_rank_died_carries_a_one_line_remote_traceback(cluster4):
    os.kill(cluster4.pids[2], signal.SIGKILL)
    with pytest.raises(cl.RankDied) as info:
        cluster4.run(dist.get_rank)
    last = info.value.remote_traceback.strip().splitlines()[-1]  # what the exercise checkers show
    assert "rank 2" in last and "SIGKILL" in last


def wait_for_file(path: str) -> int:
    open(f"{path}.started{dist.get_rank()}", "w").close()
    deadline = time.monotonic() + 20
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return dist.get_rank()


def test_run_from_a_second_thread_is_refused_while_one_runs(cluster4, tmp_path):
    go = str(tmp_path / "go")
    results = []
    first = threading.Thread(target=lambda: results.append(cluster4.run(wait_for_file, go)))
    first.start()
    try:
        deadline = time.monotonic() + 20
        while not all(os.path.exists(f"{go}.started{r}") for r in range(4)) and time.monotonic() < deadline:
            time.sleep(0.01)
        for call in (lambda: cluster4.run(dist.get_rank), cluster4.restart):
            with pytest.raises(RuntimeError, match="another thread's run"):
                call()
    finally:
        open(go, "w").close()
        first.join(30)
    assert results == [[0, 1, 2, 3]]
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_preset_socket_interface_variables_do_not_move_ranks_off_loopback(monkeypatch):
    others = [name for name, addrs in psutil.net_if_addrs().items()
              if any(a.family == socket.AF_INET and not a.address.startswith("127.") for a in addrs)]
    if not others:
        pytest.skip("this machine has no non-loopback IPv4 interface to point the variables at")
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.setenv(var, others[0])
    with cl.Cluster(world_size=2, timeout=20) as c:
        assert c.run(rank_and_sum, 1.0) == [(0, 2, 3.0), (1, 2, 3.0)]
        listening = [conn for p in c.pids for conn in psutil.Process(p).net_connections(kind="inet")
                     if conn.status == psutil.CONN_LISTEN]
        assert listening and {conn.laddr.ip for conn in listening} == {"127.0.0.1"}


def test_a_host_beyond_loopback_is_allowed_only_explicitly_and_warned():
    with pytest.warns(UserWarning, match=r"host='0\.0\.0\.0'.*no authentication"):
        c = cl.Cluster(world_size=1, timeout=20, host="0.0.0.0")
    with c:
        assert c.run(rank_and_sum, 1.0) == [(0, 1, 1.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cl.cluster.check_host("localhost") is True  # loopback by name: no warning
