"""python -m commlib network run: a learner's torchrun script on the emulated nodes, each rank in its GPU's
namespace (commlib.network.kernel), then the network removed.

    status = run("examples/ddp_train.py", ["--traces", "traces"], nodes=2, gpus_per_node=1, bandwidth=20e6)

One torchrun per node (`--nproc-per-node G`, `--node-rank n`, static rendezvous: its store hosted by node 0's
first GPU, no restarts; the nodes are known, so nothing elastic is needed, and c10d's dynamic rendezvous cost
1.5 s a run: `network run` of a script that only joins and leaves its group took a median of 5.07 s with it and
3.60 s static, 6 runs each, interleaved, on 2 cores), each started inside its node's first GPU namespace; each
of its ranks moves into its own GPU's namespace (commlib.network.rank) and finds COMMLIB_NETWORK
(commlib.network.spec) in its environment. Every output line starts with its node and rank (torchrun's own lines
with the node). The exit status is the job's: 0, or the
exit code of the first rank that failed, named in one line as soon as its torchrun reports it; the other
nodes are then stopped; or 124 past `timeout` seconds (every process stopped, one line says so). Ctrl-C or
SIGTERM stop every process (torchrun, then its ranks, which die with it)
and remove the network; so does a SIGKILL of this process (the torchruns die with it, and the next start or
`network clean` removes its network).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from commlib.cluster.envinfo import usable_cores
from commlib.cluster.output import PROFILER_CHATTER
from commlib.network import names
from commlib.network.network import Network
from commlib.network.rank import FAILURES, GPUS, PR_SET_PDEATHSIG

STOP_GRACE_S = 3.0                      # SIGTERM to each torchrun, then SIGKILL (its ranks die with it)
ROOT_CAUSE_WAIT_S = 0.5                 # after the first failure, how long other notes may still arrive


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM while the job ran. A BaseException, as KeyboardInterrupt is: the handler raises it at any
    point of the main thread, also inside threading.Thread.start(), whose `except Exception` would then undo a
    thread already started (a KeyError in its bootstrap, and the job's last line lost)."""


def _torchrun(net: Network, node: int, port: int, script: str, args: list[str], logs: str) -> list[str]:
    first = net.gpu_address(node * net.gpus_per_node)
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(net.nodes), "--node-rank", str(node),
            "--nproc-per-node", str(net.gpus_per_node), "--rdzv-backend", "static",
            "--rdzv-endpoint", f"{net.gpu_address(0)}:{port}", "--local-addr", first, "--max-restarts", "0",
            "--monitor-interval", "0.1", "--tee", "3", "--log-dir", os.path.join(logs, f"node{node}"),
            "-m", "commlib.network.rank", script, *args]


def _enter_and_die_with_us(path: str, userns: str | None):
    def preexec():  # in the child, before exec: torchrun starts inside node `path`'s first GPU
        from commlib.cluster.netns import enter, enter_user

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if userns:   # an ordinary user's network: its keeper's user namespace first (one thread here: a fork)
            enter_user(userns)
        enter(path)
    return preexec


NOISE = "The hostname of the client socket cannot be retrieved"   # c10d's reverse lookup of an emulated address


def _forward(stream, node: int, sink, tail: list, stopping: threading.Event) -> None:
    """Copy a torchrun's lines to `sink`, each with its node (its ranks' lines carry node and rank already).
    Left out: c10d's warning that no name resolves for the namespaces' addresses (there is none to find), and
    what the torchruns print once we stop them (their SignalException tracebacks say only that), and the C++
    profiler's chatter (cluster.output.PROFILER_CHATTER: its stages, and the CUDA build's probe of absent GPUs)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        tail.append(line)
        del tail[:-200]
        if NOISE in line or stopping.is_set() or PROFILER_CHATTER.match(line.split(": ", 1)[-1]):
            continue
        sink.write((line if line.startswith(f"node {node} rank ") else f"node {node}: {line}") + "\n")
        sink.flush()


def _root_cause(failures: str, tails: dict, node: int) -> tuple[str, int | None]:
    """(who failed and how, in words; its exit code) from rank.py's notes (the earliest), else from the summary
    the failing node's torchrun printed."""
    notes = []
    for f in os.listdir(failures):
        try:
            with open(os.path.join(failures, f)) as fh:
                when, rank, line = fh.read(2000).split(" ", 2)
            notes.append((float(when), int(rank), line.strip()))
        except (OSError, ValueError):
            continue
    text = "\n".join(tails[node])
    code = re.search(r"exitcode\s*:\s*(-?\d+)", text)
    exit_code = None if code is None else int(code.group(1))   # torchrun's: -s where signal s killed the rank
    status = 128 - exit_code if exit_code is not None and exit_code < 0 else exit_code   # killed by s: 128 + s
    if notes:
        _, rank, line = min(notes)
        return f"rank {rank} failed: {line}", status or 1
    rank = re.search(r"rank\s*:\s*(\d+) \(local_rank", text)
    who = f"rank {rank.group(1)}" if rank else f"a rank of node {node}"
    how = f"exit code {exit_code}" if exit_code is not None else "torchrun reported a failure"
    if exit_code is not None and exit_code < 0:
        try:
            how += f", {signal.Signals(-exit_code).name}"
        except ValueError:
            pass
    said = _last_words(tails[node], rank.group(1)) if rank else None
    return f"{who} failed ({how})" + (f"; its last line: {said}" if said else ""), status


def _last_words(lines: list, rank: str) -> str | None:
    """The last line rank `rank` wrote to stderr before it died (a C++ abort's own line, glibc's "malloc(): ..." or
    "terminate called ..."), before Python's faulthandler dump where there is one; None if it printed none."""
    said = []
    for line in lines:
        head, _, rest = line.partition(": ")
        if not re.fullmatch(rf"node \d+ rank {rank}", head):
            continue
        if rest.startswith("Fatal Python error"):
            break
        if rest.strip():
            said.append(" ".join(rest.split())[:300])
    return said[-1] if said else None


def _stop(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


TIMED_OUT = 124                         # the exit status when --timeout passed (as coreutils' timeout(1))


def run(script: str, args: list[str], nodes: int, gpus_per_node: int, nics_per_node: int, bandwidth: float,
        out=None, err=None, timeout: float | None = None) -> int:
    """Run SCRIPT ARGS as a torchrun job on a kernel network built for it -> the job's exit status (TIMED_OUT
    when it ran past `timeout` seconds, counted from the start of the network: then stopped as on Ctrl-C). The
    caller has checked the arguments (cli.check_run); nothing of the network is left when this returns."""
    out, err = out or sys.stdout, err or sys.stderr
    net = Network(nodes, gpus_per_node, nics_per_node, bandwidth=bandwidth, kind="kernel", quiet=True)
    names.dead_run_logs()   # a SIGKILLed run's, as the next start removes its namespaces
    tmp = names.run_logs()
    failures = os.path.join(tmp, "failures")
    os.mkdir(failures)
    procs: list = []
    threads: list = []
    stopping, last = threading.Event(), None
    tails: dict = {}
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    received: list[str] = []

    def interrupted(signum, _frame):
        received.append(signal.Signals(signum).name)
        raise Interrupted(received[-1])  # where Python drops it, the loop below raises it again

    for s in previous:
        signal.signal(s, interrupted)
    status = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        net.up()
        err.write(f"network run: {net.summary()}; {net.world_size} rank(s) of {script}, sharing this machine's "
                  f"{usable_cores()} core(s)\n")   # issue 64: more ranks than cores compute slower than a real cluster's
        err.flush()
        port = net.free_port(f"{net.name}-n0g0")
        env = os.environ | {"COMMLIB_NETWORK": net.spec().to_json(), FAILURES: failures, "OMP_NUM_THREADS": "1",
                            "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
                                p for p in [os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                                            os.environ.get("PYTHONPATH", "")] if p)}
        for n in range(net.nodes):
            prefix = net.netns_path(f"{net.name}-n{n}g")
            node_env = env | {GPUS: prefix, "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": f"node {n} rank ${{rank}}: "}
            enter = _enter_and_die_with_us(prefix + "0", net.userns_path)
            procs.append(subprocess.Popen(_torchrun(net, n, port, script, args, tmp), env=node_env,
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True, preexec_fn=enter))
        for n, p in enumerate(procs):
            tails[n] = []
            for stream, sink in ((p.stdout, out), (p.stderr, err)):
                # the tail that names the failure is stderr's: torchrun's summary, a rank's last words
                tail = tails[n] if stream is p.stderr else []
                t = threading.Thread(target=_forward, args=(stream, n, sink, tail, stopping), daemon=True)
                t.start()
                threads.append(t)
        while True:
            # a signal whose raise Python dropped: the handler ran inside an at-fork hook of Popen's (logging's
            # _releaseLock prints "Exception ignored in ...") and the job ran on, its SIGTERM lost
            if received:
                raise Interrupted(received[0])
            codes = [p.poll() for p in procs]
            failed = [n for n, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                time.sleep(ROOT_CAUSE_WAIT_S)
                for t in threads[2 * failed[0]:2 * failed[0] + 2]:
                    t.join(timeout=2.0)
                why, code = _root_cause(failures, tails, failed[0])
                last = f"network run: {why}; stopping the job and removing the network"
                status = code if code not in (None, 0) else codes[failed[0]]
                break
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                last = (f"network run: --timeout {timeout:g} s passed with {codes.count(None)} of {len(procs)} "
                        "node(s) still running: stopping every process and removing the network")
                status = TIMED_OUT
                break
            time.sleep(0.05)
    except Interrupted as e:
        last = f"network run: {e} received: stopping every process and removing the network"
        status = 130 if str(e) == "SIGINT" else 143
    finally:
        for s in previous:  # stopping takes seconds at most: a second Ctrl-C must not cut it short
            signal.signal(s, signal.SIG_IGN)
        if last or any(p.poll() is None for p in procs):
            stopping.set()  # what the torchruns say as they are stopped is noise; a finished job's lines are not
        try:
            _stop(procs)
            for t in threads:
                t.join(timeout=2.0)
            if last:
                err.write(last + "\n")
            try:
                net.down()
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
    err.flush()
    return status
