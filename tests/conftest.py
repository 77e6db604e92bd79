import atexit
import contextlib
import http.client
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import cloudpickle
import psutil
import pytest

import commlib as cl

# Jupyter's per-user folders for everything this suite starts (the lab fixture, nbval's kernels, course.py lab in
# test_course, tools/run_notebooks.py): a folder of the session's own. A lab started in the learner's folders
# restored their workspace (the chapters they had open, their kernels) and wrote 13 workspace files into their
# home (issue 40). JUPYTER_PATH's other entries (the venv's kernelspec) are still found.
JUPYTER_VARS = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data", "JUPYTER_RUNTIME_DIR": "runtime",
                "JUPYTERLAB_WORKSPACES_DIR": "workspaces", "IPYTHONDIR": "ipython"}
_jupyter_home = Path(tempfile.mkdtemp(prefix="commlib-tests-jupyter-"))
atexit.register(shutil.rmtree, _jupyter_home, ignore_errors=True)
for _var, _sub in JUPYTER_VARS.items():
    os.environ[_var] = str(_jupyter_home / _sub)

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # fixtures ship their rank functions by value
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import course  # noqa: E402  (the repository's course.py: `course.py lab` and the tests share its command line)


def alive(pid: int) -> bool:
    """True while pid runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, within_s: float = 15.0) -> list[int]:
    """The pids still alive after within_s seconds (returns as soon as all are gone: a generous bound costs
    nothing when they go, and keeps a loaded machine from failing the test)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def _ring_all_reduce_trace():
    """Inside a rank: the messages this rank sends in a ring all-reduce of 10 elements."""
    import torch

    from commlib import algorithms as alg

    tr = alg.Trace()
    alg.ring_all_reduce(torch.ones(10), trace=tr)
    return tr.events


@pytest.fixture(scope="module")
def ring_traces(cluster4):
    """The traces of a real ring all-reduce on cluster4, one list of Events per rank."""
    return cluster4.run(_ring_all_reduce_trace)


@pytest.fixture(scope="module")
def cluster4():
    """One 4-rank cluster shared by a test module (tests that break it rely on its restart)."""
    with cl.Cluster(world_size=4, timeout=30) as c:
        yield c


@contextlib.contextmanager
def timeout_of(cluster, seconds: float):
    """Run a block with a shorter cluster timeout (for tests that expect a ClusterTimeout)."""
    saved = cluster.timeout
    cluster.timeout = seconds
    try:
        yield cluster
    finally:
        cluster.timeout = saved


def free_port() -> int:
    """A port the OS picks, released just before the caller's server binds it (never hard-coded)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What Jupyter Server logs when its port is taken: at its first check, or when its IOLoop binds (after its start-up)
_PORT_LOST = re.compile(r"port \d+ is not available|port \d+ is already in use|no available port could be found")


def lost_its_port(log: str) -> bool:
    """True when a Jupyter Server's log says it could not listen on its port: another process took the port
    free_port() picked before the server bound it (seconds later: Python and Jupyter start first). Then start
    it again on another port: a race to retry, not a failure of the code under test."""
    return _PORT_LOST.search(log) is not None


def _stop(proc: subprocess.Popen) -> list[int]:
    """Stop a server and every process it started (kernels, and their ranks) -> the pids still alive after 10 s
    (none expected: the caller asserts that, after reporting its own failure if it has one)."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    return wait_gone([c.pid for c in children], 10)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """JupyterLab started as `course.py lab` starts it (course.lab_command), serving a copy of notebooks/ and
    assets/ (runs never touch the originals), on a port the OS picks, with a token. -> (base URL, token, root)."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("traces", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "assets", root / "assets")  # what the notebooks link (../assets/)
    settings = root / "user-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')  # every cell in the DOM
    assert course.trust_notebooks(sys.executable, root) is None  # as course.py lab does before it starts
    token = secrets.token_hex(16)
    for attempt in range(3):  # free_port() can lose its port to another process before the server binds it
        port = free_port()
        log_path = root / f"lab-{attempt}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(course.lab_command(sys.executable, root, [
                "--no-browser", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
                f"--LabApp.user_settings_dir={root / 'user-settings'}"]), stdout=log, stderr=subprocess.STDOUT, cwd=root)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:  # ready: the API answers an authenticated request (not merely: the port accepts connections)
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except (OSError, http.client.HTTPException):  # (URLError is an OSError) not up yet, or not it
                time.sleep(0.2)
        else:
            text = log_path.read_text()
            if proc.poll() is not None and lost_its_port(text):
                continue
            left = _stop(proc)
            raise RuntimeError(f"jupyter lab did not start within 120 s:\n{text[-3000:]}"
                               + (f"\n(and stopping it left pids {left} running)" if left else ""))
        break
    else:
        raise RuntimeError(f"jupyter lab found no free port in 3 tries:\n{log_path.read_text()[-2000:]}")
    try:
        yield base, token, root, proc
    finally:
        assert _stop(proc) == [], "JupyterLab or its kernels outlived the session"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# Chinese text on a page drawn as boxes: without a CJK font (Debian's chromium brings none; .ci/run installs
# fonts-noto-cjk), every missing glyph is the same empty box. Each element that shows Chinese characters draws up
# to 8 distinct ones, in its own font, on a canvas: with a font they differ, as boxes they are all alike.
# -> [(its first 40 characters, how many distinct characters, how many distinct pictures)] for the boxed ones.
CJK_BOXES = """root => [...(root || document.body).querySelectorAll('*')]
  .filter(e => [...e.childNodes].some(n => n.nodeType === 3 && /[\\u3400-\\u9fff]/.test(n.textContent)))
  .map(e => {
    const chars = [...new Set([...e.textContent].filter(c => /[\\u3400-\\u9fff]/.test(c)))].slice(0, 8);
    const s = getComputedStyle(e), canvas = document.createElement('canvas');
    canvas.width = canvas.height = 48;
    const ctx = canvas.getContext('2d');
    const shapes = chars.map(c => { ctx.clearRect(0, 0, 48, 48);
      ctx.font = `${s.fontStyle} ${s.fontWeight} 32px ${s.fontFamily}`; ctx.fillText(c, 4, 36);
      return ctx.getImageData(0, 0, 48, 48).data.join(''); });
    return [e.textContent.trim().slice(0, 40), chars.length, new Set(shapes).size];
  }).filter(([, chars, shapes]) => chars > 1 && shapes < chars)"""
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def browser_skip_mark():
    """The mark of a browser test module: skipped, with the reason, without Debian's chromium or playwright, or
    with COMMLIB_SKIP_BROWSER=1; under COMMLIB_REQUIRE_BROWSER=1 (CI) a missing browser is an error instead."""
    reason = None
    if os.environ.get("COMMLIB_SKIP_BROWSER") == "1":
        reason = "COMMLIB_SKIP_BROWSER=1"
    elif CHROMIUM is None:
        reason = "no chromium on PATH (Debian: apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (pip install -r requirements.txt)"
    if reason and reason != "COMMLIB_SKIP_BROWSER=1" and os.environ.get("COMMLIB_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"COMMLIB_REQUIRE_BROWSER=1 but {reason}")
    return pytest.mark.skipif(reason is not None, reason=f"browser test skipped: {reason}")


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium driven by Playwright (no browser download), one for the session (test_book's and
    test_browser's pages)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()
