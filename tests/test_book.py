"""The book (book/build.py, `python3 course.py book`): built from the committed notebooks, served on 127.0.0.1, every
page opened in headless Chromium (Debian's, driven by Playwright, as tests/test_browser.py does).

Asserts per page: it loads with no console error, no failed request and no request off this machine (MathJax
and the widget manager are served by the book); every image loads, and every figure the notebook holds is
on its page; every widget view rendered from its saved state, says it is a saved view, and is not clipped;
no output is wider than the book's column; the math rendered; both commands that run the course live are on
it; no footer says "Author name not set"; every internal link and #anchor resolves. The ring animation is on
a page and steps. The zh_CN edition is built beside it (book/build.py --lang zh_CN), as it is published: a few of
its pages load cleanly, hold Chinese prose and the edition's preface, find a Chinese word in search, and every
English page links to its zh_CN page and back. Screenshots go to test-output/book/ (the whole page where
something looks wrong, or all with COMMLIB_SCREENSHOTS=full). Without chromium the browser tests skip as
test_browser.py's do.

Without a browser (from the notebooks themselves): every checker call has its question above it in the same
section, and every printed line fits the book's column (COLUMN characters).
"""

import functools
import http.server
import json
import os
import re
import threading
from pathlib import Path

import pytest
from conftest import CJK_BOXES, browser_skip_mark

from book import build as book
from commlib.exercises import learner_copies as teaching
from tools.printed import COLUMN, wide_output_lines

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
PAGES = ["index.html", *(f"notebooks/{p.stem}.html" for p in NOTEBOOKS), "genindex.html", "search.html"]
OUT = ROOT / "test-output" / "book"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")
browser_test = browser_skip_mark()

# a checker call: exercises.chN_x(...), ex.chN_x(...) (an alias), exercises_topology.chN_x(...), ws.check_x(...)
CHECKER_CALL = re.compile(r"\b\w+\.ch\d+_\w+\(|\bws\.check_\w+\(|\bcheck_\w+\(")
# a question: "Exercise N.M", a question mark, or a task ("Find one configuration that fits ...")
QUESTION = re.compile(r"\bExercise\b|\?|(?:^|[.:!]\s+|\n)(?:Find|Write|Estimate|Choose|Compute|Give|Name|Pick|"
                      r"Predict|Say|Show)\b")
HEADING = re.compile(r"^#{1,6} ", re.M)


def checkers_without_a_question(nb: dict) -> list[str]:
    """Code cells (not solutions) that call a checker with no question in a markdown cell above them in the same
    section (since the last heading, the heading's own cell from the heading on). -> their first lines."""
    bad, section = [], ""
    for cell in nb["cells"]:
        text = teaching._source(cell)
        if cell["cell_type"] == "markdown":
            headings = list(HEADING.finditer(text))
            section = text[headings[-1].start():] if headings else section + "\n" + text
        elif CHECKER_CALL.search(text) and not teaching.is_solution(cell) and not QUESTION.search(section):
            bad.append(text.strip().splitlines()[-1][:80])
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_checker_call_has_its_question_above_it(path):
    assert checkers_without_a_question(json.loads(path.read_text())) == [], \
        "checker cells with no question (Exercise N.M, a '?', or a task) above them in their section"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_printed_line_fits_the_column(path):
    assert wide_output_lines(json.loads(path.read_text())) == [], \
        f"printed lines wider than {COLUMN} columns: they break mid-word in JupyterLab and wrap in the book"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_carry_no_test_comments_and_name_the_source_chapter(path):
    """Learners read every cell: nbval's markers live in cell tags (nbval-ignore-output), not in the code, and the
    chapter the course grew from is "the source chapter" (chapter 0 introduces it), never "the seed"."""
    nb = json.loads(path.read_text())
    sources = [(cell["cell_type"], teaching._source(cell)) for cell in nb["cells"]]
    assert [s.strip().splitlines()[0] for _, s in sources if "NBVAL" in s] == []
    assert [s[:60] for kind, s in sources if kind == "markdown" and re.search(r"\b[Tt]he seed\b", s)] == []


def test_the_checks_catch_what_they_look_for():
    md = lambda s: {"cell_type": "markdown", "source": s, "metadata": {}}  # noqa: E731
    code = lambda s, out="": {"cell_type": "code", "source": s, "metadata": {},  # noqa: E731
                              "outputs": [{"output_type": "stream", "name": "stdout", "text": out}]}
    call = "answer = None\nexercises.ch4_overflow_world_size(answer, value=3000.0)"
    assert checkers_without_a_question({"cells": [md("## What the libraries do\n\nThey do X."), code(call)]}) \
        == ["exercises.ch4_overflow_world_size(answer, value=3000.0)"]
    for question in ("**Exercise 4.1.** At what p ...", "At what p does it overflow?", "Find one that fits."):
        assert checkers_without_a_question({"cells": [md("## Exercises"), md(question), code(call)]}) == []
    # a question of an earlier section does not count
    assert len(checkers_without_a_question({"cells": [md("## A\n\nWhy?"), md("## B\n\nText."), code(call)]})) == 1
    assert wide_output_lines({"cells": [code("print()", "x" * 100 + "\n" + "y" * 101)]}) == \
        ["cell 0: 101 columns: " + repr("y" * 50)]
    assert wide_output_lines({"cells": [code("print()", "步" * 50 + "\n" + "x" + "步" * 50)]}) == \
        ["cell 0: 101 columns: " + repr("x" + "步" * 49)]   # a Chinese character takes two columns


def test_no_page_says_author_name_not_set(built):
    pages = [p for p in built.rglob("*.html") if not p.is_relative_to(built / "_static")]
    assert pages and not [p.name for p in pages if "Author name not set" in p.read_text()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both editions built once for this module, side by side as they are published (book/, book-zh_CN/),
    warnings as errors. -> the English one's folder."""
    try:
        book.fetch_vendor()
    except RuntimeError as e:  # no npm, or no network on a first build: a laptop may lack them, CI may not
        if os.environ.get("COMMLIB_REQUIRE_BROWSER") == "1":
            raise
        pytest.skip(f"the book cannot fetch its JavaScript: {e}")
    work = tmp_path_factory.mktemp("book")
    book.build(work / "book", work=work, strict=True)
    book.build(work / "book-zh_CN", work=work, strict=True, lang="zh_CN")
    return work / "book"


@pytest.fixture(scope="module")
def site(built):
    """The built book served on 127.0.0.1, on a port the OS picks (bound before anyone asks: no race). -> base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a page closed while a file was still on its way: the browser's business, not an error here

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built.parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{built.name}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_one_page_per_notebook_in_file_order(built):
    pages = sorted(str(p.relative_to(built)) for p in built.rglob("*.html") if not p.is_relative_to(built / "_static"))
    assert pages == sorted(PAGES)
    index = (built / "index.html").read_text()
    positions = [index.index(f'href="notebooks/{p.stem}.html"') for p in NOTEBOOKS]
    assert positions == sorted(positions), "the chapters are not in file-name order"


def test_without_solutions_the_book_drops_exactly_the_solution_cells(tmp_path):
    chapters, _ = book.stage(tmp_path, solutions=False, working_tree=True)
    assert chapters == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        original = json.loads(path.read_text())
        staged = json.loads((tmp_path / "notebooks" / path.name).read_text())
        assert not any(teaching.is_solution(c) for c in staged["cells"])
        assert staged["cells"] == teaching.drop_solutions(original)["cells"]  # outputs kept: they are the content
        assert len(staged["cells"]) < len(original["cells"])
    assert (tmp_path / "assets" / "knowledge_map.svg").is_file() and (tmp_path / "index.md").is_file()
    book.stage(tmp_path, solutions=True, working_tree=True)  # and back: the solutions return
    assert (tmp_path / "notebooks" / NOTEBOOKS[0].name).read_bytes() == NOTEBOOKS[0].read_bytes()


def test_the_book_is_built_from_the_committed_notebooks_and_says_so(tmp_path):
    """A lab session autosaves the learner's run into notebooks/: the book still shows the committed chapter, and
    says which it took (issue 40); --working-tree takes the learner's; a folder that is no checkout, as it is."""
    import subprocess

    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "notebooks").mkdir()
    for name in ("00_a.ipynb", "01_b.ipynb"):
        (tmp_path / "notebooks" / name).write_text(f"committed {name}")
    _, said = book.notebook_sources(tmp_path)
    assert "not a git checkout" in said
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    data, said = book.notebook_sources(tmp_path)
    assert list(data.values()) == [b"committed 00_a.ipynb", b"committed 01_b.ipynb"] and "no changes" in said
    (tmp_path / "notebooks" / "01_b.ipynb").write_text("the learner's run")
    (tmp_path / "notebooks" / "02_new.ipynb").write_text("untracked")
    data, said = book.notebook_sources(tmp_path)
    assert [d.decode() for d in data.values()] == ["committed 00_a.ipynb", "committed 01_b.ipynb", "untracked"]
    assert "01_b.ipynb differ from the last commit" in said and "00_a" not in said
    data, said = book.notebook_sources(tmp_path, working_tree=True)
    assert data[tmp_path / "notebooks" / "01_b.ipynb"] == b"the learner's run" and "--working-tree" in said


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_measured_cell_is_one_nbval_does_not_compare(path):
    """A cell that starts '# measured' prints this machine's numbers: nbval runs it (its asserts count) and does not
    compare its output (four new ones lacked the tag and failed nbval on the next run)."""
    nb = json.loads(path.read_text())
    untagged = [c.get("id") for c in nb["cells"] if c["cell_type"] == "code"
                and teaching._source(c).startswith("# measured")
                and "nbval-ignore-output" not in c.get("metadata", {}).get("tags", [])]
    assert untagged == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_widget_view_has_its_saved_state(path):
    import nbformat

    from tools.run_notebooks import unsaved_widget_views

    assert unsaved_widget_views(nbformat.read(path, as_version=4)) == [], \
        "re-run it with tools/run_notebooks.py, which saves the widgets' state the book shows"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_is_saved_with_the_kernelspec_its_kernel_reports(path):
    """Before: "Python 3" against the kernel's "Python 3 (ipykernel)": every chapter opened modified in JupyterLab."""
    from tools.run_notebooks import kernelspec

    assert json.loads(path.read_text())["metadata"]["kernelspec"] == kernelspec(), \
        "fix it with: python tools/run_notebooks.py --kernelspec-only (or re-run the chapter with that tool)"


def _figures_in(path: Path) -> tuple[int, int]:
    """(image outputs that the book shows as <img>, images linked in markdown) of a notebook."""
    nb = json.loads(path.read_text())
    outputs = sum(1 for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
                  if any(t in o.get("data", {}) for t in IMAGE_TYPES)
                  and not {"text/html", "application/vnd.jupyter.widget-view+json"} & set(o["data"]))
    markdown = sum(teaching._source(c).count("![") for c in nb["cells"] if c["cell_type"] == "markdown")
    return outputs, markdown


_IMAGES_LOADED = """() => Promise.all([...document.images].map(i => new Promise(ok => {
    if (i.complete) return ok();
    i.addEventListener('load', ok); i.addEventListener('error', ok); setTimeout(ok, 15000); })))
    .then(() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 120)))"""

_PAGE_STATE = """() => {
  const article = document.querySelector('article') || document.body;
  const imgs = sel => [...article.querySelectorAll(sel)].filter(i => !i.closest('.jupyter-widgets, .commlib-animation'));
  return {
    text: document.body.innerText,
    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    outputImages: imgs('.cell_output img').length,
    markdownImages: imgs('img').length - imgs('.cell_output img').length,
    views: [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')].map(s =>
      (s.parentElement.querySelector('.widget-subarea .jupyter-widgets') ? '' : 'not rendered: ') +
      (s.parentElement.innerText.match(/(Error displaying widget|Loading widget)[^\\n]*/) || [''])[0]),
    math: [...document.querySelectorAll('.math')].map(m =>
      !m.querySelector('mjx-container') ? 'not typeset: ' + m.textContent.slice(0, 60)
      : m.querySelector('mjx-merror') ? 'error: ' + m.textContent.slice(0, 60) : ''),
    animations: document.querySelectorAll('.commlib-animation').length,
    // outputs wider than the column, and widget boxes that clip (or scroll) what they hold
    column: Math.round(article.getBoundingClientRect().width),
    wide: [...article.querySelectorAll('.cell_output, .cell_output *')].filter(e => {
        const r = e.getBoundingClientRect(), a = article.getBoundingClientRect();
        return r.width > 0 && (r.right > a.right + 2 || r.left < a.left - 2 ||
               (e.matches('pre, .widget-box, .widget-hbox, .widget-vbox, .widget-subarea')
                && e.scrollWidth > e.clientWidth + 2));
      }).map(e => `${e.tagName.toLowerCase()}.${[...e.classList].slice(0, 2).join('.')}: ` +
                  `${Math.round(Math.max(e.getBoundingClientRect().width, e.scrollWidth))} px ` +
                  `(${(e.innerText || '').trim().slice(0, 40)})`).slice(0, 10),
    savedNote: [...document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')].map(s =>
      getComputedStyle(s.parentElement, '::before').content),
    // code (cell inputs, and the text's code blocks: chapter 10's NCCL logs) that scrolls sideways
    scrolling: [...article.querySelectorAll('div.highlight pre')].filter(e => e.scrollWidth > e.clientWidth + 1)
      .map(e => `${e.scrollWidth - e.clientWidth} px: ${e.innerText.trim().slice(0, 50)}`).slice(0, 10),
    searchBoxes: [...document.querySelectorAll('.search-button-field')]
      .filter(e => !e.closest('article') && e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden').length,
  };
}"""

def _visit(browser, site: str, name: str, query: str = "allreduce", tag: str = "") -> dict:
    """Open one page, wait for MathJax and the widgets, record what went wrong and what it shows; screenshot it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems, offsite = [], []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: r.url not in offsite and problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))

    def local_only(route):
        if route.request.url.startswith((site.rsplit("/", 1)[0] + "/", "data:", "blob:")):  # both editions
            return route.continue_()
        offsite.append(route.request.url)
        return route.abort()

    page.route("**/*", local_only)
    state = None
    try:
        # search.html is opened with a query, once: a second navigation would abort the first one's requests
        response = page.goto(f"{site}/{name}" + (f"?q={query}" if name == "search.html" else ""), wait_until="load")
        if response.status != 200:
            problems.append(f"HTTP {response.status}: {name}")
        found = None
        try:  # a wait that runs out is this page's problem: the other pages are still visited
            if page.evaluate("() => !!document.querySelector('.math')"):  # MathJax typesets after load
                page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                       timeout=30_000)
                page.evaluate("() => MathJax.startup.promise")
            if page.evaluate("() => !!document.querySelector('script[type=\"application/vnd.jupyter.widget-state+json\"]')"):
                page.wait_for_function("""() => [...document.querySelectorAll(
                    'script[type="application/vnd.jupyter.widget-view+json"]')]
                    .every(s => s.parentElement.querySelector('.widget-subarea'))""", timeout=30_000)
            if name == "search.html":  # the search box works offline: a word from the course finds pages
                page.wait_for_function("() => document.querySelectorAll('#search-results li').length > 0",
                                       timeout=30_000)
                found = page.locator("#search-results li").count()
        except PlaywrightTimeout as e:
            problems.append(f"timed out: {str(e).splitlines()[0]}")
        state = page.evaluate(_PAGE_STATE)
        state["cjkBoxes"] = page.evaluate(CJK_BOXES)
        broken = page.evaluate(_IMAGES_LOADED)
        # copies: closing the page below may still cancel a request, which is not the page's fault
        state.update(problems=list(problems), offsite=list(offsite), broken=broken, found=found)
        return state
    finally:
        # the whole page where something looks wrong (or COMMLIB_SCREENSHOTS=full), else its first screen: a
        # full-page screenshot of every page was 22 of this module's 75 s on 2 cores
        full = os.environ.get("COMMLIB_SCREENSHOTS") == "full" or state is None or _suspect(state)
        page.screenshot(path=str(OUT / (tag + name.replace("/", "_").removesuffix(".html") + ".png")), full_page=full)
        page.close()


def _suspect(state: dict) -> bool:
    """Whether a page's state holds anything the tests below flag (then its screenshot shows the whole page)."""
    keys = ("problems", "offsite", "broken", "wide", "scrolling", "cjkBoxes")   # a state cut short counts too
    return (any(state.get(k, True) for k in keys) or any(state.get("views", [1])) or any(state.get("math", [1]))
            or state.get("searchBoxes") != 1)


@pytest.fixture(scope="module")
def seen(site, browser):
    """Every page of the book opened once in Chromium. -> page name -> what _visit recorded."""
    OUT.mkdir(parents=True, exist_ok=True)
    return {name: _visit(browser, site, name) for name in PAGES}


@browser_test
@pytest.mark.parametrize("name", PAGES)
def test_page_in_the_browser(seen, name):
    state = seen[name]
    assert state["offsite"] == [], f"the page asked for something off this machine: {state['offsite']}"
    assert state["problems"] == [] and state["broken"] == [], state["problems"] + [f"broken image: {b}" for b in state["broken"]]
    assert "python3 course.py lab" in state["text"] and "python3 course.py test" in state["text"]
    assert "Author name not set" not in state["text"]
    assert state["wide"] == [], f"outputs or widgets wider than the book's column ({state['column']} px)"
    assert state["scrolling"] == [], "code that scrolls sideways in the column (issue 33)"
    assert state["searchBoxes"] == 1, f"{state['searchBoxes']} search boxes on the page: one is enough"
    assert all("saved view" in note for note in state["savedNote"]), \
        "a saved widget view does not say that it is one (book/_static/commlib-book.css)"
    assert [v for v in state["views"] if v] == [], "widget views that did not render from their saved state"
    assert [m for m in state["math"] if m] == [], "math that MathJax did not typeset"
    assert state["cjkBoxes"] == [], "Chinese text drawn as boxes: no CJK font (apt-get install fonts-noto-cjk)"
    if name.startswith("notebooks/"):
        outputs, markdown = _figures_in(ROOT / "notebooks" / (Path(name).stem + ".ipynb"))
        assert (state["outputImages"], state["markdownImages"]) == (outputs, markdown), \
            "the page does not show every figure of its notebook (output images, markdown images)"
    if name == "search.html":
        assert (state["found"] or 0) >= 2, "searching the book for 'allreduce' found fewer than 2 pages"


@browser_test
def test_every_internal_link_and_anchor_resolves(seen, site):
    import urllib.parse
    import urllib.request

    bad, checked = [], {}
    for name, state in seen.items():
        for link in state["links"]:
            if not link.startswith(site + "/"):
                continue  # links to other sites: not reachable from CI, not checked
            target, _, anchor = link.removeprefix(site + "/").partition("#")
            target = (target or name).split("?")[0]
            if target == "" or target.endswith("/"):
                target += "index.html"
            if target in seen:
                if anchor and urllib.parse.unquote(anchor) not in seen[target]["ids"]:
                    bad.append(f"{name}: {link} (no such anchor)")
            elif target not in checked:
                try:
                    with urllib.request.urlopen(f"{site}/{target}", timeout=30) as r:
                        checked[target] = r.status
                except OSError as e:
                    checked[target] = str(e)
            if checked.get(target, 200) != 200:
                bad.append(f"{name}: {link} ({checked[target]})")
    assert bad == [], bad


ZH_PAGES = ["index.html", "notebooks/02_latency_bandwidth.html", "search.html"]


@pytest.fixture(scope="module")
def seen_zh(site, browser):
    """A few pages of the zh_CN edition opened once (the front page with the edition's preface, a chapter with
    math, figures and widgets, and search for a Chinese word). -> (its base URL, page name -> what _visit recorded)."""
    zh = site.rsplit("/", 1)[0] + "/book-zh_CN"
    return zh, {name: _visit(browser, zh, name, query="通信开销", tag="zh_CN-") for name in ZH_PAGES}


@browser_test
def test_the_zh_CN_edition_in_the_browser(seen_zh, seen, site):
    zh, pages = seen_zh
    for name, state in pages.items():
        assert state["offsite"] == [] and state["problems"] == [] and state["broken"] == [], (name, state["problems"])
        assert state["cjkBoxes"] == [], "Chinese text drawn as boxes: no CJK font (apt-get install fonts-noto-cjk)"
        assert [m for m in state["math"] if m] == [], (name, "math that MathJax did not typeset")
        assert f"{site}/{name}" in state["links"], f"{name}: no link to the English edition's page"
        if name.startswith("notebooks/"):
            prose = state["text"]
            assert sum("\u3400" <= ch <= "\u9fff" for ch in prose) > 2000, f"{name}: its prose is not in Chinese"
            outputs, markdown = _figures_in(ROOT / "notebooks" / (Path(name).stem + ".ipynb"))
            assert (state["outputImages"], state["markdownImages"]) == (outputs, markdown), \
                f"{name}: the zh_CN page does not show every figure of its notebook"
            assert [v for v in state["views"] if v] == [], f"{name}: widget views that did not render"
    assert "本版" in pages["index.html"]["text"], "the front page lacks the edition's preface"
    assert (pages["search.html"]["found"] or 0) >= 2, "searching the zh_CN book for 通信开销 found fewer than 2 pages"
    missing = [name for name, state in seen.items() if f"{zh}/{name}" not in state["links"]]
    assert missing == [], f"English pages without a link to their zh_CN page: {missing}"
    for name, state in pages.items():  # links between the pages seen, anchors included, resolve in zh_CN too
        for link in state["links"]:
            target, _, anchor = link.removeprefix(zh + "/").partition("#")
            if link.startswith(zh + "/") and target in pages and anchor:
                assert anchor in pages[target]["ids"], f"{name}: {link} (no such anchor)"


@browser_test
def test_the_ring_animation_is_in_the_book_and_steps(seen, site, browser):
    animated = [name for name, state in seen.items() if state["animations"]]
    assert animated, ("no page of the book shows the ring animation (commlib.ui.animation.ring_all_reduce): "
                      "chapter 1 should display it below the ring stepper")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{site}/{animated[0]}", wait_until="load")
        anim = page.locator(".commlib-animation").first
        anim.scroll_into_view_if_needed()
        frames = int(anim.locator("input[type=range]").get_attribute("max")) + 1
        assert frames >= 3 and anim.get_attribute("data-frame") == "0"
        img = anim.locator("img")
        seen = [(img.get_attribute("src"), img.get_attribute("alt"))]
        for k in range(1, frames):  # step through every frame: each is a new picture with its own caption
            anim.locator("[data-go=next]").click()
            assert anim.get_attribute("data-frame") == str(k)
            seen.append((img.get_attribute("src"), img.get_attribute("alt")))
        assert len(set(seen)) == frames and seen[-1][1].startswith(f"step {frames - 1}/{frames - 1}")
        anim.locator("[data-go=back]").click()
        anim.locator("[data-go=play]").click()  # and it plays by itself, to the last step
        page.wait_for_function("f => document.querySelector('.commlib-animation').dataset.frame === String(f)",
                               arg=frames - 1, timeout=15_000)
        anim.screenshot(path=str(OUT / "ring_animation.png"))
    finally:
        page.close()


# every printed block at 800 px: lines kept whole (a table's columns stay aligned), wide ones scroll in their box
_PRINTED_AT_800 = """() => [...document.querySelectorAll('article .cell_output pre')].map(e => {
    const s = getComputedStyle(e), lines = e.innerText.replace(/\\n$/, '').split('\\n').length;
    const shown = Math.round((e.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom))
                             / parseFloat(s.lineHeight));
    const scrolls = e.scrollWidth > e.clientWidth + 1;
    return (shown > lines ? `wraps ${shown - lines} line(s)` : '') +
           (scrolls && s.overflowX !== 'auto' && s.overflowX !== 'scroll' ? ' cut off at the right' : '') +
           (e.getBoundingClientRect().right > document.querySelector('article').getBoundingClientRect().right + 2
            ? ' wider than the column' : '');
  }).map((bad, i) => bad && `block ${i}: ${bad}`).filter(Boolean)"""


@browser_test
@pytest.mark.parametrize("name", ["notebooks/03_topology.html", "notebooks/09_profiling.html"])
def test_at_800_px_printed_tables_keep_their_columns(site, browser, name):
    """At 800 px "flagged" and "comm path" fell onto the next line (pre-wrap broke the tables' rows, issue 40).
    Printed blocks keep their lines; the font shrinks with the column, and what is still too wide scrolls."""
    page = browser.new_page(viewport={"width": 800, "height": 900})
    try:
        page.goto(f"{site}/{name}", wait_until="load")
        assert page.locator("article .cell_output pre").count() > 5
        assert page.evaluate(_PRINTED_AT_800) == []
    finally:
        page.close()


# ------------------------------------------------------------------ --out (issue 24)
@pytest.mark.parametrize("out", [ROOT / "README.md", Path("/proc/nope")])
def test_an_out_that_cannot_be_a_folder_is_one_line_before_sphinx(out, monkeypatch, capsys):
    """Before: a 45-line Sphinx crash report, and /tmp/sphinx-err-*.log left behind."""
    import glob
    import tempfile

    monkeypatch.setattr(book, "fetch_vendor", lambda *a, **k: None)
    monkeypatch.setattr(book, "stage", lambda *a, **k: ([], "built from the committed notebooks"))
    logs = set(glob.glob(f"{tempfile.gettempdir()}/sphinx-err-*.log"))
    assert book.main(["--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}" in err, err
    assert set(glob.glob(f"{tempfile.gettempdir()}/sphinx-err-*.log")) == logs


def test_sphinx_builds_inside_the_work_folder_so_nothing_lands_beside_out(tmp_path, monkeypatch):
    """MyST-NB writes jupyter_execute/ beside the folder Sphinx builds: that must not be beside --out."""
    import subprocess

    calls = []

    def sphinx(cmd, **_):
        calls.append(cmd)
        Path(cmd[-1]).mkdir(parents=True, exist_ok=True)
        (Path(cmd[-1]) / "index.html").write_text("<html></html>")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(book, "fetch_vendor", lambda *a, **k: None)
    monkeypatch.setattr(book, "stage", lambda *a, **k: ([], "built from the committed notebooks"))
    monkeypatch.setattr(book.subprocess, "run", sphinx)
    out, work = tmp_path / "site" / "book", tmp_path / "work"
    assert book.build(out, work=work) == out / "index.html" and (out / "index.html").exists()
    built = Path(calls[0][-1])
    assert work in built.parents  # so its parent, where jupyter_execute/ goes, is inside work too
    assert built.parent != out.parent
