"""End to end: every notebook opened in JupyterLab in headless Chromium (Debian's chromium, driven by Playwright), and
every one with an interactive widget run there ("run all"; the others' cells run under nbval, in the same kernel,
whose run conftest.py holds to the book's column as this module holds the lab's).

JupyterLab is started by the command line `course.py lab` uses (conftest's `lab` fixture, course.lab_command),
so what the course serves is what the test sees. Asserts per notebook: every image and link in its
rendered markdown loads; (run in the lab) "run all" finished (its own promise resolved, every code cell has an execution
count, the kernel is idle) and no cell produced an error; every ipywidgets view rendered (no "Loading
widget...", no missing model) and clips nothing (a row of controls wider than the notebook wraps); one control
per widget changes what the widget shows; every printed line of this run fits the book's column and every
checker call has its question above it (test_book's rules, applied to what this machine printed); it opens
unmodified (its saved kernelspec is the kernel's) and its animations step before any cell runs. The URL that
`course.py lab` prints opens chapter 0, with no news pop-up. (test_course.py checks that stopping course.py
leaves no JupyterLab.) Screenshots go to test-output/browser/. Skip locally with COMMLIB_SKIP_BROWSER=1; .ci/run sets
COMMLIB_REQUIRE_BROWSER=1, which turns a missing browser into a failure instead of a skip.
"""

import asyncio
import json
import os
import queue
import re
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import CJK_BOXES, browser_skip_mark, course
from test_book import checkers_without_a_question, wide_output_lines

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
OUT = ROOT / "test-output" / "browser"
pytestmark = browser_skip_mark()


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
        handle = handles.first
        handle.focus()
        at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")  # e.g. a replay
        for _ in range(3):                                                                  # opened at its end
            page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
        return f"slider {'-' if at_max else '+'}3"
    buttons = view.locator("button")
    buttons.nth(buttons.count() - 1).click()
    return "button"


CURRENT = "window.jupyterapp.shell.currentWidget"


def _check_markdown_images_and_links(page, panel) -> list[str]:
    """Every image in the rendered markdown loads; every local link answers 200; every #anchor exists. -> problems."""
    problems = []
    images = panel.locator(".jp-RenderedMarkdown img")
    for i in range(images.count()):
        img = images.nth(i)
        img.scroll_into_view_if_needed()
        try:  # an image is loaded once complete with a width; a broken one is complete with none
            img.evaluate("""i => new Promise((ok, fail) => {
                const done = () => i.naturalWidth > 0 ? ok() : fail(new Error('broken'));
                if (i.complete) done(); else { i.addEventListener('load', done); i.addEventListener('error', done); }
                setTimeout(() => fail(new Error('not loaded within 15 s')), 15000); })""")
        except Exception as e:
            problems.append(f"image {img.get_attribute('src')}: {str(e).splitlines()[0]}")
    for link in panel.locator(".jp-RenderedMarkdown a[href]").all():
        href = link.evaluate("a => a.href")  # resolved by JupyterLab, as the reader's click would be
        raw = link.get_attribute("href")
        if raw.startswith("#"):  # JupyterLab marks headings with data-jupyter-id
            found = panel.evaluate("""(p, a) => [...p.querySelectorAll('[id], [data-jupyter-id]')]
                .some(e => e.id === a || e.dataset.jupyterId === a)""", raw[1:])
            if not found:
                problems.append(f"link {raw}: no such anchor")
        elif href.startswith(page.url.split("/lab")[0]):
            status = page.request.get(href).status
            if status != 200:
                problems.append(f"link {raw} -> {href}: HTTP {status}")
        # other hosts (https://...) are not reachable from CI and not checked
    return problems


def _check_animations_step_before_any_cell_runs(panel) -> None:
    """The saved animation players (chapter 1's ring) show their controls and step, with no cell run: course.py lab
    trusts the course's notebooks, so JupyterLab runs their saved JavaScript (issue 33, item 2)."""
    players = panel.locator(".commlib-animation")
    for i in range(players.count()):
        player = players.nth(i)
        player.scroll_into_view_if_needed()
        # data-frame is set by the player's script alone: untrusted, JupyterLab neither runs it nor keeps the buttons
        assert player.get_attribute("data-frame") == "0", \
            "an animation's script did not run before its cell did: is the notebook trusted (course.trust_notebooks)?"
        player.locator("[data-go=next]").click()
        assert player.get_attribute("data-frame") == "1"
        assert player.locator(".commlib-animation-step").inner_text().startswith("step 1 of ")


class HeldSocket:
    """A kernel's websocket held open by a plain client (tornado's, which answers pings as a browser does), on a
    thread of its own, while the other tests of this module run. -> .opened_at, .closed_at (monotonic s), .received."""

    def __init__(self, url: str):
        self.url, self.opened_at, self.closed_at, self.error = url, None, None, None
        self.received, self.ready = queue.Queue(), threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._hold(),), daemon=True)
        self.thread.start()
        assert self.ready.wait(60) and self.error is None, f"could not open {url.split('?')[0]}: {self.error}"

    async def _hold(self):
        from tornado.websocket import websocket_connect

        try:
            self.conn = await websocket_connect(self.url)
        except Exception as e:  # noqa: BLE001 (said by __init__'s assert)
            self.error = repr(e)
            self.ready.set()
            return
        self.loop, self.opened_at = asyncio.get_running_loop(), time.monotonic()
        self.ready.set()
        while (message := await self.conn.read_message()) is not None:
            self.received.put(message)
        self.closed_at = time.monotonic()

    def send(self, message: dict) -> None:
        self.loop.call_soon_threadsafe(self.conn.write_message, json.dumps(message))

    def close(self) -> None:
        if self.closed_at is None:
            self.loop.call_soon_threadsafe(self.conn.close)
        self.thread.join(30)


@pytest.fixture(scope="module", autouse=True)
def held_socket(lab):
    """From this module's first test to its last: a kernel and one client socket to it (issue 40: a ping timeout
    equal to the ping interval closed every kernel's socket after 30 s)."""
    base, token, _, _ = lab
    started = urllib.request.Request(f"{base}/api/kernels?token={token}", data=b"{}", method="POST")
    kernel = json.loads(urllib.request.urlopen(started, timeout=60).read())["id"]
    held = HeldSocket(f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel}/channels?token={token}")
    try:
        yield held
    finally:
        held.close()
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{kernel}?token={token}", method="DELETE"),
                               timeout=60)


@pytest.fixture(scope="module")
def lab_page(lab, browser):
    """-> get(): the one JupyterLab page the notebook tests share, in a workspace of its own, reset, nothing open
    (JupyterLab's app boots once, not once a chapter: about 3 s each on 2 cores). Each test opens its chapter in it
    and closes it; a test that fails closes the page, and the next gets a fresh one."""
    base, token, _, _ = lab
    held = []

    def get():
        if held and not held[-1].is_closed():
            return held[-1]
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{base}/lab/workspaces/notebook-tests?token={token}&reset", wait_until="domcontentloaded")
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.restored && true", timeout=90_000)
        page.evaluate("() => window.jupyterapp.restored.then(() => [...window.jupyterapp.shell.widgets('main')]"
                      ".forEach(w => w.dispose()))")   # the Launcher: only the chapter under test is open
        held.append(page)
        return page

    yield get
    for page in held:
        if not page.is_closed():
            page.close()


def interactive_widgets(path: Path) -> int:
    """How many cells of a chapter show an interactive widget: commlib.ui.widgets' explorers and chapter 10's
    replay. A chapter with one is run in the lab (its views need their kernel); one without is opened as saved."""
    code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    return sum(1 for c in code if re.search(r"^(widgets|replay)\.\w+\(", "".join(c["source"]), re.M))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_the_browser(lab, lab_page, path):
    base, token, root, _ = lab
    OUT.mkdir(parents=True, exist_ok=True)
    page = lab_page()
    interactive = interactive_widgets(path)
    errors = []
    listen = lambda e: errors.append(str(e))  # noqa: E731
    page.on("pageerror", listen)
    passed = False
    try:
        served = page.request.get(f"{base}/api/contents/notebooks/{path.name}?content=0&token={token}").status
        assert served == 200, f"JupyterLab does not serve notebooks/{path.name} (HTTP {served}): is its root the repository's?"
        # opened alone (the chapter before was closed, its kernel shut down), with a kernel of its own
        page.evaluate("p => window.jupyterapp.commands.execute('docmanager:open', {path: p}).then(() => true)",
                      f"notebooks/{path.name}")
        page.wait_for_function(f"p => window.jupyterapp && {CURRENT} && {CURRENT}.context "
                               f"&& {CURRENT}.context.path === p && {CURRENT}.sessionContext "
                               f"&& {CURRENT}.sessionContext.session && {CURRENT}.sessionContext.session.kernel "
                               f"&& {CURRENT}.sessionContext.session.kernel.status === 'idle' "
                               f"&& {CURRENT}.context.isReady", arg=f"notebooks/{path.name}", timeout=90_000)
        panel = page.locator("#" + page.evaluate(f"() => {CURRENT}.id"))
        # opened as saved: the kernelspec it was saved with is the one the kernel reports (issue 33, item 1)
        assert page.evaluate(f"() => {CURRENT}.context.model.dirty") is False, \
            f"{path.name} opens modified: JupyterLab would ask to save it on close (tools/run_notebooks.py --kernelspec-only)"
        _check_animations_step_before_any_cell_runs(panel)
        problems = _check_markdown_images_and_links(page, panel)
        assert problems == [], f"{path.name}: broken images or links in the rendered markdown: {problems}"
        # the source chapter's Chinese title (chapter 0) in real glyphs, not boxes: a CJK font is installed
        assert panel.evaluate(CJK_BOXES) == [], f"{path.name}: Chinese text drawn as boxes (apt-get install fonts-noto-cjk)"
        if path.name.startswith("00_"):
            assert "通信开销分析" in panel.inner_text(), "chapter 0 no longer shows the source chapter's title"

        if interactive:
            # Run all, exactly: clear every execution count first, so that a count seen later is this run's; wait
            # for run-all's own promise (it resolves when the last cell's reply is in); then every code cell must
            # have a count and the kernel must be idle.
            page.evaluate(f"() => {CURRENT}.content.widgets.forEach(c => c.model.type === 'code' && c.model.clearExecution())")
            finished = page.evaluate("""() => Promise.race([
                window.jupyterapp.commands.execute('notebook:run-all-cells'),
                new Promise((_, fail) => setTimeout(() => fail(new Error('run all did not finish within 240 s')), 240000))])""")
            state = page.evaluate(f"""() => ({{kernel: {CURRENT}.sessionContext.session.kernel.status,
                missing: {CURRENT}.content.widgets.filter(c => c.model.type === 'code' && c.model.executionCount === null)
                         .map(c => c.model.sharedModel.getSource().slice(0, 60)),
                errors: {CURRENT}.content.widgets.filter(c => c.model.type === 'code').flatMap(c =>
                         c.model.outputs.toJSON().filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue))}})""")
            assert state["errors"] == [], f"{path.name}: cells failed: {state['errors']}"
            assert finished is True and state["missing"] == [], f"{path.name}: code cells that did not run: {state['missing']}"
            page.wait_for_function(f"() => {CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=30_000)
            page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")  # resolves once written

        saved = json.loads((root / "notebooks" / path.name).read_text())
        code = [c for c in saved["cells"] if c["cell_type"] == "code"]
        assert all(c["execution_count"] is not None for c in code), "the saved notebook has code cells that did not run"

        shown = "\n".join(panel.locator(".jp-OutputArea-output").all_inner_texts())
        for bad in ("Loading widget", "Error displaying widget", "model not found"):
            assert bad not in shown, f"a widget failed to render: {bad!r}"
        clipped = panel.evaluate("""p => [...p.querySelectorAll('.jp-OutputArea-output .widget-box, '
            + '.jp-OutputArea-output .widget-hbox, .jp-OutputArea-output .widget-vbox')]
            .filter(e => e.offsetParent && e.scrollWidth > e.clientWidth + 2)
            .map(e => `${e.scrollWidth} px in ${e.clientWidth} px: ${(e.innerText || '').trim().slice(0, 40)}`)""")
        assert clipped == [], f"widget rows that clip their controls: {clipped}"
        # interactive widget views: top-level outputs holding rendered widgets with a control in them
        views = panel.locator(".jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output:has(.jupyter-widgets)")
        views = [views.nth(i) for i in range(views.count())]
        views = [v for v in views if v.is_visible() and v.locator("select, .noUi-handle, button").count()]
        assert len(views) == interactive, f"{len(views)} interactive widgets rendered, {interactive} expected"
        for i, view in enumerate(views):
            view.scroll_into_view_if_needed()
            before = _widget_state(view)
            how = _interact(page, view)
            deadline = time.monotonic() + 15
            while _widget_state(view) == before and time.monotonic() < deadline:
                page.wait_for_timeout(250)
            assert _widget_state(view) != before, f"widget {i} did not change after {how}"
        assert not [e for e in errors if not re.search(r"ResizeObserver", e)], errors
        # last, so that they hide none of the checks above: what this run printed, and where the checkers sit
        assert wide_output_lines(saved) == [], "printed lines wider than the book's column"
        assert checkers_without_a_question(saved) == [], "checker calls with no question above them"
        passed = True
    finally:
        page.screenshot(path=str(OUT / f"{path.stem}.png"), full_page=True)
        # the kernel goes with the chapter: its Cluster ranks must not outlive this test
        page.evaluate(f"() => window.jupyterapp && {CURRENT} && {CURRENT}.sessionContext && {CURRENT}.sessionContext.shutdown()")
        page.remove_listener("pageerror", listen)
        if passed:   # saved after its run: closing it asks nothing
            page.evaluate(f"() => {CURRENT}.dispose()")
        else:
            page.close()


def _learners_workspace(chapters: list[str]) -> dict:
    """A default workspace as JupyterLab saves it when a learner leaves the lab with these chapters open, the last
    one in front."""
    keys = [f"notebook:notebooks/{c}" for c in chapters]
    dock = {"type": "tab-area", "currentIndex": len(keys) - 1, "widgets": keys}
    return {"data": {"layout-restorer:data": {"main": {"dock": dock, "current": keys[-1]}},
                     **{k: {"data": {"path": f"notebooks/{c}", "factory": "Notebook"}} for k, c in zip(keys, chapters)}},
            "metadata": {"id": "default"}}


def test_the_url_course_py_prints_opens_chapter_0(lab, browser):
    """The URL in JupyterLab's log (course.py lab's terminal) opens chapter 0, not the Launcher; no news pop-up.
    A learner who left the lab on chapter 9 gets chapter 9 back in a tab, and chapter 0 in front: the URL says
    chapter 0 (issue 40: the restored chapter came to the front, and the test read the learner's own workspace)."""
    base, token, root, _ = lab
    first, left_on = min(p.name for p in NOTEBOOKS), max(p.name for p in NOTEBOOKS)
    saved = urllib.request.Request(f"{base}/lab/api/workspaces/default?token={token}", method="PUT",
                                   data=json.dumps(_learners_workspace([first, left_on])).encode())
    assert urllib.request.urlopen(saved, timeout=30).status == 204  # saved as JupyterLab saves it
    own = Path(os.environ["JUPYTERLAB_WORKSPACES_DIR"])  # the session's own folder (conftest.JUPYTER_VARS)
    assert [p.name for p in own.glob("default-*.jupyterlab-workspace")], "the lab keeps its workspaces elsewhere"
    assert course.workspaces_dir() == own
    assert course.bring_to_front(f"notebooks/{first}")  # what course.py lab does before JupyterLab starts
    deadline = time.monotonic() + 60  # the API may answer a moment before the URL is logged
    while True:
        logs = "".join(p.read_text() for p in sorted(root.glob("lab-*.log")))
        printed = re.search(r"http://127\.0\.0\.1:\d+(/\S*?)\?token=", logs)
        if printed or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert printed, f"no URL in JupyterLab's output:\n{logs[-2000:]}"
    assert printed.group(1) == f"/lab/tree/notebooks/{first}"
    OUT.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:  # the printed URL's token is elided ("...") when it was configured, as the fixture does: use ours
        page.goto(f"{base}{printed.group(1)}?token={token}", wait_until="domcontentloaded")
        page.wait_for_function(f"() => window.jupyterapp && {CURRENT} && {CURRENT}.context "
                               f"&& {CURRENT}.context.isReady", timeout=90_000)
        page.wait_for_function("() => window.jupyterapp.restored && true", timeout=30_000)
        page.evaluate("() => window.jupyterapp.restored")
        opened = page.evaluate("() => [...window.jupyterapp.shell.widgets('main')].map(w => w.context && w.context.path)")
        assert f"notebooks/{left_on}" in opened, f"the learner's chapter was not restored: {opened}"
        assert page.evaluate(f"() => {CURRENT}.context.path") == f"notebooks/{first}"
        config = json.loads(page.locator("#jupyter-config-data").text_content())
        assert config["news"] == {"disabled": True}, "JupyterLab would ask about, and show, Jupyter news"
        # the pop-up would be up as soon as the app is restored: wait for that, then look
        page.wait_for_function("() => window.jupyterapp.restored && true", timeout=30_000)
        page.evaluate("() => window.jupyterapp.restored")
        page.wait_for_timeout(1500)  # not a timing assertion: a chance for a toast to appear, had it been asked for
        toasts = page.locator(".jp-toast-message, .Toastify__toast").all_inner_texts()
        assert not [t for t in toasts if "news" in t.lower()], toasts
    finally:
        page.screenshot(path=str(OUT / "course_url.png"))
        page.close()
        for session in json.loads(urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=30).read()):
            urllib.request.urlopen(urllib.request.Request(  # the kernels of both chapters: none outlives the test
                f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE"), timeout=30)


def test_a_kernel_s_socket_stays_open_for_100_s_and_answers(held_socket):
    """The socket opened before this module's first test is open 100 s later (past three of jupyter_server's 30 s
    pings) and still carries a request and its reply. Last in the module: the notebooks' runs fill the wait."""
    left = held_socket.opened_at + 100 - time.monotonic()
    if left > 0:  # only when this test runs alone: the browser tests before it take several minutes
        time.sleep(left)
    assert held_socket.closed_at is None, \
        f"the server closed the kernel's socket after {held_socket.closed_at - held_socket.opened_at:.0f} s"
    msg_id = uuid.uuid4().hex
    held_socket.send({"header": {"msg_id": msg_id, "msg_type": "kernel_info_request", "username": "test",
                                 "session": uuid.uuid4().hex, "date": "", "version": "5.3"},
                      "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell", "buffers": []})
    deadline = time.monotonic() + 60
    while True:
        reply = json.loads(held_socket.received.get(timeout=max(0.1, deadline - time.monotonic())))
        if reply.get("parent_header", {}).get("msg_id") == msg_id and reply["msg_type"] == "kernel_info_reply":
            break
    assert reply["content"]["status"] == "ok" and time.monotonic() - held_socket.opened_at >= 100
