"""commlib.ui.language: what a learner reads, in the notebook's language. English unless a notebook asks, whatever
the system's LANG says; the catalogs' templates rebuild the checkers' rendered verdicts; every verdict the chapters
print comes out Chinese in the zh_CN edition."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commlib.ui import language
from commlib.exercises import Verdict
from commlib.exercises.answers import WIDTH

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
VERDICT = re.compile(r"^(Correct\. |Not yet\. )(.*(?:\n(?!Correct|Not yet|\[rank|$).*)*)", re.MULTILINE)
CJK = re.compile(r"[\u3400-\u9fff]")


@pytest.fixture
def zh():
    language.set_language("zh_CN")
    yield language
    language.set_language(None)


def test_english_unless_asked_whatever_the_system_says(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("LANGUAGE", "zh_CN")
    monkeypatch.delenv(language.ENV, raising=False)
    importlib.reload(language)
    assert language.language() is None and language.tr("Correct. ") == "Correct. "
    assert repr(Verdict(True, "every rank returned 3.")) == "Correct. every rank returned 3."


def test_an_edition_without_catalogs_is_refused_naming_lang():
    with pytest.raises(ValueError, match=r"lang: 'xx' has no catalogs; choose one of zh_CN"):
        language.set_language("xx")
    assert language.language() is None


def test_the_language_reaches_what_starts_afterwards(zh):
    assert os.environ[language.ENV] == "zh_CN"
    done = subprocess.run([sys.executable, "-c", "from commlib.ui import language; print(language.language())"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "zh_CN"
    language.set_language(None)
    assert language.ENV not in os.environ


def test_a_rendered_verdict_is_rebuilt_from_its_template_and_wrapped_by_columns(zh):
    assert repr(Verdict(True, "every rank holds 1 + 2 + ... + 8 = 36.")) == "正确。每个 rank 都持有 1 + 2 + ... + 8 = 36。"
    # holes reordered ({1} before {0}), and a listing translated item by item
    assert language.tr("31 of the 136 pairs the mask leaves (contiguous); zigzag: 17. The ring's step waits for the "
                       "busiest.").startswith("掩码留下的 136 对中的 31 对（contiguous）")
    assert language.tr("1 MiB: 2.0 ms, 4 MiB: 3.5 ms.") == "桶上限 1 MiB：2.0 ms，桶上限 4 MiB：3.5 ms。"
    assert language.tr("a message no catalog has, 3 ms.") == "a message no catalog has, 3 ms."
    long = repr(Verdict(True, "the replay keeps every compute duration as measured: a change in compute speed is "
                              "not in the trace. Links, nodes and buckets change only communication, which it prices."))
    assert all(language.width(line) <= WIDTH for line in long.split("\n")) and long.count("\n") == 1


def test_every_verdict_the_chapters_print_comes_out_chinese(zh):
    """The verdicts the English chapters print (their committed outputs), as the zh_CN edition prints them: a
    verdict left in English is listed. A checker whose English changed needs its template updated in
    locales/zh_CN/LC_MESSAGES/commlib/exercises.po."""
    english = []
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", "")) or "".join(out.get("data", {}).get("text/plain", ""))
                for m in VERDICT.finditer(text):
                    message = m.group(2).replace("\n", " ")  # the checker's message, unwrapped
                    if not CJK.search(language.tr(message)):
                        english.append(f"{path.stem}: {message[:90]}")
    assert english == [], f"{len(english)} verdict(s) left in English:\n" + "\n".join(english)


# ------------------------------------------------------------------ the ui: figures' texts, widgets' captions

def template(node) -> list[str]:
    """The messages a string expression of the source renders, as templates: an f-string's fields are {} holes."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)]
    if isinstance(node, (ast.BoolOp, ast.IfExp)):
        parts = node.values if isinstance(node, ast.BoolOp) else [node.body, node.orelse]
        return [t for p in parts for t in template(p)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [a + b for a in template(node.left) for b in template(node.right)]
    return ["{}"]  # a name, a call: a hole


def checker_messages() -> list[str]:
    """Every message a checker writes into a Verdict (hints included), as templates."""
    import ast

    found, said = [], []
    for path in sorted((ROOT / "commlib" / "exercises").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(getattr(node, "func", None), "id", "")
            if isinstance(node, ast.Call) and name == "Verdict" and len(node.args) > 1:
                said.append(node.args[1])
            elif isinstance(node, ast.Call) and name == "_judge" and len(node.args) > 4:  # the workshop's
                said += [node.args[2], node.args[4]]
            elif isinstance(node, (ast.Assign, ast.AugAssign)) and "mistakes" in ast.dump(node)[:200]:
                said += [n.elts[1] for n in ast.walk(node.value) if isinstance(n, ast.Tuple) and len(n.elts) == 2]
    for node in said:
        found += [t for t in template(node) if re.search(r"[A-Za-z]{2}", t.replace("{}", "")) and t not in found]
    return found


def test_every_hint_a_checker_can_give_has_its_chinese(zh):
    """Wrong answers too: each message a checker can put in a Verdict, its holes filled, comes out Chinese."""
    english = [t for t in checker_messages() if not CJK.search(language.tr(t.replace("{}", "7")))]
    assert english == [], f"{len(english)} checker message(s) left in English (add them to exercises.po):\n" + \
        "\n".join(english)


def ui_messages() -> list[str]:
    """The captions and labels commlib.ui writes (titles, axis labels, legend labels, annotations, widget
    descriptions), as templates: an f-string's fields are {} holes."""
    import ast

    calls, keywords, found = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "text"}, {"label", "description"}, []
    for path in sorted((ROOT / "commlib" / "ui").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            args = [node.args[-1 if name == "text" else 0]] if name in calls and node.args else []
            for arg in args + [k.value for k in node.keywords if k.arg in keywords]:
                found += [t for t in template(arg) if re.search(r"[A-Za-z]{2}", t.replace("{}", "")) and t not in found]
    return found


UNITS = {"ms", "s", "rank {}", "entry", "{}, step {} of {}: {}", "{}, load {} to {}", " n½ = α/β = {} KiB",
         "python -m commlib diagnose (end to end)", "t = α + n·β", "NIC", "ZeRO", "MFU"}  # the same in Chinese


def test_every_caption_and_label_of_the_ui_has_its_chinese(zh):
    """What the zh_CN notebooks' widgets and plots show: each caption or label commlib.ui writes, looked up as the
    figure or widget will look it up; a new English one without its translation in ui.po is listed."""
    filled = lambda t: t.replace("{}", "7")  # noqa: E731
    english = [t for t in ui_messages() if t not in UNITS and not CJK.search(language.tr(filled(t)))]
    assert english == [], f"{len(english)} caption(s) or label(s) left in English (add them to ui.po):\n" + \
        "\n".join(english)


def test_a_figure_speaks_where_a_font_draws_chinese_and_a_widget_always(zh, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.text import Text

    from commlib.ui import plots, widgets

    texts = lambda ax: {t.get_text() for t in ax.figure.findobj(Text) if t.get_text()}  # noqa: E731
    monkeypatch.setattr(language, "cjk_font", lambda: None)
    assert "bucket cap (MiB)" in texts(plots.bucket_sweep([1, 4], [0.2, 0.1], [0.05, 0.01]))  # no boxes: English
    monkeypatch.setattr(language, "cjk_font", lambda: "DejaVu Sans")
    got = texts(plots.bucket_sweep([1, 4], [0.2, 0.1], [0.05, 0.01]))
    assert {"桶上限（MiB）", "暴露的通信", "这里最好的桶上限：4 MiB"} <= got
    box = widgets.cost_calculator()
    assert [c.description for c in box.children[0].children][:2] == ["操作", "算法"]
    language.set_language(None)
    assert "bucket cap (MiB)" in texts(plots.bucket_sweep([1, 4], [0.2, 0.1], [0.05, 0.01]))


def test_a_widgets_read_out_is_translated_on_every_update(zh):
    from commlib.ui import widgets

    box, seen = widgets.cost_calculator(), []
    stack = [box]
    while stack:
        w = stack.pop()
        seen.append(w)
        stack += list(getattr(w, "children", ()) or ())
    html = next(w for w in seen if type(w).__name__ == "HTML")
    assert "延迟项（消息数 × α）" in html.value and "latency term" not in html.value
    next(w for w in seen if type(w).__name__ == "IntSlider").value = 16
    assert "延迟项（消息数 × α）" in html.value and "latency term" not in html.value


def test_every_templates_holes_fit_and_a_bad_one_stays_english(zh, monkeypatch):
    _, holes = language.catalog("zh_CN")
    for msgid, (msgstr, _) in holes.items():
        used = [int(i) for i in re.findall(r"\{(\d+)\}", msgstr)]
        assert max(used, default=-1) < msgid.count("{}"), (msgid, msgstr)
        assert "{}" not in msgstr, (msgid, msgstr)
    monkeypatch.setattr(language, "_state", {"lang": "zh_CN", "table": language.catalog("zh_CN")[0],
                                             "templates": language.templates({"a {} b": ("甲 {3} 乙", False)})})
    assert language.tr("a 1 b") == "a 1 b"


def test_an_animations_captions_speak_the_notebooks_language(zh):
    from commlib.ui.animation import Animation

    a = Animation((b"png",), ("step 0/6: start: each rank holds its own data (the label lists whose data a box holds)",))
    assert "第 0/6 步：开始：每个 rank 持有自己的数据" in a.to_html()
    language.set_language(None)
    assert "step 0/6: start: each rank holds its own data" in a.to_html()
