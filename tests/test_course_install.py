"""course.py's install as a learner gets it (issue 61): torch's CPU build where there is no GPU, from a PEP 503
index (PyTorch's; here one served on 127.0.0.1 stands in for it, holding a small wheel named as PyTorch names its
CPU builds), a one-line fallback where the index cannot be reached, and a learner's copy of the course that
uses a shared environment (a workshop server)."""

import http.server
import os
import socket
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import course  # noqa: E402

VERSION = course.torch_line().split("==")[1]


def _wheel(folder: Path) -> Path:
    """A wheel named and versioned as PyTorch's CPU build ("+cpu"), holding only a torch/__init__.py."""
    name = f"torch-{VERSION}+cpu"
    path = folder / f"{name}-py3-none-any.whl"
    files = {"torch/__init__.py": f"__version__ = '{VERSION}+cpu'\n",
             f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {VERSION}+cpu\n",
             f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: commlib-test\nRoot-Is-Purelib: true\n"
                                        "Tag: py3-none-any\n"}
    files[f"{name}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{name}.dist-info/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return path


@pytest.fixture
def index(tmp_path):
    """A PEP 503 simple index on 127.0.0.1 with torch's CPU build -> (its URL, the paths it was asked for)."""
    simple = tmp_path / "simple" / "torch"
    simple.mkdir(parents=True)
    wheel = _wheel(simple)
    (simple / "index.html").write_text(f'<html><body><a href="{wheel.name}">{wheel.name}</a></body></html>\n')
    asked = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(tmp_path), **k)

        def log_message(self, *a):
            asked.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple", asked
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_gpu_no_torch(monkeypatch):
    """A learner's Linux laptop: no NVIDIA driver, a fresh environment without torch, pip with no config of ours."""
    monkeypatch.setattr(course, "nvidia_driver", lambda *a: False)
    monkeypatch.setattr(course.sys, "platform", "linux")
    monkeypatch.setattr(course, "installed_torch", lambda python: None)
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)   # this machine's pip.conf (its local wheels): not a learner's
    said = []
    return lambda *a, **k: said.append(" ".join(map(str, a))), said


def test_without_a_gpu_torch_comes_from_the_cpu_index_and_one_line_says_so(index, no_gpu_no_torch, tmp_path,
                                                                            monkeypatch):
    url, asked = index
    say, said = no_gpu_no_torch
    monkeypatch.setenv(course.INDEX_ENV, url)
    target = tmp_path / "site"
    got = course.install_cpu_torch(sys.executable, ["--target", str(target), "--no-deps", "--no-cache-dir", "-q"],
                                   say=say)
    assert got == "cpu" and said == [f"course.py: no GPU here: torch's CPU build, from {url}"]
    assert (target / f"torch-{VERSION}+cpu.dist-info").is_dir() and (target / "torch" / "__init__.py").is_file()
    assert "/simple/torch/" in asked and any(p.endswith("%2Bcpu-py3-none-any.whl") for p in asked)


def test_an_unreachable_index_is_one_line_and_no_pip_run(no_gpu_no_torch, monkeypatch):
    say, said = no_gpu_no_torch
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv(course.INDEX_ENV, f"http://127.0.0.1:{port}/simple")
    ran = []
    monkeypatch.setattr(course.subprocess, "run", lambda *a, **k: ran.append(a))
    t0 = time.monotonic()
    assert course.install_cpu_torch(sys.executable, say=say) == "fallback"
    assert time.monotonic() - t0 < course.REACH_TIMEOUT_S + 2 and ran == []   # bounded: no minutes of retries
    (line,) = said
    assert line.startswith(f"course.py: no GPU here, but http://127.0.0.1:{port}/simple cannot be reached (")
    assert "PyPI's for Linux is the CUDA build" in line and "\n" not in line


def test_a_silent_index_counts_as_unreachable_within_the_bound():
    with socket.socket() as s:   # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        t0 = time.monotonic()
        why = course.reachable(f"http://127.0.0.1:{s.getsockname()[1]}/simple/torch/", timeout=0.5)
        assert why and time.monotonic() - t0 < 3


def test_a_gpu_driver_or_torch_already_there_or_none_asks_no_index(monkeypatch):
    asked = []
    monkeypatch.setattr(course, "reachable", lambda url, timeout=0: asked.append(url))
    monkeypatch.setattr(course.sys, "platform", "linux")
    monkeypatch.setattr(course, "nvidia_driver", lambda *a: True)
    monkeypatch.setattr(course, "installed_torch", lambda python: None)
    assert course.install_cpu_torch(sys.executable) == "skipped"
    monkeypatch.setattr(course, "nvidia_driver", lambda *a: False)
    monkeypatch.setattr(course, "installed_torch", lambda python: (VERSION + "+cpu", False))
    assert course.install_cpu_torch(sys.executable) == "skipped"
    monkeypatch.setattr(course, "installed_torch", lambda python: None)
    monkeypatch.setenv(course.INDEX_ENV, "none")
    assert course.install_cpu_torch(sys.executable) == "skipped" and asked == []


def test_only_linux_without_a_driver_asks_for_the_cpu_build(tmp_path):
    assert course.wants_cpu_build("linux", driver=False) and not course.wants_cpu_build("linux", driver=True)
    assert not course.wants_cpu_build("darwin", driver=False) and not course.wants_cpu_build("win32", driver=False)
    proc = tmp_path / "version"
    assert not course.nvidia_driver(str(proc)) or any(
        os.access(f"{d}/nvidia-smi", os.X_OK) for d in ("/usr/bin", "/usr/local/bin", "/bin"))
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15\n")
    assert course.nvidia_driver(str(proc))


def test_the_installed_torch_is_read_from_its_metadata():
    version, cuda = course.installed_torch(sys.executable)
    assert version.split("+")[0] == VERSION and cuda is ("+cu" in version or _cuda_requires())


def _cuda_requires() -> bool:
    import importlib.metadata as m

    return any(r.startswith("nvidia-") for r in m.requires("torch") or [])


def test_a_learners_copy_uses_the_shared_environment(tmp_path, monkeypatch):
    venv = tmp_path / "shared-venv"
    venv.mkdir()
    with pytest.raises(ValueError, match="is not built yet"):
        course.copy_course(tmp_path / "a", venv_dir=venv)
    (venv / ".commlib-installed").write_text("x")
    dest = course.copy_course(tmp_path / "mine", venv_dir=venv)
    assert (dest / "course.py").is_file() and (dest / "notebooks" / "01_collectives.ipynb").is_file()
    assert not (dest / ".venv").exists() and not (dest / ".git").exists() and not (dest / ".hypothesis").exists()
    assert (dest / "assets" / "traces" / "README.md").is_file() and not (dest / "notebooks" / "traces").exists()
    assert (dest / course.SHARED).read_text().strip() == str(venv)
    monkeypatch.delenv("COMMLIB_VENV", raising=False)
    assert course.venv_path(dest) == venv and course.venv_path(tmp_path) == tmp_path / ".venv"
    monkeypatch.setenv("COMMLIB_VENV", str(tmp_path / "other"))
    assert course.venv_path(dest) == tmp_path / "other"
    with pytest.raises(ValueError, match="exists and is not an empty folder"):
        course.copy_course(dest, venv_dir=venv)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    assert size < 64 << 20   # a few MB, not the 1.7 GB of an environment


def test_copy_from_the_command_line_says_where_and_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(course, "VENV", tmp_path / "v")
    assert course.main(["copy"]) == 2 and "copy needs one argument" in capsys.readouterr().err
    assert course.main(["copy", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("course.py: error: copy: ") and "is not built yet" in err and err.count("\n") == 1
