"""The kernel network for a learner who is not root: a keeper process in a user namespace of its own.

Where the kernel lets an ordinary user make a user namespace (unshare(2) CLONE_NEWUSER), that user is root inside
it, over the network and mount namespaces made with it. The keeper is such a process: it unshares a user, a mount
and a network namespace, mounts a tmpfs of its own on /run (so `ip netns` has a /run/netns to write: the host's
is root's), and then builds and runs the emulated network with commlib.network.kernel, exactly as root does on
the host. The notebook's kernel and JupyterLab stay on the host's network; a rank joins the keeper's user
namespace (setns(2), while it has one thread), then its GPU's namespace, which it opens through the keeper's root
(/proc/PID/root/run/netns/NAME).

    keeper = Keeper()                  # a keeper process, or NetworkError with its one line
    keeper.build(plan) / remove(names) / reshape(plan, bw) / nic_bytes(plan) / free_port(netns)
    keeper.netns_path(name), keeper.userns_path     # what a rank enters
    keeper.close()                     # its namespaces go with it (nothing of them is on the host's /run)

Nothing is left behind: every namespace lives inside the keeper's mount namespace, so when the keeper ends (close,
or its parent's death, a SIGKILL too: its stdin, a pipe only the parent holds, closes) the kernel frees them once
the last rank in them has ended. (Not PR_SET_PDEATHSIG: that fires when the parent's *thread* ends, and a Network
may be brought up from a thread that ends before the ranks do.)
The keeper answers one JSON line per request on its stdin (operations by name, from a fixed list).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import subprocess
import sys
import threading
import time

from commlib.network import kernel
from commlib.network.kernel import NetworkError

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
START_TIMEOUT_S = 20.0   # a Python process that imports no torch: well under a second
CALL_TIMEOUT_S = 120.0   # the largest build (16 nodes x 8 GPUs): seconds
SYSCTLS = {  # where a distribution turns an ordinary user's namespaces off: (the value that does, the one that not)
    "kernel.apparmor_restrict_unprivileged_userns": ("1", "0"),   # Ubuntu 23.10 and later
    "kernel.unprivileged_userns_clone": ("0", "1"),               # Debian's kernels before 11
    "user.max_user_namespaces": ("0", "15000"),
}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def switched_off(sysctls: str = "/proc/sys") -> str | None:
    """The sysctl setting that forbids an ordinary user's namespaces here (key=value), or None."""
    for key, (off, _) in SYSCTLS.items():
        try:
            with open(f"{sysctls}/{key.replace('.', '/')}") as f:
                if f.read(16).strip() == off:
                    return f"{key}={off}"
        except OSError:
            continue
    return None


def advice(sysctls: str = "/proc/sys") -> str:
    """What a learner can do where no keeper can be made (one clause)."""
    off = switched_off(sysctls)
    if off is None:
        return "run as root, or on a kernel that lets an ordinary user make namespaces"
    key = off.split("=")[0]
    return f"{off} forbids an ordinary user's namespaces: `sudo sysctl -w {key}={SYSCTLS[key][1]}`, or run as root"


class KeeperError(NetworkError):
    """The keeper could not start or answer (one line)."""


class Keeper:
    """A keeper process (see the module docstring) and the operations it runs for its parent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "commlib.network.userns"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env())
        first = self._read(START_TIMEOUT_S)
        if first.get("error"):
            self.close()
            raise KeeperError(first["error"])
        self.pid = self.proc.pid

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else None
        if line is None:   # no answer in time: it goes
            self.proc.kill()
            self.close()
            raise KeeperError(f"the user-namespace keeper did not answer within {timeout:.0f} s")
        if not line:       # it ended: its last words
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            why = _last_line(self.proc)
            self.close()
            raise KeeperError(f"the user-namespace keeper {why}")
        return json.loads(line)

    def call(self, op: str, *args):
        """op(*args) inside the keeper -> its result; a NetworkError there is raised here with its line."""
        with self._lock:
            if self.proc.poll() is not None:
                raise KeeperError("the user-namespace keeper has ended")
            self.proc.stdin.write((json.dumps({"op": op, "args": args}) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._read(CALL_TIMEOUT_S)
        if "error" in reply:
            raise NetworkError(reply["error"])
        return reply["result"]

    def build(self, plan: dict) -> list[str]:
        return self.call("build", plan)

    def remove(self, names: list[str]) -> list[str]:
        return self.call("remove", names) if self.proc.poll() is None else list(names)   # gone with it

    def reshape(self, plan: dict, bandwidth: float) -> None:
        self.call("reshape", plan, bandwidth)

    def nic_bytes(self, plan: dict) -> dict:
        return {(n, k): (sent, got) for n, k, sent, got in self.call("nic_bytes", plan)}

    def free_port(self, netns: str) -> int:
        return self.call("free_port", netns)

    def netns_path(self, name: str) -> str:
        from commlib.network.names import NETNS_DIR

        return f"/proc/{self.pid}/root{NETNS_DIR}/{name}"

    @property
    def userns_path(self) -> str:
        return f"/proc/{self.pid}/ns/user"

    def close(self) -> None:
        """End the keeper (its namespaces go once no rank is in them). Safe to call twice."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(5.0)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:   # a pipe whose reader is gone
                pass


def _child_env() -> dict:
    """The keeper's environment: this one, with commlib importable from wherever this process found it."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    return os.environ | {"PYTHONPATH": path}


def _last_line(proc) -> str:
    try:
        text = proc.stderr.read(1 << 16).decode(errors="replace") if proc.stderr else ""
    except (OSError, ValueError):
        text = ""
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return f"ended: {lines[-1][:300]}" if lines else f"ended (exit code {proc.returncode})"


def available() -> tuple[bool, str]:
    """(True, how) where this process, not root, may build the kernel network in a keeper, else (False, why)
    in one line, with what to do. Tried once per process (a keeper that builds a shaped veth pair)."""
    why = kernel.prerequisites()
    if why:
        return False, why
    if "userns" not in kernel._probed:
        kernel._probed["userns"] = probe()
    if kernel._probed["userns"]:
        return False, f"the kernel network cannot be built here: {kernel._probed['userns']}"
    return True, "Linux namespaces in a user namespace of your own, shaped by tc HTB"


def _ask_once(op: str):
    """op() in a keeper started for it and ended after it -> its result; KeeperError, OSError or NetworkError
    (a RuntimeError) where the keeper could not start or answer."""
    keeper = Keeper()
    try:
        return keeper.call(op)
    finally:
        keeper.close()


def netem_available() -> bool:
    """kernel.netem_available, asked of a keeper (an ordinary user cannot try it on the host)."""
    try:
        return bool(_ask_once("netem"))
    except (OSError, RuntimeError):
        return False


def probe() -> str | None:
    """None where a keeper can build a shaped veth pair here, else why (one line, with what to do)."""
    try:
        why = _ask_once("probe")
    except (OSError, RuntimeError) as e:
        return f"{e}; {advice()}"
    return None if why is None else f"{why}; {advice()}"


# ---- the keeper process ---------------------------------------------------------------------------------------

def _become_root() -> None:
    """unshare a user, mount and network namespace; map this user to root in it; a private /run of our own."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET), "unshare(user, mount, network)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(b"tmpfs", b"/run", b"tmpfs", 0, b"mode=0755"), "mount tmpfs on /run")
    os.mkdir("/run/netns", 0o755)


def _ops() -> dict:
    return {"build": kernel.build, "remove": kernel.remove, "reshape": kernel.reshape, "probe": kernel._probe,
            "nic_bytes": lambda plan: [[n, k, s, r] for (n, k), (s, r) in kernel.nic_bytes(plan).items()],
            "free_port": kernel.free_port, "netem": kernel.netem_available}


def main() -> None:
    """The keeper: become root in namespaces of our own, say so, then run requests until stdin closes."""
    out = sys.stdout
    sys.stdout = sys.stderr   # only replies on stdout
    try:
        _become_root()
        ops = _ops()
    except OSError as e:
        out.write(json.dumps({"error": f"cannot make a user namespace here ({e.strerror or e})"}) + "\n")
        out.flush()
        return
    out.write(json.dumps({"ready": os.getpid(), "at": time.time()}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            result = {"result": ops[request["op"]](*request["args"])}
        except Exception as e:   # every failure goes back as one line; the keeper runs on
            result = {"error": " ".join(str(e).split())[:500] or type(e).__name__}
        out.write(json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
