#!/usr/bin/env python3
"""Set up the course and open it, or run every test. Needs only Python >= 3.10 with venv and pip.

    python3 course.py lab     # create .venv, install, open the course in JupyterLab
    python3 course.py test    # create .venv, install, run the unit tests and nbval of every notebook

Extra arguments are passed on (to jupyter lab or to pytest). The environment is rebuilt only when
requirements.txt or pyproject.toml change.
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


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test"):
        print(__doc__)
        return 2
    ensure_env()
    if argv[0] == "lab":
        cmd = [str(PY), "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1",
               str(ROOT / "notebooks" / "00_start_here.ipynb"), *argv[1:]]
    else:
        cmd = [str(PY), "-m", "pytest", *argv[1:]]
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
