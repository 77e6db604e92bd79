"""End to end: every notebook run in JupyterLab in headless Chromium (Debian's chromium, driven by Playwright).

Asserts per notebook: every code cell ran and none produced an error; every ipywidgets view rendered
(no "Loading widget...", no missing model); one control per widget changes what the widget shows.
Screenshots go to test-output/browser/. Skip locally with COMMLIB_SKIP_BROWSER=1; .ci/run sets
COMMLIB_REQUIRE_BROWSER=1, which turns a missing browser into a failure instead of a skip.
"""

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRED = os.environ.get("COMMLIB_REQUIRE_BROWSER") == "1"
OUT = ROOT / "test-output" / "browser"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _why_skip() -> str | None:
    if os.environ.get("COMMLIB_SKIP_BROWSER") == "1":
        return "COMMLIB_SKIP_BROWSER=1"
    if CHROMIUM is None:
        return "no chromium on PATH (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -r requirements.txt)"
    return None


reason = _why_skip()
if reason and REQUIRED and reason != "COMMLIB_SKIP_BROWSER=1":
    raise RuntimeError(f"COMMLIB_REQUIRE_BROWSER=1 but {reason}")
pytestmark = pytest.mark.skipif(reason is not None, reason=f"browser test skipped: {reason}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token, serving a copy of notebooks/ and assets/ (runs never touch the originals)."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("traces", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "assets", root / "assets")
    settings = root / "user-settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')  # every cell in the DOM
    port, token = free_port(), secrets.token_hex(16)
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
                             f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
                             f"--LabApp.user_settings_dir={root / 'user-settings'}", "--allow-root"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"jupyter lab exited: {(root / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.3)
        else:
            raise RuntimeError("jupyter lab did not start within 60 s")
        yield base, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _widget_state(view) -> str:
    """What a widget shows: its text and its images (the controls' own values excluded as far as possible)."""
    return view.evaluate("""v => [...v.querySelectorAll('.widget-html, .widget-output, .jp-OutputArea, img')]
        .map(e => e.tagName === 'IMG' ? e.src.slice(-200) : e.innerText).join('|')""")


def _interact(page, view) -> str:
    """Change one control of a widget view; say which."""
    selects = view.locator("select")
    if selects.count():
        sel = selects.first
        options = sel.locator("option").all_inner_texts()
        current = sel.evaluate("s => s.options[s.selectedIndex].text")
        other = next(o for o in options if o != current)
        sel.select_option(label=other)
        return f"dropdown -> {other}"
    handles = view.locator(".noUi-handle")
    if handles.count():
        handles.first.focus()
        for _ in range(3):
            page.keyboard.press("ArrowRight")
        return "slider +3"
    buttons = view.locator("button")
    buttons.nth(buttons.count() - 1).click()
    return "button"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_the_browser(lab, browser, path):
    base, token, root = lab
    OUT.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # a workspace of its own, reset: only this notebook open (a restored workspace would reopen the others)
        page.goto(f"{base}/lab/workspaces/{path.stem}/tree/notebooks/{path.name}?token={token}&reset",
                  wait_until="domcontentloaded")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
                               "&& window.jupyterapp.shell.currentWidget.sessionContext "
                               "&& window.jupyterapp.shell.currentWidget.sessionContext.session "
                               "&& window.jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=90_000)
        page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
                               timeout=90_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # done when no prompt shows [*] or [ ] pending and the kernel is idle, twice in a row
        page.wait_for_function("""() => {
            const busy = [...document.querySelectorAll('.jp-InputPrompt')].some(p => /\\[\\*\\]/.test(p.textContent));
            const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
            if (busy || k.status !== 'idle') { window.__quiet = 0; return false; }
            window.__quiet = (window.__quiet || 0) + 1; return window.__quiet > 3;
        }""", polling=500, timeout=240_000)
        page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
        page.wait_for_timeout(1500)

        saved = json.loads((root / "notebooks" / path.name).read_text())
        code = [c for c in saved["cells"] if c["cell_type"] == "code"]
        assert all(c["execution_count"] is not None for c in code), "some code cells did not run"
        failed = [(c["source"][:1], o.get("ename"), o.get("evalue")) for c in code for o in c["outputs"]
                  if o["output_type"] == "error"]
        assert failed == [], failed

        panel = page.locator("#" + page.evaluate("() => window.jupyterapp.shell.currentWidget.id"))
        shown = "\n".join(panel.locator(".jp-OutputArea-output").all_inner_texts())
        for bad in ("Loading widget", "Error displaying widget", "model not found"):
            assert bad not in shown, f"a widget failed to render: {bad!r}"
        # interactive widget views: top-level outputs holding rendered widgets with a control in them
        views = panel.locator(".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output:has(.jupyter-widgets)")
        views = [views.nth(i) for i in range(views.count())]
        views = [v for v in views if v.is_visible() and v.locator("select, .noUi-handle, button").count()]
        expected = sum(1 for c in code if re.search(r"^widgets\.\w+\(", "".join(c["source"]), re.M))
        assert len(views) == expected, f"{len(views)} interactive widgets rendered, {expected} expected"
        for i, view in enumerate(views):
            view.scroll_into_view_if_needed()
            before = _widget_state(view)
            how = _interact(page, view)
            deadline = time.monotonic() + 15
            while _widget_state(view) == before and time.monotonic() < deadline:
                page.wait_for_timeout(250)
            assert _widget_state(view) != before, f"widget {i} did not change after {how}"
        assert not [e for e in errors if not re.search(r"ResizeObserver", e)], errors
    finally:
        page.screenshot(path=str(OUT / f"{path.stem}.png"), full_page=True)
        page.close()
