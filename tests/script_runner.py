"""Run Python scripts as `python SCRIPT ARGS` would, each in a process of its own, forked from one that has imported
torch and commlib once (about 2 s a script on 2 cores, 17 benchmarks).

    with Runner(root) as run:
        code, out, err = run("benchmarks/x.py", ["--quick"], cwd=tmp, timeout=170)

Each script's process: a fork of the runner (so a fresh copy of its state: nothing a script does reaches the next),
its own session, stdin from /dev/null, stdout and stderr to files, the script's folder first on sys.path, sys.argv
as given, run as __main__ and left as an interpreter leaves (atexit handlers run); its exit status is the script's
(SystemExit's code, 1 and a traceback for an exception). Past its timeout its whole session is killed and the
status is -9. The runner reads one JSON request a line on stdin.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile

SERVE = r"""
import json, os, runpy, signal, sys, time, traceback
import torch, commlib  # noqa: F401  (what every script imports: once, here)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:   # the script's process: it leaves by raising SystemExit (atexit and finalizers run, as at an exit)
        code = 1
        try:
            os.setsid()
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                f = os.open(path, flags, 0o600)
                os.dup2(f, fd)
                os.close(f)
            os.chdir(req["cwd"])
            sys.argv = [req["script"], *req["args"]]
            sys.path[0] = os.path.dirname(req["script"])   # python -c's "" (the cwd): as `python SCRIPT` has it
            try:
                runpy.run_path(req["script"], run_name="__main__")
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
        finally:
            sys.stdout.flush(), sys.stderr.flush()
        sys.exit(code)
    print(json.dumps({"pid": pid}), flush=True)   # its session's id: what to kill if the caller gives up
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = -9
            break
        time.sleep(0.02)
    print(json.dumps({"code": code}), flush=True)
"""


class Runner:
    """One runner process (see the module docstring); call it to run a script."""

    def __init__(self, root, env=None):
        self.root, self.env, self.tmp = str(root), env, tempfile.mkdtemp(prefix="commlib-scripts-")
        self.proc, self.pending, self.child = None, False, None

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE], cwd=self.root, env=self.env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pending, self.child = False, None

    def __call__(self, script: str, args: list, cwd, timeout: float) -> tuple[int, str, str]:
        """-> (exit status, stdout, stderr) of `python script *args` run in cwd."""
        if self.pending:   # a call cut short (pytest-timeout): its answer must not be taken for this one's
            self._stop()
        if self.proc is None:
            self._start()
        out, err = os.path.join(self.tmp, "out"), os.path.join(self.tmp, "err")
        self.pending = True
        self.proc.stdin.write(json.dumps({"script": os.path.join(self.root, script), "args": list(args),
                                          "cwd": str(cwd), "timeout": timeout, "out": out, "err": err}) + "\n")
        self.proc.stdin.flush()
        started = self.proc.stdout.readline()
        if started:
            self.child = json.loads(started)["pid"]
        line = started and self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the script runner died (exit status {self.proc.wait()}) running {script}")
        self.pending = False
        with open(out, errors="replace") as o, open(err, errors="replace") as e:
            return json.loads(line)["code"], o.read(), e.read()

    def _stop(self) -> None:
        """End the runner: once it has read its last request, or at once, with the script's whole session, if a
        call was cut short."""
        if self.proc is None:
            return
        if self.pending:
            if self.child is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.child, signal.SIGKILL)
            self.proc.kill()
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self._stop()
        for name in ("out", "err"):
            path = os.path.join(self.tmp, name)
            if os.path.exists(path):
                os.remove(path)
        os.rmdir(self.tmp)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
