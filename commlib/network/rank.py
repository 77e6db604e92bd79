"""One rank of `python -m commlib network run`: torchrun starts this module, which moves into its GPU's network
namespace and runs the learner's script as __main__.

    python -m commlib.network.rank SCRIPT [ARGS...]      # as torchrun's entry point, never by hand

Its environment (set by commlib.network.run): GPUS, the namespace path of this node's GPUs without the GPU's
number; COMMLIB_NETWORK (commlib.network.spec), which the script sees unchanged. It dies with the torchrun that
started it (PR_SET_PDEATHSIG: torchrun puts its ranks in sessions of their own, out of reach of a killpg).
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import time

GPUS = "COMMLIB_NETWORK_GPUS"
FAILURES = "COMMLIB_NETWORK_FAILURES"   # a folder where a failing rank notes: time, rank, what
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL this process when the thread that started it ends (a killed torchrun leaves no rank behind)."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if parent == 1 or os.getppid() != parent:  # it died before the line above
        os._exit(1)


def main(argv: list[str]) -> None:
    from commlib.cluster.netns import enter

    die_with_parent()
    enter(os.environ[GPUS] + os.environ["LOCAL_RANK"])  # before any thread: the threads torch starts follow
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"            # the GPU's only link: its own address
    script = argv[0]
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            _note(f"exited with {e.code!r}")
        raise
    except BaseException as e:
        _note(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
        raise


def _note(line: str) -> None:
    """Tell `network run` when and how this rank failed (the earliest note names the job's root cause)."""
    folder = os.environ.get(FAILURES)
    if folder:
        try:
            with open(os.path.join(folder, f"rank{os.environ.get('RANK', '?')}"), "w") as f:
                f.write(f"{time.time():.6f} {os.environ.get('RANK', '-1')} {line}\n")
        except OSError:
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
