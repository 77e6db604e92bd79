"""A workshop server: K learners, each an ordinary user with a copy of the course (`course.py copy`) that uses
one shared environment, run chapter 1 at once, as a room does after "run every cell". Reports the time each
waits for the chapter (nbval of notebooks/01_collectives.ipynb: every cell, its outputs checked), for K = 1, 2,
4, ... learners, and what was left behind: processes of the learners, files of theirs in the temp folders and
/dev/shm. Exits 1 if any learner's chapter failed or anything was left.

    sudo python benchmarks/workshop_learners.py [--learners 1,2,4,8] [--out FILE] [--quick]

As root, each learner is a user of its own (made with useradd, removed at the end with its home); otherwise
every learner runs as this user, in a folder of its own. --quick (what CI runs): 2 learners.
Learners per core: the most learners whose slowest chapter stays within the course's 60 s a chapter, over
the cores this machine has.
"""

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commlib.bench import arguments

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "notebooks/01_collectives.ipynb"
PREFIX = "commlib-l"            # the learners' user names: commlib-l1, commlib-l2, ...
CHAPTER_LIMIT_S = 60.0          # DEVELOPERS.md: each chapter runs top to bottom in under 60 s on 2 cores
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


def _users(k: int, base: Path) -> list[dict]:
    """k learners: (name, uid, gid, home). As root, users made for the run; else this user k times, each in a
    folder of its own for this room."""
    out = []
    for i in range(1, k + 1):
        if os.geteuid() != 0:
            home = base / f"room{k}" / f"learner{i}"
            home.mkdir(parents=True)
            out.append({"name": pwd.getpwuid(os.getuid()).pw_name, "uid": os.getuid(), "gid": os.getgid(),
                        "home": home, "made": False})
            continue
        name = f"{PREFIX}{i}"   # this benchmark's own users: one left by a killed run is taken over, and removed
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True,
                           capture_output=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        p = pwd.getpwnam(name)
        shutil.rmtree(Path(p.pw_dir) / "commlib", ignore_errors=True)   # a killed run's copy
        out.append({"name": name, "uid": p.pw_uid, "gid": p.pw_gid, "home": Path(p.pw_dir), "made": True})
    return out


def _as(user: dict, cmd: list[str]) -> list[str]:
    if user["uid"] == os.geteuid():
        return cmd
    return ["setpriv", f"--reuid={user['uid']}", f"--regid={user['gid']}", "--init-groups", *cmd]


def _env(user: dict) -> dict:
    return {"PATH": USER_PATH, "HOME": str(user["home"]), "USER": user["name"], "LANG": "C.UTF-8",
            "TMPDIR": tempfile.gettempdir()}


def _theirs(uids: set[int]) -> dict:
    """What the learners' uids hold now: processes, files in the temp folders and /dev/shm."""
    procs = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if d.stat().st_uid in uids:
                    procs.append(int(d.name))
            except OSError:
                continue
    files = []
    for folder in {tempfile.gettempdir(), "/tmp", "/dev/shm"}:
        try:
            files += [str(p) for p in Path(folder).iterdir() if p.lstat().st_uid in uids]
        except OSError:
            continue
    return {"processes": sorted(procs), "files": sorted(files)}


def _why(out: str) -> str:
    """A failed run's first error, as pytest printed it (its first line starting 'E '), for the report."""
    for line in out.splitlines():
        if line.startswith("E ") and line[1:].strip():
            return line[1:].strip()[:300]
    return ""


def room(k: int, base: Path) -> dict:
    """k learners copy the course and run chapter 1 at once -> their times and what was left."""
    users = _users(k, base)
    try:
        return _room(users)
    finally:
        for u in users:
            if u["made"]:
                subprocess.run(["userdel", "--remove", u["name"]], capture_output=True, timeout=60,
                               env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
            else:
                shutil.rmtree(u["home"] / "commlib", ignore_errors=True)


def _room(users: list[dict]) -> dict:
    k = len(users)
    uids = {u["uid"] for u in users} - {os.geteuid()}
    before = _theirs(uids) if uids else {"processes": [], "files": []}   # a former user's, with a uid reused
    copies = []
    for i, u in enumerate(users):
        dest = u["home"] / "commlib"
        done = subprocess.run(_as(u, [sys.executable, str(ROOT / "course.py"), "copy", str(dest)]),
                              capture_output=True, text=True, env=_env(u), timeout=120)
        if done.returncode:
            raise SystemExit(f"workshop_learners: learner {i + 1}'s copy failed: {done.stderr.strip()}")
        copies.append(dest)
    procs = []
    t0 = time.perf_counter()
    for u, dest in zip(users, copies):   # at once: each learner's `course.py test CHAPTER`
        cmd = _as(u, [sys.executable, "course.py", "test", CHAPTER, "-p", "no:xdist", "-q"])
        procs.append(subprocess.Popen(cmd, cwd=dest, env=_env(u), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    results = []
    for u, p in zip(users, procs):
        out, _ = p.communicate(timeout=600)
        results.append({"learner": u["name"], "seconds": round(time.perf_counter() - t0, 2), "ok": p.returncode == 0,
                        "last": out.strip().splitlines()[-1] if out.strip() else "", "why": _why(out)})
    now = _theirs(uids) if uids else {"processes": [], "files": []}
    left = {key: sorted(set(now[key]) - set(before[key])) for key in now}
    return {"learners": k, "results": results, "left": left}


def _sizes(text: str) -> list[int]:
    """--learners: room sizes, comma-separated, each 1 to 64."""
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(not 1 <= k <= 64 for k in sizes):
        raise argparse.ArgumentTypeError(f"--learners must be integers from 1 to 64, comma-separated, got {text!r}")
    return sizes


def main() -> int:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--learners", default="1,2,4,8", type=_sizes,
                    help="the room sizes to run, comma-separated (default 1,2,4,8)")
    ap.add_argument("--out", help="write the figures as JSON to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: 2 learners")
    a = ap.parse_args()
    sizes = a.learners
    if a.quick:
        sizes = [2]
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        ap.error("as root each learner is a user of its own, which needs setpriv (util-linux)")
    cores = len(os.sched_getaffinity(0))
    load0 = os.getloadavg()[0]
    rooms, failed = [], False
    with tempfile.TemporaryDirectory(prefix="commlib-workshop-") as base:
        os.chmod(base, 0o755)
        for k in sizes:
            r = room(k, Path(base))
            rooms.append(r)
            times = [x["seconds"] for x in r["results"]]
            bad = [x for x in r["results"] if not x["ok"]]
            left = r["left"]["processes"] or r["left"]["files"]
            failed |= bool(bad or left)
            said = "" if not bad else f"; FAILED: {bad[0]['learner']}: {bad[0]['last']}: {bad[0]['why']}"
            print(f"{k:>3} learner(s) at once: chapter 1 in {min(times):6.1f} - {max(times):6.1f} s{said}; "
                  f"left behind: {'nothing' if not left else left}")
    fit = [r["learners"] for r in rooms if max(x["seconds"] for x in r["results"]) <= CHAPTER_LIMIT_S
           and all(x["ok"] for x in r["results"])]
    per_core = max(fit) / cores if fit else 0.0
    print(f"machine: {cores} cores, load {load0:.1f} at start, {os.getloadavg()[0]:.1f} at the end; "
          f"{'users of their own' if os.geteuid() == 0 else 'one user'}")
    print(f"learners per core (chapter 1 within {CHAPTER_LIMIT_S:.0f} s for each): {per_core:.1f}"
          + ("" if not a.quick else " (--quick: 2 learners only)"))
    if a.out:
        Path(a.out).write_text(json.dumps({"cores": cores, "load": [load0, os.getloadavg()[0]], "rooms": rooms,
                                           "learners_per_core": per_core}, indent=1, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
