#!/usr/bin/env python3
"""Set up the course and open it, run every test, or build it as a static book. Needs only Python >= 3.10
with venv and pip (the book also needs npm once, to fetch MathJax and the widget manager).

    python3 course.py lab     # create .venv, install, open the course in JupyterLab
    python3 course.py test    # create .venv, install, run the unit tests and nbval of every notebook
    python3 course.py book    # create .venv, install, build the book into build/book (--no-solutions: without them)

Extra arguments are passed on (to jupyter lab, to pytest, or to book/build.py). The environment is rebuilt
only when requirements.txt or pyproject.toml change.
"""

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".commlib-installed"


def _fingerprint() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_env() -> None:
    if sys.version_info < (3, 10):
        sys.exit(f"commlib needs Python >= 3.10 (3.11 recommended); this is {sys.version.split()[0]}")
    if STAMP.exists() and STAMP.read_text() == _fingerprint():
        return
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip = [str(PY), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run(pip + ["-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)
    STAMP.write_text(_fingerprint())


def running_as_root() -> bool:
    return getattr(os, "geteuid", lambda: -1)() == 0


def lab_command(python, root: Path = ROOT, extra=()) -> list[str]:
    """The JupyterLab command line of `course.py lab` (tests/test_browser.py starts the same one on a copy).

    Serves root (the notebooks link ../assets/), opens its first numbered notebook, listens on 127.0.0.1
    only, with Jupyter's token; as root it adds --allow-root (containers and cloud VMs often run as root)."""
    first = min(Path(root).glob("notebooks/[0-9]*.ipynb"), default=None)
    return [str(python), "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}",
            *(["--allow-root"] if running_as_root() else []), *([str(first)] if first else []), *extra]


COMMANDS = ("lab", "test", "book")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(__doc__)
        said = f"unknown subcommand {argv[0]!r}" if argv else "no subcommand"
        print(f"course.py: error: {said}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    ensure_env()
    if argv[0] == "lab":
        if running_as_root():
            print("course.py: running as root, so JupyterLab starts with --allow-root; it still listens only on "
                  "127.0.0.1 and asks for its token", flush=True)
        cmd = lab_command(PY, ROOT, argv[1:])
    elif argv[0] == "book":
        cmd = [str(PY), str(ROOT / "book" / "build.py"), *argv[1:]]
    else:
        cmd = [str(PY), "-m", "pytest", *argv[1:]]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
