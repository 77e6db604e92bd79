"""The processes behind a `Cluster`: a zygote that imports torch once, and the rank loop.

The notebook kernel starts one zygote (`python -m commlib._worker HOST PORT`, authkey on stdin).
The zygote imports torch, then creates ranks on request: by fork() on Linux, so a rank (re)starts
in milliseconds instead of re-importing torch, or as fresh `python -m commlib._worker` processes
elsewhere. Every process watches its parent and exits when it goes away, so killing the kernel
(even with SIGKILL) leaves nothing behind.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection

import cloudpickle

WATCH_INTERVAL_S = 0.1
USE_FORK = sys.platform.startswith("linux") and os.environ.get("COMMLIB_START_METHOD", "fork") == "fork"


def send(conn: Connection, msg) -> None:
    # Plain bytes: Connection.send would use torch's shared-memory reducers for tensors.
    conn.send_bytes(cloudpickle.dumps(msg))


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
    """Exit the process as soon as `parent_pid` is no longer our parent (it died)."""

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(WATCH_INTERVAL_S)
        os._exit(70)

    threading.Thread(target=watch, name="commlib-orphan-watch", daemon=True).start()


class _Forward:
    """A stand-in for sys.stdout/sys.stderr inside a rank: forwards text to the notebook."""

    def __init__(self, conn: Connection, lock: threading.Lock, stream: str):
        self.conn, self.lock, self.stream = conn, lock, stream

    def write(self, text: str) -> int:
        if text:
            with self.lock:
                send(self.conn, ("out", self.stream, str(text)))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


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
    _exit_when_orphaned(spec["watch_pid"])
    sys.path[:] = spec["sys_path"]
    rank, world_size, backend = spec["rank"], spec["world_size"], spec["backend"]
    conn = Client((spec["host"], spec["port"]), authkey=authkey)
    send(conn, ("rank", spec["generation"], rank, os.getpid()))
    if hasattr(signal, "SIGUSR1"):  # the parent asks for a stack dump before killing a stuck rank
        stack_file = open(os.path.join(spec["stack_dir"], f"rank{rank}.txt"), "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # N ranks share the machine's cores
        iface = loopback_interface()
        os.environ.setdefault("GLOO_SOCKET_IFNAME", iface)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", iface)
        store = dist.TCPStore(spec["host"], spec["store_port"], None, False,
                              datetime.timedelta(seconds=spec["start_timeout"]))
        store = dist.PrefixStore(f"generation{spec['generation']}", store)
        kwargs = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kwargs["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(process_group_backend(backend), store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=spec["pg_timeout"]), **kwargs)
    except BaseException:
        send(conn, ("err", None, traceback.format_exc()))
        return
    send(conn, ("ready",))

    lock = threading.Lock()
    out, err = _Forward(conn, lock, "stdout"), _Forward(conn, lock, "stderr")
    while True:
        try:
            msg = recv(conn)
        except (EOFError, OSError):
            return
        if msg[0] == "close":
            dist.destroy_process_group()
            return
        _, task, payload = msg
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            fn, args, kwargs = pickle.loads(payload)
            result = fn(*args, **kwargs)
            if backend == "nccl":
                result = _results_to_cpu(result)
            try:
                reply = cloudpickle.dumps(("ok", task, result))
            except Exception as e:
                raise TypeError(f"the value returned by the function cannot be pickled: {e!r}") from e
        except BaseException as e:
            reply = cloudpickle.dumps(("err", task, user_traceback(e)))
        finally:
            sys.stdout, sys.stderr = saved
        with lock:
            conn.send_bytes(reply)


def user_traceback(exc: BaseException) -> str:
    """The traceback of exc without the frames of this module (the learner's code starts the story)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _start_rank(spec: dict, authkey: bytes, zygote_conn: Connection) -> int:
    if USE_FORK:
        pid = os.fork()
        if pid == 0:  # the rank
            code = 0
            try:
                zygote_conn.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                rank_main(dict(spec, watch_pid=os.getppid()), authkey)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        return pid
    proc = subprocess.Popen(command("rank"), stdin=subprocess.PIPE)
    proc.stdin.write(authkey.hex().encode() + b"\n" + cloudpickle.dumps(dict(spec, watch_pid=os.getpid())))
    proc.stdin.close()
    return proc.pid


def zygote_main(host: str, port: int, authkey: bytes) -> None:
    """Import torch once, then start ranks on request and report how they exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    import torch  # noqa: F401  (the point of the zygote: ranks inherit the imported module)
    import torch.distributed  # noqa: F401

    conn = Client((host, port), authkey=authkey)
    send(conn, ("zygote", os.getpid()))
    children: set[int] = set()
    try:
        while os.getppid() == parent:
            for pid in list(children):
                code = _poll_child(pid)
                if code is not None:
                    children.discard(pid)
                    send(conn, ("exit", pid, code))
            if not conn.poll(WATCH_INTERVAL_S):
                continue
            msg = recv(conn)
            if msg[0] == "start":
                for spec in msg[1]:
                    children.add(_start_rank(spec, authkey, conn))
            elif msg[0] == "close":
                break
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            _poll_child(pid, block=True)


def _poll_child(pid: int, block: bool = False):
    """Exit code of a child (negative: killed by that signal), or None while it runs."""
    try:
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return -1
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def command(*args: str) -> list[str]:
    """The command line that starts this module's main() (not `-m`: the package imports us first)."""
    return [sys.executable, "-c", "import sys; from commlib._worker import main; main(sys.argv)", *args]


def main(argv: list[str]) -> None:
    if argv[1:2] == ["rank"]:  # a rank started without fork
        authkey = bytes.fromhex(sys.stdin.buffer.readline().decode().strip())
        rank_main(pickle.loads(sys.stdin.buffer.read()), authkey)
        return
    host, port = argv[1], int(argv[2])
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    zygote_main(host, port, authkey)

