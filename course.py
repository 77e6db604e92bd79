#!/usr/bin/env python3
"""Set up the course and open it, run every test, or build it as a static book. Needs only Python >= 3.10
with venv and pip (the book also needs npm once, to fetch MathJax and the widget manager).

    python3 course.py lab     # create .venv, install, open the course in JupyterLab
    python3 course.py test    # create .venv, install, run the unit tests and nbval of every notebook
                              # (pytest-xdist: a worker per core and one more, then the tests marked `alone`)
    python3 course.py book    # create .venv, install, build the book into build/book (--no-solutions: without them)
    python3 course.py copy ~/commlib   # a learner's own copy that uses this course's environment (a workshop)

    python3 course.py lab --lang zh_CN         # the Chinese edition's notebooks (written first), in JupyterLab
    python3 course.py book --lang zh_CN        # the Chinese edition of the book, into build/book-zh_CN
    python3 course.py test --lang zh_CN        # nbval of the Chinese edition's notebooks, written afresh, against
                                               # the outputs of its own run; then English left in what they showed
    python3 course.py notebooks --lang zh_CN   # only write build/notebooks-zh_CN/ from notebooks/ and locales/
                                               # (--execute [--only 03]: first run the chapters in Chinese and
                                               # store their outputs in locales/zh_CN/outputs/, ~3 min)

Extra arguments are passed on (to jupyter lab, to pytest, or to book/build.py). The environment is rebuilt
only when requirements.txt or pyproject.toml change.
"""

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SHARED = ".commlib-venv"   # in a learner's copy (`course.py copy`): the path of the shared environment it uses


def venv_path(root: Path = ROOT) -> Path:
    """The environment the course runs in: COMMLIB_VENV, else the one root/.commlib-venv names (a learner's copy
    made by `course.py copy` on a workshop server), else root/.venv."""
    if os.environ.get("COMMLIB_VENV"):
        return Path(os.environ["COMMLIB_VENV"]).resolve()
    shared = root / SHARED
    if shared.is_file():
        return Path(shared.read_text(encoding="utf-8").strip())
    return root / ".venv"


VENV = venv_path()
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".commlib-installed"
LAB_SETTINGS = ROOT / "jupyterlab-settings"  # defaults under the learner's own settings: no news pop-up


def _fingerprint() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"   # PyTorch's own index of its CPU builds (PEP 503)
INDEX_ENV = "COMMLIB_TORCH_INDEX"    # another index of torch's CPU builds (a mirror, a workshop's own); "none": skip
REACH_TIMEOUT_S = 8.0                # an index that says nothing in this time is taken as unreachable


def nvidia_driver(proc: str = "/proc/driver/nvidia/version") -> bool:
    """True where an NVIDIA driver is loaded (its /proc file; nvidia-smi where /proc says nothing)."""
    if os.path.exists(proc):
        return True
    return any(os.access(f"{d}/nvidia-smi", os.X_OK) for d in ("/usr/bin", "/usr/local/bin", "/bin"))


def wants_cpu_build(platform: str = sys.platform, driver: bool | None = None) -> bool:
    """PyPI's torch for Linux is the CUDA build (several GB); elsewhere (macOS, Windows) it is the CPU build. So
    the CPU build is asked for by name on Linux without an NVIDIA driver."""
    return platform.startswith("linux") and not (nvidia_driver() if driver is None else driver)


def reachable(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """None where url answers within timeout seconds (its name lookup included), else why, in a few words."""
    import threading
    import urllib.request

    said: list = []

    def ask():
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                r.read(1)
            said.append(None)
        except Exception as e:   # URLError, HTTPError, OSError, ValueError: each is "not reachable"
            said.append(" ".join(str(getattr(e, "reason", e)).split())[:120] or type(e).__name__)
    t = threading.Thread(target=ask, daemon=True)
    t.start()
    t.join(timeout)
    return said[0] if said else f"no answer within {timeout:g} s"


def torch_line(root: Path = ROOT) -> str:
    """requirements.txt's torch requirement ("torch==2.13.0")."""
    for line in (root / "requirements.txt").read_text().splitlines():
        if line.split("#")[0].strip().startswith("torch=="):
            return line.split("#")[0].strip()
    raise ValueError("requirements.txt pins no torch==VERSION")


def installed_torch(python) -> tuple[str, bool] | None:
    """(version, is a CUDA build) of the torch that `python` would import, from its metadata (no import)."""
    code = ("import importlib.metadata as m; r = m.requires('torch') or []; "
            "print(m.version('torch'), any(x.startswith('nvidia-') for x in r))")
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    if done.returncode:
        return None
    version, cuda = done.stdout.split()
    return version, cuda == "True" or ("+cu" in version)


def install_cpu_torch(python, pip_extra=(), say=print) -> str:
    """Where there is no GPU, torch's CPU build from PyTorch's CPU index (or COMMLIB_TORCH_INDEX) before the rest,
    which then finds torch==VERSION satisfied by VERSION+cpu. One line says what was done -> "cpu", "fallback"
    (the index cannot be reached: pip's usual index decides), or "skipped" (a GPU driver, or torch already
    installed, or COMMLIB_TORCH_INDEX=none)."""
    index = os.environ.get(INDEX_ENV, TORCH_CPU_INDEX).rstrip("/")
    if index == "none" or not wants_cpu_build() or installed_torch(python) is not None:
        return "skipped"
    why = reachable(index + "/torch/")
    if why:
        say(f"course.py: no GPU here, but {index} cannot be reached ({why}); pip takes torch from its "
            "usual index (PyPI's for Linux is the CUDA build, several GB)", flush=True)
        return "fallback"
    say(f"course.py: no GPU here: torch's CPU build, from {index}", flush=True)
    subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--index-url", index,
                    *pip_extra, torch_line()], check=True)
    return "cpu"


def ensure_env() -> None:
    if sys.version_info < (3, 10):
        sys.exit(f"commlib needs Python >= 3.10 (3.11 recommended); this is {sys.version.split()[0]}")
    if STAMP.exists() and STAMP.read_text() == _fingerprint():
        return
    if not os.access(VENV.parent, os.W_OK) or (VENV.exists() and not os.access(VENV, os.W_OK)):
        sys.exit(f"course.py: {VENV} is not up to date with requirements.txt and cannot be written by this user; "
                 "ask whoever installed it to run `python3 course.py test` there once")
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check"]
    install_cpu_torch(PY)
    subprocess.run(pip + ["-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)
    got = installed_torch(PY)
    if got:
        print(f"course.py: torch {got[0]}, " + ("a CUDA build" if got[1] else "the CPU build"), flush=True)
    STAMP.write_text(_fingerprint())


def running_as_root() -> bool:
    return getattr(os, "geteuid", lambda: -1)() == 0


def lab_command(python, root: Path = ROOT, extra=(), folder: str = "notebooks") -> list[str]:
    """The JupyterLab command line of `course.py lab` (tests/test_browser.py starts the same one on a copy).

    Serves root (the notebooks link ../assets/) and opens its first numbered notebook: the URL JupyterLab prints
    (its default_url) is that notebook's, not the Launcher's. Listens on 127.0.0.1 only, with Jupyter's token;
    fetches no news and checks for no updates, and LAB_SETTINGS/overrides.json sets "never" as the default of
    the notification settings, so no "Jupyter news" pop-up covers the chapters (a learner may still opt in);
    as root it adds --allow-root (containers and cloud VMs often run as root). Kernels talk to JupyterLab over
    Unix sockets (ipc) where there are some: no TCP port for a kernel, and none of ipykernel's "Kernel is running
    over TCP without encryption" warnings, one per kernel started, which a learner can do nothing about.
    folder: where the chapters are, under root (build/notebooks-zh_CN for the Chinese edition)."""
    first = min(course_notebooks(root, folder), default=None)
    opens = [f"--LabApp.default_url=/lab/tree/{first.relative_to(root).as_posix()}"] if first else []
    return [str(python), "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}", *opens,
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            f"--LabApp.app_settings_dir={LAB_SETTINGS}", *(["--KernelManager.transport=ipc"] if os.name != "nt" else []),
            # No ping settings. jupyter_server pings each kernel's socket every 30 s and closes it when no pong came
            # for ws_ping_timeout, 90 s by default; a timeout of 30 s (once set here, to quiet tornado) closed every
            # socket at its first ping. tornado >= 6.5 logs one warning per server that this timeout is longer
            # than its own interval: harmless, tornado's own pings are not the ones that run (issue 40).
            *(["--allow-root"] if running_as_root() else []), *extra]


def workspaces_dir() -> Path:
    """Where JupyterLab keeps this user's workspaces (jupyterlab_server's default: JUPYTERLAB_WORKSPACES_DIR, or
    lab/workspaces in Jupyter's config folder)."""
    if os.environ.get("JUPYTERLAB_WORKSPACES_DIR"):
        return Path(os.environ["JUPYTERLAB_WORKSPACES_DIR"])
    return Path(os.environ.get("JUPYTER_CONFIG_DIR") or Path.home() / ".jupyter") / "lab" / "workspaces"


def bring_to_front(notebook: str, folder: Path | None = None) -> bool:
    """In the saved default workspace, make notebook (a path under the served root) the tab in front, where it is
    one of the restored tabs. JupyterLab restores the tabs a learner left open and puts the one that was in front
    back in front, even over the file its /lab/tree URL names when that file was among them (jupyterlab#10876):
    `course.py lab`'s URL names chapter 0, so chapter 0 comes to the front and the learner's other chapters stay
    open behind it. Changes nothing else, and nothing when there is no such workspace or tab. -> changed?"""
    key = f"notebook:{notebook}"
    for path in sorted((folder or workspaces_dir()).glob("default-*.jupyterlab-workspace")):
        try:
            if path.stat().st_size > 16 << 20:  # a workspace is a few KiB: leave anything else alone
                continue
            saved = json.loads(path.read_text(encoding="utf-8"))
            main = saved["data"]["layout-restorer:data"]["main"]
            areas, found = [main.get("dock")], False
            while areas:  # the dock is a tree of split areas and tab areas
                area = areas.pop()
                if isinstance(area, dict) and area.get("type") == "tab-area" and key in area.get("widgets", []):
                    area["currentIndex"], found = area["widgets"].index(key), True
                elif isinstance(area, dict):
                    areas.extend(area.get("children") or [])
            if not found or main.get("current") == key:
                continue
            main["current"] = key
            tmp = path.with_name(path.name + ".commlib-tmp")
            tmp.write_text(json.dumps(saved), encoding="utf-8")
            os.replace(tmp, path)
            return True
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # not a workspace as JupyterLab 4 writes it: JupyterLab decides, as it would without us
    return False


def course_notebooks(root: Path = ROOT, folder: str = "notebooks") -> list[Path]:
    return sorted((Path(root) / folder).glob("[0-9]*.ipynb"))


def languages(root: Path = ROOT) -> list[str]:
    """The editions besides English: the folders of locales/ (book/i18n.py writes and checks their catalogs)."""
    return sorted(p.name for p in (Path(root) / "locales").glob("*") if (p / "LC_MESSAGES").is_dir())


def take_lang(args: list[str], root: Path = ROOT) -> tuple[str | None, list[str]]:
    """(--lang's value, the other arguments); ValueError naming --lang and the editions there are."""
    lang, rest, it = None, [], iter(args)
    for a in it:
        if a == "--lang" or a.startswith("--lang="):
            lang = a.partition("=")[2] if "=" in a else next(it, "")
        else:
            rest.append(a)
    if lang is not None and lang not in languages(root):
        raise ValueError(f"--lang {lang!r}: no such edition; choose one of {', '.join(languages(root)) or 'none'}")
    return lang, rest


def trust_notebooks(python, root: Path = ROOT, folder: str = "notebooks") -> str | None:
    """Mark the course's own notebooks trusted (`jupyter trust`: signed with this user's Jupyter key), so that
    JupyterLab runs their saved JavaScript: chapter 1's animation steps as soon as it opens, before any cell runs,
    and the server logs no "Notebook ... is not trusted" for them. A notebook the learner saves stays trusted
    (JupyterLab re-signs what it saves from a trusted one). -> None, or one line saying why it could not."""
    paths = course_notebooks(root, folder)
    if not paths:
        return None
    try:  # quiet: it prints a line per notebook signed
        done = subprocess.run([str(python), "-m", "jupyter", "trust", *map(str, paths)], capture_output=True,
                              text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"could not mark the notebooks trusted ({e}); the animations step only once their cell has run"
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"could not mark the notebooks trusted ({last}); the animations step only once their cell has run"
    return None


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def run(cmd: list[str], stop: int = signal.SIGTERM, grace_s: float = 30.0, cwd: Path = ROOT) -> int:
    """Run cmd in a process group of its own until it ends. Ctrl-C, SIGTERM or SIGHUP to course.py send `stop` to
    that group (JupyterLab then shuts its kernels down), and SIGKILL after grace_s: nothing it started outlives
    course.py. -> its exit status (128 + the signal's number when a signal stopped it)."""
    if os.name == "nt":  # no process groups or SIGHUP: Ctrl-C reaches the console's processes anyway
        return subprocess.run(cmd, cwd=cwd).returncode
    proc, got = None, []

    def forward(signum, frame):
        got.append(signum)
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, stop)

    saved = {s: signal.signal(s, forward) for s in STOP_SIGNALS}  # before the child exists: no window for an orphan
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True)  # a terminal's Ctrl-C reaches only course.py
        if got:
            forward(got[0], None)
        deadline = None
        while True:
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if got and deadline is None:
                    deadline = time.monotonic() + grace_s
                if deadline is not None and time.monotonic() > deadline:
                    os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc is not None:  # what is left of its group (a child that ignored the signal) goes with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for s, handler in saved.items():
            signal.signal(s, handler)
    return 128 + got[0] if got else code


COMMANDS = ("lab", "test", "book", "notebooks", "copy")
NOT_COPIED = (".venv", ".git", "build", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", "*.egg-info", SHARED,
              ".hypothesis", ".ruff_cache", "test-output", ".whl", "node_modules")   # runs' leftovers, any folder
NOT_COPIED_HERE = ("notebooks/traces",)   # the chapters' traces (assets/traces, the sample traces, are copied)


def _not_copied(root: Path):
    """copytree's ignore for a copy of root: NOT_COPIED (any folder), NOT_COPIED_HERE (paths under root), and
    whatever this user cannot read (another user's run's leftovers)."""
    import fnmatch

    def ignore(folder: str, entries: list[str]) -> set[str]:
        here = Path(folder).resolve().relative_to(root)
        skip = {e for e in entries if any(fnmatch.fnmatch(e, p) for p in NOT_COPIED)
                or (here / e).as_posix() in NOT_COPIED_HERE}
        return skip | {e for e in entries if not os.access(os.path.join(folder, e), os.R_OK)}
    return ignore


def copy_course(dest: Path, root: Path = ROOT, venv_dir: Path | None = None) -> Path:
    """A learner's own copy of the course at dest (new or empty), using this course's environment instead of a
    .venv of its own (dest/.commlib-venv names it): what a workshop server gives each learner, a few MB instead of
    1.7 GB. -> dest. ValueError (one line) where dest holds anything or the environment is not built yet."""
    import shutil

    dest, venv_dir = Path(dest).expanduser().resolve(), Path(venv_dir or VENV)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ValueError(f"copy: {dest} exists and is not an empty folder; name a new one")
    if not (venv_dir / ".commlib-installed").is_file():
        raise ValueError(f"copy: {venv_dir} is not built yet; run `python3 course.py test` in {root} first")
    shutil.copytree(root, dest, ignore=_not_copied(Path(root).resolve()), dirs_exist_ok=True)
    (dest / SHARED).write_text(str(venv_dir) + "\n", encoding="utf-8")
    return dest
SERIAL = ("-n", "--numprocesses", "--dist", "-p", "--pdb", "--trace", "-m", "--collect-only", "--co", "-s")
WORKERS_MAX = 4  # each test starts up to 16 rank processes: more workers add memory, not speed
# one worker more than the cores: about a tenth of the suite's time waits (faults' timeouts, paced links, JupyterLab
# and Chromium starting), and a third worker fills it: on the course's 2-core VM the suite (less the `alone` tests)
# took 769 s on 2 workers and 680 s on 3, every test passing (2026-12-07)
EXTRA_WORKERS = 1


def usable_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pytest_runs(args: list[str], cores: int) -> list[list[str]]:
    """`course.py test`'s pytest runs -> their argument lists. On >= 2 cores, two: the suite on one worker per
    core and one more, at most WORKERS_MAX (pytest-xdist; a file's tests stay on one worker, the longest files
    first: conftest.py), then the tests marked `alone` one at a time (measurements that need the machine to
    themselves: the what-if's accuracy). With an option that asks for one process (-n, -p, --pdb, -m, -s, ...) or
    on one core: one plain run, unchanged."""
    if cores < 2 or any(a.split("=")[0] in SERIAL or a.startswith(("-n", "-p")) for a in args):
        return [args]
    workers = str(min(cores + EXTRA_WORKERS, WORKERS_MAX))
    return [["-n", workers, "--dist", "loadfile", "--no-loadscope-reorder", "-m", "not alone", *args],
            ["-m", "alone", *args]]


def combined(codes: list[int]) -> int:
    """pytest's exit statuses -> one: the first failure's; 5 (nothing collected) only when every run had none."""
    failed = [c for c in codes if c not in (0, 5)]
    return failed[0] if failed else (5 if all(c == 5 for c in codes) else 0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        said = f"unknown subcommand {argv[0]!r}" if argv else "no subcommand"
        print(f"course.py: error: {said}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        lang, rest = take_lang(argv[1:]) if argv[0] in ("lab", "notebooks", "test") else (None, argv[1:])
    except ValueError as e:
        print(f"course.py: error: {e}", file=sys.stderr)
        return 2
    if argv[0] == "copy":
        if len(argv) != 2:
            print("course.py: error: copy needs one argument, the new folder (course.py copy ~/commlib)",
                  file=sys.stderr)
            return 2
        try:
            dest = copy_course(Path(argv[1]))
        except (ValueError, OSError) as e:
            print(f"course.py: error: {e}", file=sys.stderr)
            return 2
        print(f"course.py: your copy of the course is {dest}, using the environment {VENV};\n"
              f"  open it with: cd {dest} && python3 course.py lab --port PORT")
        return 0
    if argv[0] == "notebooks" and lang is None:
        print(f"course.py: error: notebooks needs --lang, one of {', '.join(languages())}", file=sys.stderr)
        return 2
    ensure_env()
    folder = "notebooks"
    if lang is not None:  # the edition's notebooks, written afresh from notebooks/ and the catalogs
        folder = f"build/notebooks-{lang}"
        cmd = [str(PY), str(ROOT / "book" / "i18n.py"), "notebooks", "--lang", lang,
               *(rest if argv[0] == "notebooks" else ["--force"] if argv[0] == "test" else [])]  # i18n's options
        limit = 1800 if "--execute" in cmd else 600  # --execute runs every chapter: ~3 min on 2 quiet cores
        try:
            made = subprocess.run(cmd, cwd=ROOT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            print(f"course.py: error: writing the edition's notebooks took over {limit} s; stopped", file=sys.stderr)
            return 1
        if made or argv[0] == "notebooks":
            return made
    if argv[0] == "lab":
        if running_as_root():
            print("course.py: running as root, so JupyterLab starts with --allow-root; it still listens only on "
                  "127.0.0.1 and asks for its token", flush=True)
        first = min(course_notebooks(ROOT, folder), default=None)
        if first is not None:
            bring_to_front(first.relative_to(ROOT).as_posix())
        problem = trust_notebooks(PY, ROOT, folder)
        if problem:
            print(f"course.py: {problem}", flush=True)
        cmd = lab_command(PY, ROOT, rest, folder)
    elif argv[0] == "book":
        cmd = [str(PY), str(ROOT / "book" / "build.py"), *argv[1:]]
    else:  # test; with --lang, nbval of the edition's notebooks (the outputs of its own run), then what it showed
        # bytecode caches are written (in __pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE is set:
        # without them every pytest process rewrites the suite's asserts afresh (collection 9.8 s -> 4.9 s, 2 cores)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        runs = pytest_runs(argv[1:] if lang is None else [folder, *rest], usable_cores())
        if lang is not None:  # the run records what it shows (book/nbrecord.py, in every xdist worker too);
            record = ROOT / "build" / f"{lang}-nbval-record"  # tests/test_zh_english.py then reads it for English
            import shutil

            shutil.rmtree(record, ignore_errors=True)
            os.environ["COMMLIB_RECORD_RUN"] = str(record)
            os.environ["PYTEST_PLUGINS"] = ",".join(filter(None, [os.environ.get("PYTEST_PLUGINS"), "book.nbrecord"]))
            runs.append([str(ROOT / "tests" / "test_zh_english.py")])
        codes = []
        for args in runs:
            codes.append(run([str(PY), "-m", "pytest", *args], signal.SIGINT))  # pytest cleans up on Ctrl-C
            if codes[-1] >= 128:  # a signal stopped it: so does course.py
                return codes[-1]
        return combined(codes)
    return run(cmd, signal.SIGTERM if argv[0] == "lab" else signal.SIGINT)  # Sphinx cleans up on Ctrl-C


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
