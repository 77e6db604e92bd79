"""course.py: the JupyterLab it starts serves what the notebooks link, on 127.0.0.1, behind a token, also as root."""

import contextlib
import json
import http.client
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import alive, lost_its_port, wait_gone

import course

ROOT = Path(__file__).resolve().parents[1]


def test_lab_serves_the_repository_root_and_opens_the_first_chapter(monkeypatch):
    monkeypatch.setattr(course, "running_as_root", lambda: False)
    cmd = course.lab_command("python", ROOT, ["--no-browser"])
    assert cmd[:4] == ["python", "-m", "jupyter", "lab"] and cmd[-1] == "--no-browser"
    assert "--ServerApp.ip=127.0.0.1" in cmd and f"--ServerApp.root_dir={ROOT}" in cmd  # ../assets/ is inside it
    # the URL JupyterLab prints (its default_url) opens chapter 0, not the Launcher
    assert "--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb" in cmd and "--allow-root" not in cmd
    assert "--LabApp.news_url=None" in cmd  # no "Jupyter news" pop-up over the chapters


def test_lab_starts_as_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0, raising=False)
    assert course.running_as_root() and "--allow-root" in course.lab_command("python", ROOT)
    monkeypatch.setattr(os, "geteuid", lambda: 1000, raising=False)
    assert not course.running_as_root() and "--allow-root" not in course.lab_command("python", ROOT)


def _get(base: str, path: str) -> tuple[int, bytes]:
    """One GET, redirects not followed (a redirect to the login page is a refusal)."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_the_running_lab_serves_the_assets_only_with_its_token_and_only_on_loopback(lab):
    base, token, root, proc = lab
    status, body = _get(base, f"/files/assets/knowledge_map.svg?token={token}")
    assert status == 200 and body == (ROOT / "assets" / "knowledge_map.svg").read_bytes()
    assert _get(base, "/files/assets/knowledge_map.svg")[0] in (302, 403)  # no token: the login page, not the file
    assert _get(base, "/api/contents")[0] == 403
    listening = [c.laddr.ip for c in psutil.Process(proc.pid).net_connections("inet") if c.status == psutil.CONN_LISTEN]
    assert listening and set(listening) == {"127.0.0.1"}, listening


def test_lab_as_root_says_why_it_allows_root(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(course, "ensure_env", lambda: None)
    monkeypatch.setattr(course, "running_as_root", lambda: True)
    monkeypatch.setattr(course, "run", lambda cmd, stop: ran.append(cmd) or 0)
    monkeypatch.setattr(course, "trust_notebooks", lambda python, root, folder: None)  # tested below
    assert course.main(["lab", "--no-browser"]) == 0
    assert ran == [course.lab_command(course.PY, ROOT, ["--no-browser"])] and "--allow-root" in ran[0]
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "root" in out[0] and "127.0.0.1" in out[0] and "token" in out[0]


def test_lab_trusts_the_course_notebooks_and_runs_kernels_without_tcp(tmp_path):
    """Before: JupyterLab did not run the saved JavaScript of the (untrusted) chapters, so chapter 1's animation
    looked dead until its cell ran; every kernel warned "Kernel is running over TCP without encryption"."""
    import nbformat
    from nbformat.sign import NotebookNotary

    (tmp_path / "notebooks").mkdir()
    for name in ("00_a.ipynb", "01_b.ipynb"):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1", outputs=[nbformat.v4.new_output(
            "display_data", {"text/html": "<script>1</script>"})])])
        nbformat.write(nb, tmp_path / "notebooks" / name)
    notary = NotebookNotary()
    assert not any(notary.check_signature(nbformat.read(p, 4)) for p in course.course_notebooks(tmp_path))
    assert course.trust_notebooks(sys.executable, tmp_path) is None
    assert all(notary.check_signature(nbformat.read(p, 4)) for p in course.course_notebooks(tmp_path))
    if os.name != "nt":
        assert "--KernelManager.transport=ipc" in course.lab_command("python", ROOT)
    # a ping timeout no longer than the ping interval closed every kernel's socket at its first ping (issue 40):
    # the lab keeps jupyter_server's (tests/test_browser.py holds a socket open for 100 s)
    assert not [a for a in course.lab_command("python", ROOT) if "ping" in a]


@pytest.mark.skipif(os.name == "nt", reason="zmq has no Unix sockets there")
def test_nbval_s_kernels_run_on_unix_sockets_of_their_own_not_on_tcp_ports():
    """Before: nbval's kernels took five TCP ports that jupyter_client had found free and let go, bound once the
    kernel had started, seconds later under load; in CI a workshop learner's chapter 1 had all 18 cells error in
    setup while the suite's ranks bound ports (the root conftest.py hands nbval a KernelManager on ipc)."""
    from jupyter_core.paths import jupyter_runtime_dir
    from nbval import kernel

    a, b = kernel.KernelManager(), kernel.KernelManager()
    assert a.transport == b.transport == "ipc" and a.ip != b.ip
    assert Path(a.ip).parent == Path(jupyter_runtime_dir()) and Path(a.ip).name.startswith(f"nbval-{os.getpid()}-")


@pytest.mark.parametrize("args, cores, runs", [
    ([], 2, [["-n", "3", "--dist", "loadfile", "--no-loadscope-reorder", "-m", "not alone"], ["-m", "alone"]]),
    (["-k", "cluster", "-x"], 16, [["-n", "4", "--dist", "loadfile", "--no-loadscope-reorder", "-m", "not alone",
                                    "-k", "cluster", "-x"], ["-m", "alone", "-k", "cluster", "-x"]]),
    (["tests/test_cost.py"], 1, [["tests/test_cost.py"]]),            # one core: one plain run
    (["-n", "0"], 8, [["-n", "0"]]),                                  # the learner's own choice wins
    (["-n3"], 8, [["-n3"]]),
    (["-p", "no:xdist"], 8, [["-p", "no:xdist"]]),
    (["--pdb"], 8, [["--pdb"]]),
    (["-m", "slow"], 8, [["-m", "slow"]]),                            # their own marker expression, untouched
])
def test_the_suite_runs_on_a_worker_per_core_and_one_more_then_the_measurements_alone(args, cores, runs):
    assert course.pytest_runs(args, cores) == runs


@pytest.mark.parametrize("codes, code", [([0, 0], 0), ([0, 5], 0), ([5, 0], 0), ([5, 5], 5), ([1, 0], 1),
                                         ([0, 1], 1), ([2, 1], 2), ([5, 1], 1)])
def test_the_runs_exit_statuses_combine_to_the_first_failure(codes, code):
    assert course.combined(codes) == code


def test_an_unknown_subcommand_is_named(capsys):
    assert course.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'bogus'" in err and "lab, test, book" in err
    assert course.main([]) == 2 and "no subcommand" in capsys.readouterr().err


# ------------------------------------------------------------------ stopping course.py stops what it started
STUB = """
import os, subprocess, sys, time
# a stand-in for JupyterLab: a grandchild (its 'kernel') in its process group, both pids written down
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if sys.argv[2] == "ignore":
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""
DRIVER = """
import sys
sys.path.insert(0, sys.argv[1])
import course
course.ensure_env = lambda: None  # no venv built: the stub stands in for JupyterLab
course.trust_notebooks = lambda python, root, folder: None
course.lab_command = lambda python, root, extra, folder: [sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]]
if hasattr(course, "run"):  # a short grace before SIGKILL, for the child that ignores SIGTERM
    run = course.run
    course.run = lambda cmd, stop: run(cmd, stop, grace_s=float(sys.argv[5]))
sys.exit(course.main(["lab"]))
"""


def _wait_for(path: Path, proc, within_s: float = 60.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert proc.poll() is None, f"course.py exited early ({proc.returncode})"
        assert time.monotonic() < deadline, f"the stub did not start within {within_s} s"
        time.sleep(0.05)
    return [int(x) for x in path.read_text().split()]


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "SIGINT", "SIGTERM ignored by the child"])
def test_stopping_course_py_stops_everything_it_started(tmp_path, how):
    sig = getattr(signal, how.split()[0])
    pids_file = tmp_path / "pids"
    ignore = "ignore" if "ignored" in how else "obey"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(ROOT), STUB, str(pids_file), ignore,
                               "1.0" if ignore == "ignore" else "30.0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    family = []
    try:
        started = _wait_for(pids_file, driver)
        for pid in started:  # as psutil.Process objects, taken now: kill() below refuses a pid reused since
            with contextlib.suppress(psutil.NoSuchProcess):
                family.append(psutil.Process(pid))
        assert all(alive(p) for p in started)
        driver.send_signal(sig)
        assert driver.wait(60) == 128 + sig  # bounded: a stuck course.py fails here, not hangs
        assert wait_gone(started, 30) == [], f"left running after {how} to course.py"
    finally:
        _kill_family(driver, family)


def test_the_child_s_exit_status_is_course_py_s(tmp_path):
    assert course.run([sys.executable, "-c", "raise SystemExit(3)"], cwd=tmp_path) == 3


LAB_DRIVER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import course
course.ensure_env = lambda: None  # this environment's Python already has JupyterLab
course.PY, course.ROOT = sys.executable, Path(sys.argv[2])
sys.exit(course.main(["lab", "--no-browser", "--ServerApp.port=" + sys.argv[3], "--ServerApp.port_retries=0"]))
"""


def _kernels(pid: int) -> list[int]:
    """The ipykernel processes under pid. JupyterLab starts short-lived helpers too: one that exits between
    children() and cmdline() (gone, or a zombie its parent has not reaped yet) is not a kernel, not an error."""
    found = []
    for p in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # ZombieProcess is a NoSuchProcess
            if "ipykernel" in " ".join(p.cmdline()):
                found.append(p.pid)
    return found


@pytest.mark.skipif(os.name == "nt", reason="POSIX zombies")
def test_a_child_that_exits_unreaped_is_not_a_kernel_and_not_an_error():
    """CI once failed here: psutil raised ZombieProcess reading the cmdline of a JupyterLab helper that had
    just exited. A zombie child of this process must be skipped, and a live kernel-named child still found."""
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "ipykernel_launcher"])
    try:
        deadline = time.monotonic() + 30
        while psutil.Process(zombie.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not yet reaped (no wait())
            assert time.monotonic() < deadline, "the child did not exit within 30 s"
            time.sleep(0.05)
        with pytest.raises(psutil.ZombieProcess):
            psutil.Process(zombie.pid).cmdline()  # what the old loop called
        found = _kernels(os.getpid())  # the session's JupyterLab (tests/conftest.py's lab) may run kernels too
        assert kernel.pid in found and zombie.pid not in found, found
    finally:
        kernel.kill()
        kernel.wait()
        zombie.wait()


def _kill_family(driver: subprocess.Popen, family: list[psutil.Process]) -> None:
    """Kill course.py and what it started. JupyterLab runs in a process group of its own, so killing course.py
    alone would leave it. psutil.Process objects, not pids: kill() refuses a pid reused by another process."""
    with contextlib.suppress(psutil.NoSuchProcess):
        family += psutil.Process(driver.pid).children(recursive=True)
    if driver.poll() is None:
        driver.kill()
    driver.wait()
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def _course_lab(tmp_path: Path, ports) -> tuple[subprocess.Popen, str, str]:
    """`course.py lab` on the next port of `ports` -> (course.py, the URL it printed, the page that URL serves).
    A port taken by another process before Jupyter Server binds it (free_port() picks it seconds earlier): the next
    port, as conftest's lab fixture does. Any other failure fails the test, and leaves nothing running."""
    import urllib.request

    for attempt, port in enumerate(ports):
        log = tmp_path / f"lab-{attempt}.log"
        with open(log, "w") as out:
            driver = subprocess.Popen([sys.executable, "-c", LAB_DRIVER, str(ROOT), str(tmp_path), str(port)],
                                      stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline, url = time.monotonic() + 180, None  # a bound, not a timing assertion: a loaded machine is slow
            while url is None and driver.poll() is None:
                assert time.monotonic() < deadline, f"no URL printed within 180 s:\n{log.read_text()[-3000:]}"
                found = re.search(r"(http://127\.0\.0\.1:\d+/\S*)\n", log.read_text())  # a whole line: not half-written
                url = found.group(1) if found else time.sleep(0.2)
            deadline = time.monotonic() + 60  # Jupyter Server logs its URL before its IOLoop binds the port
            while driver.poll() is None:
                try:
                    with urllib.request.urlopen(url, timeout=30) as r:
                        assert r.status == 200
                        return driver, url, r.read().decode()
                except (OSError, http.client.HTTPException) as e:  # (URLError is an OSError)
                    if driver.poll() is not None or lost_its_port(log.read_text()):
                        break  # what answered, if anything, was the process that took the port
                    assert isinstance(getattr(e, "reason", None), ConnectionRefusedError) \
                        and time.monotonic() < deadline, e
                    time.sleep(0.2)
            text = log.read_text()
            assert lost_its_port(text), f"course.py lab exited ({driver.returncode}):\n{text[-3000:]}"
            _kill_family(driver, [])  # exited, or about to: it could not listen
        except BaseException:
            _kill_family(driver, [])
            raise
    raise AssertionError(f"course.py lab found no free port in {attempt + 1} tries:\n{log.read_text()[-2000:]}")


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_course_py_lab_prints_chapter_0_s_url_and_leaves_no_jupyterlab_when_stopped(tmp_path, sig):
    """The real `course.py lab` on a copy of the notebooks: its printed URL opens chapter 0 (and answers), the page
    fetches no news; a running kernel; then SIGTERM or SIGHUP to course.py: no JupyterLab, no kernel left.
    Under SIGHUP, its first port is one another socket listens on: course.py lab fails there, and starts again on
    the next (CI can lose free_port()'s port to another process so, by chance)."""
    import shutil
    import socket
    import urllib.request

    from conftest import free_port

    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("traces", ".ipynb_*"))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        first = [taken.getsockname()[1]] if sig == signal.SIGHUP else []
        driver, url, page = _course_lab(tmp_path, first + [free_port() for _ in range(3)])
    if first:
        assert lost_its_port((tmp_path / "lab-0.log").read_text()), "the taken port was not the first one tried"
    family = []
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/lab/tree/notebooks/00_start_here\.ipynb\?token=\w+", url), url
        assert '"news": {"disabled": true}' in page.replace("\n", "")
        base, token = url.split("/lab/")[0], url.split("token=")[1]
        start = urllib.request.Request(f"{base}/api/kernels?token={token}", data=b"{}", method="POST")
        with urllib.request.urlopen(start, timeout=60) as r:
            assert r.status == 201
        deadline = time.monotonic() + 120
        while driver.poll() is None and not _kernels(driver.pid):  # (a dead course.py has no children to list)
            assert time.monotonic() < deadline, "the kernel did not start within 120 s"
            time.sleep(0.2)
        assert driver.poll() is None, f"course.py lab exited ({driver.returncode}) before its kernel started"
        family = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(sig)
        assert driver.wait(120) == 128 + sig
        assert wait_gone([p.pid for p in family], 60) == [], \
            f"JupyterLab or its kernel outlived course.py after signal {sig}"
    finally:  # whatever failed above: kill what was started
        _kill_family(driver, family)


def _workspace(dock, current):
    return {"data": {"layout-restorer:data": {"main": {"dock": dock, "current": current}}}, "metadata": {"id": "default"}}


def test_bring_to_front_puts_the_named_chapter_in_front_and_keeps_every_other_tab(tmp_path):
    """course.py lab's URL names chapter 0; a restored workspace keeps the learner's tabs, chapter 0 in front."""
    a, b, c = (f"notebook:notebooks/{n}" for n in ("00_a.ipynb", "09_b.ipynb", "11_c.ipynb"))
    dock = {"type": "split-area", "orientation": "horizontal", "sizes": [0.5, 0.5], "children": [
        {"type": "tab-area", "currentIndex": 0, "widgets": [c]},
        {"type": "tab-area", "currentIndex": 1, "widgets": [a, b]}]}
    path = tmp_path / "default-37a8.jupyterlab-workspace"
    path.write_text(json.dumps(_workspace(dock, b)))
    assert course.bring_to_front("notebooks/00_a.ipynb", tmp_path)
    main = json.loads(path.read_text())["data"]["layout-restorer:data"]["main"]
    assert main["current"] == a and main["dock"]["children"][1] == {"type": "tab-area", "currentIndex": 0,
                                                                    "widgets": [a, b]}
    assert main["dock"]["children"][0]["widgets"] == [c]
    assert not course.bring_to_front("notebooks/00_a.ipynb", tmp_path)  # already in front: nothing to write


@pytest.mark.parametrize("text", ["{not json", "[]", json.dumps(_workspace(None, None)), "\udcff"])
def test_bring_to_front_leaves_what_it_does_not_understand_alone(tmp_path, text):
    path = tmp_path / "default-37a8.jupyterlab-workspace"
    path.write_text(text, errors="surrogateescape")
    before = path.read_bytes()
    assert not course.bring_to_front("notebooks/00_a.ipynb", tmp_path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]
    assert not course.bring_to_front("notebooks/00_a.ipynb", tmp_path / "absent")


def test_the_workspaces_folder_is_jupyterlab_s(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTERLAB_WORKSPACES_DIR", str(tmp_path / "w"))
    assert course.workspaces_dir() == tmp_path / "w"
    monkeypatch.delenv("JUPYTERLAB_WORKSPACES_DIR")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "c"))
    assert course.workspaces_dir() == tmp_path / "c" / "lab" / "workspaces"
