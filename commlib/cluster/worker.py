"""The processes behind a `Cluster`: a zygote that imports torch once, and the rank loop.

The notebook kernel starts one zygote (`python -m commlib.cluster.worker HOST PORT TMPDIR`, authkey on
stdin). The zygote imports torch, then creates ranks on request: by fork() on Linux, so a rank
(re)starts in milliseconds instead of re-importing torch, or as fresh `python -m commlib.cluster.worker`
processes elsewhere. Each rank leads a session of its own, so whatever it starts (subprocesses,
forks) is killed with it, as one process group. Every process watches its parent and ends when it
goes away (a rank takes its group along; the zygote kills every rank's group and removes TMPDIR),
so killing the kernel, even with SIGKILL, leaves nothing behind.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection, wait

import cloudpickle

from commlib.cluster import flight_recorder, netns
from commlib.cluster.output import RankStreams

WATCH_INTERVAL_S = 0.1
PRELOAD_ENV = "COMMLIB_ZYGOTE_PRELOAD"  # modules the zygote imports after torch, comma-separated (Cluster(preload=))
USE_FORK = sys.platform.startswith("linux") and os.environ.get("COMMLIB_START_METHOD", "fork") == "fork"


def send(conn: Connection, msg) -> None:
    """One protocol message (tuples of str, int, bytes): plain pickle, once. Plain bytes, because
    Connection.send would use torch's shared-memory reducers for tensors; the user's objects (fn,
    results) are cloudpickled once, by the caller, into the bytes they travel in."""
    conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn: Connection):
    return pickle.loads(conn.recv_bytes())


def loopback_interface() -> str:
    """Name of the loopback interface ('lo' on Linux, 'lo0' on macOS), for Gloo/NCCL to bind to."""
    import socket

    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return "lo"
    for name in names:
        if name.startswith("lo"):
            return name
    return "lo"


def _exit_when_orphaned(parent_pid: int) -> None:
    """Once `parent_pid` is no longer our parent (it died), kill our process group: this rank and
    everything it started (the rank leads its group, see _start_rank)."""

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(70)

    threading.Thread(target=watch, name="commlib-orphan-watch", daemon=True).start()


def process_group_backend(backend: str) -> str:
    """With NCCL, CUDA tensors go over NCCL and CPU tensors (as in the notebooks' examples) over Gloo."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def uses_nccl() -> bool:
    """True in a rank whose default group sends CUDA tensors over NCCL (put tensors on the GPU there)."""
    import torch.distributed as dist

    return "nccl" in str(dist.get_backend())


def _results_to_cpu(result):
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), result)


def rank_main(spec: dict, authkey: bytes) -> None:
    """Join the parent, initialise the default process group, then run tasks until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel handles Ctrl-C / interrupt, not us
    if spec.get("userns"):  # an ordinary user's emulated node: its keeper's user namespace first, while the
        netns.enter_user(spec["userns"])  # process has one thread (setns(2) refuses a process with more)
    flight_recorder.block_dump_signal()  # before any thread starts: only the dump thread takes it
    _exit_when_orphaned(spec["watch_pid"])
    sys.path[:] = spec["sys_path"]
    rank, world_size, backend = spec["rank"], spec["world_size"], spec["backend"]
    conn = Client((spec["host"], spec["port"]), authkey=authkey)
    send(conn, ("rank", spec["generation"], rank, os.getpid()))
    if hasattr(signal, "SIGUSR1"):  # the parent asks for a stack dump before killing a stuck rank
        try:
            stack_file = open(os.path.join(spec["stack_dir"], f"rank{rank}.txt"), "w")
            faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
        except OSError:  # no temp folder: the timeout message just says less
            pass
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # N ranks share the machine's cores
        flight_recorder.configure(spec.get("fr_buffer", flight_recorder.DEFAULT_BUFFER), spec.get("debug", False))
        if spec["loopback"]:  # loopback wins over a preset GLOO/NCCL_SOCKET_IFNAME: only an explicit host moves us
            iface = loopback_interface()
            os.environ["GLOO_SOCKET_IFNAME"] = iface
            os.environ["NCCL_SOCKET_IFNAME"] = iface
            os.environ.pop("NCCL_COMM_ID", None)  # NCCL's bootstrap root would listen at that address
        store = dist.TCPStore(spec["host"], spec["store_port"], None, False,
                              datetime.timedelta(seconds=spec["start_timeout"]))
        store = dist.PrefixStore(f"generation{spec['generation']}", store)
        os.environ.update(spec.get("environment", {}))  # COMMLIB_NETWORK on a commlib.network.Network
        if spec.get("netns"):  # an emulated GPU (commlib.network): the store's socket stays on the host's
            netns.enter(spec["netns"])  # loopback; Gloo's pairs, made from here on, use the GPU's own address
            os.environ["GLOO_SOCKET_IFNAME"] = spec["ifname"]
        kwargs = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(process_group_backend(backend), store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=spec["pg_timeout"]), **kwargs)
    except BaseException:
        send(conn, ("err", None, traceback.format_exc()))
        return
    flight_recorder.start_dump_thread(flight_recorder.dump_path(spec["stack_dir"], rank))
    send(conn, ("ready",))

    # From here on, whatever this process prints (threads that outlive a task included) is forwarded.
    streams = RankStreams(conn, threading.Lock(), send)
    while True:
        try:
            msg = recv(conn)
        except (EOFError, OSError):
            return
        if msg[0] == "close":
            dist.destroy_process_group()
            return
        _, task, payload = msg
        streams.install()
        try:
            fn, args, kwargs = pickle.loads(payload)
            flight_recorder.note_failure(None)
            result = fn(*args, **kwargs)
            if backend == "nccl":
                result = _results_to_cpu(result)
            try:
                reply = cloudpickle.dumps(("ok", task, result))
            except Exception as e:
                raise TypeError(f"the value returned by the function cannot be pickled: {e!r}") from e
        except BaseException as e:
            flight_recorder.note_failure(e)
            reply = pickle.dumps(("err", task, user_traceback(e)), protocol=pickle.HIGHEST_PROTOCOL)
        streams.send_after_output(reply)


def user_traceback(exc: BaseException) -> str:
    """The traceback of exc without the frames of this module (the learner's code starts the story)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _start_rank(spec: dict, authkey: bytes, zygote_conn: Connection, wakeup: tuple[int, int]) -> int:
    """Start one rank as the leader of a new session (so of its own process group) -> its pid."""
    if USE_FORK:
        pid = os.fork()
        if pid == 0:  # the rank
            code = 0
            try:
                os.setsid()
                zygote_conn.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in wakeup:
                    os.close(fd)
                rank_main(dict(spec, watch_pid=os.getppid()), authkey)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        return pid
    proc = subprocess.Popen(command("rank"), stdin=subprocess.PIPE, start_new_session=True)
    proc.stdin.write(authkey.hex().encode() + b"\n" + cloudpickle.dumps(dict(spec, watch_pid=os.getpid())))
    proc.stdin.close()
    return proc.pid


def zygote_main(host: str, port: int, authkey: bytes, tmpdir: str | None = None) -> None:
    """Import torch once, then start ranks on request, kill them when told, report how they exit.
    Sleeps in one wait() on the parent's connection and a SIGCHLD wake-up pipe: exits are reported
    as they happen, and the parent's death is noticed within WATCH_INTERVAL_S."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    import importlib

    import torch  # noqa: F401  (the point of the zygote: ranks inherit the imported module)
    import torch.distributed  # noqa: F401

    for name in filter(None, os.environ.pop(PRELOAD_ENV, "").split(",")):
        importlib.import_module(name)  # e.g. FSDP2/DTensor: seconds per fresh rank otherwise, at every restart

    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a handler, so SIGCHLD writes to wake_w
    conn = Client((host, port), authkey=authkey)
    send(conn, ("zygote", os.getpid()))
    children: set[int] = set()
    parent_gone = True
    try:
        while os.getppid() == parent:
            for pid in list(children):
                code = _reap(pid)
                if code is not None:
                    children.discard(pid)
                    send(conn, ("exit", pid, code))
            ready = wait([conn, wake_r], timeout=WATCH_INTERVAL_S)
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
            if conn not in ready:
                continue
            msg = recv(conn)
            if msg[0] == "start":
                for spec in msg[1]:
                    children.add(_start_rank(spec, authkey, conn, (wake_r, wake_w)))
            elif msg[0] == "kill":
                for pid in children:
                    _kill_group(pid)
            elif msg[0] == "close":
                parent_gone = False
                break
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        for pid in children:
            _kill_group(pid)
        for pid in children:
            _reap(pid, block=True)
        if parent_gone and tmpdir:  # nobody else will remove it now
            shutil.rmtree(tmpdir, ignore_errors=True)


def _kill_group(pid: int) -> None:
    """SIGKILL a rank and everything it started. Only for a child not yet reaped: until then its pid
    (and so the group id) cannot belong to anyone else."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int, block: bool = False):
    """Exit code of a child (negative: killed by that signal), or None while it runs. A rank that ended
    by itself may leave processes it started: its group is killed before the rank is reaped."""
    if hasattr(os, "waitid"):
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)) is None:
                return None
        except ChildProcessError:
            return -1
        _kill_group(pid)
    try:
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return -1
    if done == 0:
        return None
    if not hasattr(os, "waitid"):
        _kill_group(pid)  # reaped first here: a small window in which the pid could be reused
    return os.waitstatus_to_exitcode(status)


def command(*args: str) -> list[str]:
    """The command line that starts this module's main() (not `-m`: the package imports us first)."""
    return [sys.executable, "-c", "import sys; from commlib.cluster.worker import main; main(sys.argv)", *args]


def main(argv: list[str]) -> None:
    if argv[1:2] == ["rank"]:  # a rank started without fork
        authkey = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
        rank_main(pickle.loads(sys.stdin.buffer.read()), authkey)
        return
    host, port, tmpdir = argv[1], int(argv[2]), (argv[3] if len(argv) > 3 else None)
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    zygote_main(host, port, authkey, tmpdir)
    os._exit(0)  # the ranks are dead and reaped; skip tearing torch down, so close() returns sooner

