"""course.py: the JupyterLab it starts serves what the notebooks link, on 127.0.0.1, behind a token, also as root."""

import http.client
import os
from pathlib import Path

import psutil

import course

ROOT = Path(__file__).resolve().parents[1]


def test_lab_serves_the_repository_root_and_opens_the_first_chapter(monkeypatch):
    monkeypatch.setattr(course, "running_as_root", lambda: False)
    cmd = course.lab_command("python", ROOT, ["--no-browser"])
    first = min(ROOT.glob("notebooks/[0-9]*.ipynb"))
    assert cmd[:4] == ["python", "-m", "jupyter", "lab"] and cmd[-1] == "--no-browser"
    assert "--ServerApp.ip=127.0.0.1" in cmd and f"--ServerApp.root_dir={ROOT}" in cmd  # ../assets/ is inside it
    assert str(first) in cmd and "--allow-root" not in cmd


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
    monkeypatch.setattr(course.subprocess, "run", lambda cmd, cwd: ran.append(cmd) or type("R", (), {"returncode": 0}))
    assert course.main(["lab", "--no-browser"]) == 0
    assert ran == [course.lab_command(course.PY, ROOT, ["--no-browser"])] and "--allow-root" in ran[0]
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "root" in out[0] and "127.0.0.1" in out[0] and "token" in out[0]


def test_an_unknown_subcommand_is_named(capsys):
    assert course.main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'bogus'" in err and "lab, test, book" in err
    assert course.main([]) == 2 and "no subcommand" in capsys.readouterr().err
