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
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commlib import columns
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
    assert all(columns.width(line) <= WIDTH for line in long.split("\n")) and long.count("\n") == 1


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


# ------------------------------------------------------------------ the reports: diagnose's and whatif's text

FLAGS = [{"kind": "waited", "wait_us": 7.0, "rank": 1}, {"kind": "small"}, {"kind": "slower", "times": 2.5,
         "fastest_us": 7.0}, {"kind": "ll", "symmetric": True}, {"kind": "ll", "symmetric": False},
         {"kind": "beside", "cpu": True}, {"kind": "beside", "cpu": False}, {"kind": "busbw", "cpu": True},
         {"kind": "busbw", "cpu": False, "or_missing_peer": True}]
WHYS = [{"kind": "given", "preset": "dgx_h100", "cpu_job": True}, {"kind": "given", "preset": "dgx_h100",
        "cpu_job": False}, {"kind": "no_gpu_named", "unpriced": True}, {"kind": "cpu", "unpriced": True},
        {"kind": "sxm", "gpu": "NVIDIA H100 80GB HBM3", "preset": "dgx_h100"}, {"kind": "no_preset", "gpu": "T4"},
        {"kind": "network", "network": "2x1x1@2e+07"}]
NOTES = [{"kind": "ranks_missing", "traces": 1, "world": 2}, {"kind": "late_start", "rank": 1, "group": "0",
         "us": 7e3}, {"kind": "unknown_group", "calls": 2}, {"kind": "unmatched", "case": "differs", "group": "0",
         "call": 1, "seen": [{"rank": 0, "op": "all_reduce", "bytes": 8}, {"rank": 1, "op": "all_gather",
                                                                           "bytes": 4}]},
         {"kind": "unmatched", "case": "fewer", "group": "0", "short": 2, "most": 4, "longest": 0,
          "first": {"op": "all_reduce", "bytes": 8}, "behind": [{"rank": 1, "calls": 2}]},
         {"kind": "too_fast", "calls": 8, "rank": 0, "op": "all_reduce", "bytes": 1 << 60, "duration_us": 1.0,
          "busbw_GBps": 1e12, "limit_GBps": 1e5}, {"kind": "dtype_assumed"},
         {"kind": "measured_on", "why": WHYS[4]},
         {"kind": "flat_ring_nics", "scenarios": ["network 2x2x2@1e+07"], "measured_nics": 1, "nics": 2,
          "kernel_network": {"job": "FSDP2", "gpus_per_node": 2, "nics": (1, 2), "measured_s": (0.8, 0.67),
                             "predicted_s": (0.77, 0.77)}},
         {"kind": "flat_ring_nics", "scenarios": ["a", "b"], "measured_nics": 2, "nics": 1, "kernel_network": None},
         {"kind": "reader", "text": "rank0.json: no device times in this "
          "trace (NCCL seen from the CPU only): the times are the CPU ops'; record with ProfilerActivity.CUDA for "
          "the kernels'"}]
CHAIN = {"rank": 2, "group": "3", "group_size": 2, "delay_us": 180e3, "own_us": 1e3, "calls": 1, "root": False,
         "behind": [{"rank": 1, "group": "2", "us": 179e3}], "chain": [{"rank": 1, "group": "2", "root": False},
                                                                     {"rank": 0, "group": "1", "root": True}]}
ROOTS = {"rank": 0, "group": "1", "group_size": 2, "delay_us": 180e3, "own_us": 180e3, "calls": 1, "root": True,
         "behind": [], "chain": []}


def chinese(text: str) -> bool:
    """Said in Chinese: Chinese characters, and no four English words in a row (a sentence translated in part)."""
    return bool(CJK.search(text)) and not re.search(r"[A-Za-z]+(?: [a-z]+){3}", text)


def report_sources() -> list[str]:
    """The sentences the reports carry from earlier stages as text (a reader's notes, the replay's notes and
    assumptions), as templates: each `notes.append(...)`, `said.append(...)` and stream_overlaps' sentence."""
    import ast

    found = []
    prof = ROOT / "commlib" / "profiling"
    for path in [prof / "traces.py", prof / "groups.py", prof / "read" / "streams.py", prof / "replay" / "graph.py",
                 prof / "replay" / "whatif.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            said = []
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "append" and \
                    getattr(node.func.value, "id", getattr(node.func.value, "attr", "")) in ("notes", "said"):
                said = node.args[:1]
            elif isinstance(node, ast.Return) and path.name == "streams.py" and node.value is not None:
                said = [node.value]
            elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "notes" and \
                    isinstance(node.value, ast.ListComp):
                said = [node.value.elt]
            for arg in said:
                found += [t for t in template(_choices(arg)) if re.search(r"[A-Za-z]{3}", t.replace("{}", ""))
                          and t not in found]
    return found


def _choices(node):
    """An f-string whose field picks one of two words ({'grow' if x else 'shrink'}) as the two f-strings."""
    import ast

    if isinstance(node, ast.BinOp):
        return ast.BinOp(_choices(node.left), node.op, _choices(node.right))
    if not isinstance(node, ast.JoinedStr):
        return node
    for i, v in enumerate(node.values):
        if isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.IfExp) and all(
                isinstance(x, ast.Constant) for x in (v.value.body, v.value.orelse)):
            pick = lambda x: ast.JoinedStr(node.values[:i] + [x] + node.values[i + 1:])  # noqa: E731
            return ast.IfExp(v.value.test, _choices(pick(v.value.body)), _choices(pick(v.value.orelse)))
    return node


def test_every_sentence_of_the_reports_has_its_chinese(zh, monkeypatch):
    """diagnose's and whatif's text in the zh_CN edition: every message the reports put through tr (headers,
    flags, notes, stragglers, the what-if's lines) comes out Chinese, for one record of every kind words.py says
    (a kind words.py gains without a record here fails) and for the sentences earlier stages write; a message
    left in English is listed (add it to report.po). The JSON stays English."""
    import ast

    from commlib.profiling import diagnosis
    from commlib.profiling.replay import whatif as wi
    from commlib.profiling.report import diagnosis as rd
    from commlib.profiling.report import whatif as rw
    from commlib.profiling.traces import SAMPLE

    words = (ROOT / "commlib" / "profiling" / "report" / "words.py").read_text(encoding="utf-8")
    kinds = {c.value for node in ast.walk(ast.parse(words)) if isinstance(node, ast.Compare)
             and "kind" in ast.unparse(node.left) for c in node.comparators if isinstance(c, ast.Constant)}
    assert kinds <= {r["kind"] for r in FLAGS + WHYS + NOTES}, kinds - {r["kind"] for r in FLAGS + WHYS + NOTES}
    said = []

    def spy(message):
        out = language.tr(message)
        said.append((message, out))
        return out

    monkeypatch.setattr(rd, "tr", spy)
    monkeypatch.setattr(rw, "tr", spy)
    for f in FLAGS:
        rd.flag(f)
    for why in WHYS:
        rd.hardware(why)
    for n in NOTES[:-1]:
        rd.note(n)
    for s in (CHAIN, ROOTS):
        rd.describe(s, {"1": [0, 1], "2": [1, 2]})
    rd._noise_line({"noise": {}})
    rd._noise_line({"noise": {"spread_us": {"0": 7.0}, "unnamed": [{"rank": 1, "group": "0", "delay_us": 7.0,
                                                                    "calls": 2}]}})
    report = diagnosis.diagnose([SAMPLE], hardware="dgx_h100")
    text = rd.format_report(report)
    assert "掉队者" in text and "note:" not in text
    replay = wi.whatif([SAMPLE], [wi.Scenario(nodes=2, bucket_mb=4, compress=2)])
    assert "场景" in rw.format_report(replay) and "2 × 8 个 GPU，4 MiB 的桶，压缩 2 倍" in rw.format_report(replay)
    english = sorted({m for m, out in said if not chinese(out) and m not in ("rank", "", "busbw GB/s")})
    english += [t for t in report_sources() if not chinese(language.tr(t.replace("{}", "7")))]
    assert english == [], f"{len(english)} report message(s) left in English (add them to report.po):\n" + \
        "\n".join(english)
    assert json_english(report, replay)


def json_english(report, replay) -> bool:
    """The --json of both reports in the zh_CN edition: English, as the English edition writes it."""
    from commlib.profiling.report import diagnosis as rd
    from commlib.profiling.report import whatif as rw

    out = json.dumps(rd.json_report(report)) + json.dumps(rw.json_report(replay))
    return not CJK.search(out) and "measured on: " in out


def test_the_reports_tables_keep_their_columns_in_chinese(zh):
    from commlib import columns

    lines = columns.fit([["场景", "每步 ms"], ["identity", "1.00"]], [10, 9], "<>")
    assert [columns.width(line) for line in lines] == [19, 19] and lines[0] == "场景        每步 ms"


def test_a_templates_words_reach_a_bare_number_and_read_in_chinese(zh):
    """A template whose Chinese keeps no Chinese character ("{0}（fp32 logits）") is skipped when its hole is a bare
    number (nothing of it looks translated), so "4.2 (fp32 logits)" stayed English inside the planner's listing
    (issue 62). Every template with English words says something in Chinese, unless it keeps them all as names."""
    from babel.messages.pofile import read_po

    names = {"rank", "RuntimeError"}  # what a msgstr may keep in English around its holes ("{0} = rank {1}")
    wordless = []
    for po in sorted((ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / "commlib").glob("*.po")):
        for m in read_po(po.open("rb")):
            kept = set(re.findall(r"[A-Za-z][A-Za-z0-9_-]*", re.sub(r"\{\d*\}", "", m.string or ""))) - names
            if m.id and "{}" in m.id and m.string and re.search(r"[A-Za-z]{2}", m.id.replace("{}", "")) \
                    and not CJK.search(m.string) and kept:
                wordless.append(f"{po.stem}: {m.id!r} -> {m.string!r}")
    assert wordless == [], "\n".join(wordless)
    listing = ("per GPU, against 80 GB: B: 6.7 (model states) + 161.1 (activations) + 4.2 (fp32 logits) + 0.8 "
               "(ZeRO-3's gathered layers) = 172.8 GB.")
    said = language.tr(listing)
    assert "(fp32 logits)" not in said and "4.2（" in said and "（模型状态）" in said, said


# ------------------------------------------------------------------ what commlib shows when it runs (issue 62)
# The tests above read the source; these run it, in zh_CN: every hint a checker gives wrong answers, every text a
# figure draws (tick labels and legends given as variables too), every widget's captions and read-outs, chapter
# 10's diagnoses, the reports. A text fails on an English word outside code names, units, acronyms, the glossary's
# names and tests/zh_english_allowed.txt (tests/test_zh_english.py's reading of a text).

import language_samples as samples  # noqa: E402


NAMES = {"bw", "Narayanan", "Megatron", "zig-zag", "token", "python", "paced"}  # a formula's name, authors, a
# balance mode, a loanword, a command, the network kind Cluster(network=...) reports
_CALL = re.compile(r"[\w.]+\((?:[^()]|\([^()]*\))*\)")   # plan.estimate(ws.MODEL, ws.hardware(cluster), config): code


def _english(texts, strict: bool = True) -> list[str]:
    from test_zh_english import allowlist, english

    words, phrases, patterns = allowlist()
    allowed = (words | NAMES, phrases, patterns)
    return [f"{found[:4]} in {text[:160]!r}" for text in texts
            for found in [english(_CALL.sub(" ", text), allowed, strict)] if found]


@pytest.fixture
def drawn_zh(zh, monkeypatch):
    """zh_CN, with figures translated as where a font draws Chinese (any font does for reading their texts)."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setattr(language, "cjk_font", lambda: "DejaVu Sans")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing")
        yield language


def test_every_hint_a_checker_gives_wrong_answers_is_chinese(zh):
    """Each checker called with odd answers, each of its options, and an answer matching each of its known
    mistakes in turn: what it says, hints kept in variables and dicts included, is Chinese."""
    english = []
    for name, fn, kwargs in samples.checkers():
        said = {text.replace("\n", " ") for text in samples.hints(fn, kwargs)}  # a verdict's lines are its wrapping
        english += [f"{name}: {bad}" for bad in _english(sorted(said))]
    assert english == [], f"{len(english)} hint(s) with English (add them to exercises.po):\n" + "\n".join(english)


def test_every_figure_draws_chinese(drawn_zh):
    """Every figure function drawn (twice: fixed tick labels are written afresh at each draw): its titles, labels,
    legends and tick labels are Chinese or code names."""
    english = []
    for name, figure in samples.figures():
        english += [f"{name}: {bad}" for bad in _english(samples.drawn(figure))]
        english += [f"{name}, drawn again: {bad}" for bad in _english(samples.drawn(figure))]
    assert english == [], f"{len(english)} figure text(s) in English (add them to ui.po):\n" + "\n".join(english)


def test_a_figures_tick_labels_stay_translated_when_drawn_and_english_is_untouched(drawn_zh):
    from commlib.cost.timeline import simulate
    from commlib.ui import plots

    tl = simulate([0.01], [0.008], overlap=True)
    assert {"反向", "AllReduce"} <= set(samples.drawn(plots.timeline(tl).figure))
    language.set_language(None)
    ax = plots.timeline(tl)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["backward", "all-reduce"]
    assert ax.yaxis.get_major_ticks()[0].label1.get_fontfamily() == ["sans-serif"]


def test_every_widget_says_chinese(zh):
    """Every widget's captions and read-outs (the planner after its search, the replay at its last entry)."""
    english = []
    for name, box in samples.widgets():
        english += [f"{name}: {bad}" for bad in _english(samples.widget_texts(box))]
    assert english == [], f"{len(english)} widget text(s) in English (add them to ui.po):\n" + "\n".join(english)


def test_the_animation_players_words_speak_and_its_english_html_is_unchanged(zh):
    from html.parser import HTMLParser

    from commlib.ui.animation import Animation

    a = Animation((b"png", b"png2"), ("step 0/6: start: each rank holds its own data (the label lists whose data a "
                                      "box holds)", "step 1/6: x"))
    zh_html = a.to_html()

    class Text(HTMLParser):
        said: list = []

        def handle_starttag(self, tag, attrs):
            self.said += [v for k, v in attrs if k in ("title", "aria-label") and v]

        def handle_data(self, data):
            if data.strip() and "function" not in data:
                self.said.append(data.strip())

    reader = Text()
    reader.feed(zh_html)
    assert _english(reader.said) == [] and '"第 " + k + "/" + (frames.length - 1) + " 步"' in zh_html
    assert 'play.textContent = "暂停"' in zh_html
    language.set_language(None)
    en = a.to_html()
    for english in ('title="first step">&laquo; first</button>', '<span class="commlib-animation-step">step 0 of 1',
                    'label.textContent = "step " + k + " of " + (frames.length - 1);', 'play.textContent = "play"; }',
                    'play.textContent = "pause";', 'aria-label="step"'):
        assert english in en


def _diagnosed() -> list[dict]:
    """One diagnosis of each kind chapter 10 shows, from made-up records (cluster/diagnosis.py, matching.py)."""
    from commlib.cluster import call_check, diagnosis

    groups = {"0": ["default_pg", [0, 1, 2, 3]]}
    entry = samples._entry
    odd = {r: {"fr": {"entries": [entry(1, "all_reduce"), entry(2, "broadcast" if r == 2 else "all_reduce")]},
               "groups": groups} for r in range(4)}
    short = {r: {"fr": {"entries": [entry(1, "all_reduce")] + ([entry(2, "all_reduce")] if r != 3 else [])},
                 "groups": groups} for r in range(4)}
    swap = {r: {"waiting": {"op": "recv", "p2p": True, "peer": r ^ 1, "tensor": {"shape": "[4]", "dtype": "float32"},
                            "where": "swap() line 4"}} for r in range(2)}
    fingerprint = ("Detected mismatch between collectives on ranks. Rank {} is running collective: "
                   "CollectiveFingerPrint(SequenceNumber=1, OpType={}, TensorShape=[4], TensorDtypes=Float")
    return [diagnosis.diagnose(odd, 4), diagnosis.diagnose(short, 4, stuck=[0, 1, 2]), diagnosis.from_waiting(swap),
            diagnosis.from_fingerprints({r: fingerprint.format(r, "BROADCAST" if r == 2 else "ALLREDUCE")
                                         for r in range(4)}),
            diagnosis.from_call_check({2: f"{call_check.MARK}: mismatch in process group 0 at its call #1: rank 2 "
                                          f"called all_reduce op=MAX; ranks 0, 1, 3 called all_reduce op=SUM "
                                          f"[culprits: 2]"}),
            diagnosis.from_monitored_barrier({0: "Ranks 3 failed to pass monitoredBarrier in 1000 ms"}, 4),
            diagnosis.diagnose({r: None for r in range(2)}, 2),
            diagnosis.from_failures({}, {1: "Traceback\nKeyError: 'x'"}, {}, stuck=[0])]


def test_chapter_10s_diagnoses_are_chinese_and_wrapped_by_columns(zh):
    from commlib.cluster import diagnosis

    said = [diagnosis.summary(d) for d in _diagnosed()]
    assert len(said) == 8 and all(s.startswith("kind=") for s in said)
    assert _english(said) == [], "\n".join(_english(said))
    assert all(columns.width(line) <= 100 for s in said for line in s.splitlines())
    language.set_language(None)
    english = [d["detail"] for d in _diagnosed()]
    assert english[0] == ("mismatch in process group 0 (default_pg): rank 2 called broadcast #2 of [4] float32, "
                          "where ranks 0, 1, 3 called all_reduce #2 of [4] float32.")
    assert not any(CJK.search(t) for t in english)


def test_the_reports_are_chinese(zh):
    """Chapter 3's emulated benchmark, chapter 2's wording, chapter 9's scale summary and what each backend runs:
    every sentence Chinese; a measurement line (no Chinese, no sentence) stays as it is."""
    from commlib.bench import emulated, wording
    from commlib.profiling.jobs import scale
    from commlib.profiling.replay import pricing

    result = emulated.load_committed()
    lines = (emulated.format_result(result) + "\n" + emulated.agreement(result)).splitlines()
    lines += [wording.agreement(1.5, 1.0), wording.agreement(1.0, 1.0), wording.versus(1, 2, "ring", "tree"),
              wording.versus(1, 1, "ring", "tree"), wording.machine()]
    lines += scale.summary(scale.load_scale()) + [row["runs"] for row in pricing.backend_table(1 << 20, 2)]
    assert _english(lines, strict=False) == [], "\n".join(_english(lines, strict=False))
    assert all(columns.width(line) <= 100 for line in lines)


def test_a_chinese_verdict_breaks_after_a_mark_or_at_a_space_never_inside_a_word(zh):
    from commlib.ui.wrap import wrap

    text = ("还不对。" + "分层算法的 NVLink 阶段和网络阶段依次进行，" * 2 + "每个 rank 的带宽项（字节数 × β）与 "
            "latency_term_of_the_model 一起决定每步耗时。") * 2
    lines = wrap(text, 60)
    assert all(columns.width(line) <= 60 for line in lines)
    assert all(line[-1] in "，。；：）？" or line.endswith(" ") is False and text[text.index(line) + len(line)] == " "
               for line in lines[:-1])
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")
    assert not any(line[:1] in "，。；：）" for line in lines[1:])
    assert all("latency_term_of_the_model" in line for line in lines if "latency_term" in line)


def test_a_message_taken_out_of_the_catalog_is_caught(drawn_zh, monkeypatch):
    """The checks above fail when one message leaves the catalog: a hint kept in a dict, a figure's tick label."""
    from commlib import exercises
    from commlib.ui import plots

    table, holes = language.catalog("zh_CN")
    del table._catalog["a slower network link"]
    holes.pop("stage {}")
    monkeypatch.setattr(language, "_state", {"lang": "zh_CN", "table": table, "templates": language.templates(holes)})
    hints = _english(text.replace("\n", " ") for text in samples.hints(exercises.ch9_replay_blind, {}))
    assert any("slower" in bad for bad in hints)
    figure = plots.pipeline_timeline([[("F", 0, 0.0, 1.0)], [("F", 0, 1.0, 2.0)]]).figure
    assert any("stage" in bad for bad in _english(samples.drawn(figure)))


def test_fill_is_textwraps_for_english_and_wraps_chinese_by_width_with_its_indent():
    import textwrap

    from commlib.columns import width
    from commlib.ui.wrap import fill

    english = " gloo all_gather on 2 ranks only: " + "each send is posted before its recv, " * 6
    assert fill(english, 100, " " * 22) == textwrap.fill(english, 100, subsequent_indent=" " * 22)
    chinese = " gloo all_gather 仅在 2 个 rank 时：" + "每个 send 都在它的 recv 之前发起，" * 8
    lines = fill(chinese, 100, " " * 22).splitlines()
    assert lines[0].startswith(" gloo all_gather") and all(line.startswith(" " * 22) for line in lines[1:])
    assert all(width(line) <= 100 for line in lines) and len(lines) > 2
    assert "".join("".join(line.split()) for line in lines) == "".join(chinese.split())   # nothing lost or doubled


def test_a_checker_s_list_of_choices_reads_as_chinese_sentences():
    """Before (native read of chapter 9): "从 (0，1，2)（一个 rank）：答案 中选一个应当是一个数": the listing, its unit
    and the problem with the answer were matched by the wrong template and came out interleaved."""
    from commlib.exercises.answers import _choice

    language.set_language("zh_CN")
    try:
        said = [repr(_choice(answer, options, unit)[1]) for answer, options, unit in [
            ("x", (0, 1, 2), "a rank"), ("z", ("a", "b"), "a letter"), ([1, 2], (1, 2), "MiB")]]
    finally:
        language.set_language(None)
    assert said == ["还不对。从以下选项中选一个（一个 rank）：(0, 1, 2)。答案应当是一个数，收到的是 str。",
                    "还不对。从以下选项中选一个（一个字母）：('a', 'b')。",
                    "还不对。从以下选项中选一个（MiB）：(1, 2)。答案应当是一个数，收到的是 list。"], said


def test_a_word_with_two_meanings_reads_by_its_msgctxt_and_a_chinese_hole_keeps_no_space(zh):
    """ui.po's "step" is a step (步: a slider's, the training curves' axis) and, under msgctxt "step time", a
    step's time (每步耗时: the bucket sweep's curve, the planner's column); English reads the word either way. A
    template's space beside a hole parts Chinese from Latin letters and digits, never Chinese from Chinese
    (issue 62: 无 的速度是)."""
    assert (zh.tr("step"), zh.tr("step", "step time")) == ("步", "每步耗时")
    assert zh._fill("{0} 的速度是 {2} 的 {1} 倍", ["无", "2.50", "powersgd r=4"]) == "无的速度是 powersgd r=4 的 2.50 倍"
    assert zh._fill("在 {0} 个 rank 上：{1}", ["3", "完全"]) == "在 3 个 rank 上：完全"
    zh.set_language(None)
    assert zh.tr("step", "step time") == "step"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["第", "行处来自", "的", " ", "4", "rank", "recv", "（[4] float32）", "：", "，",
                                 "send；", "swap()", "12345678"]), max_size=80), st.integers(20, 100))
@example(["行处来自", "行处来自", "第", " ", "4"], 19)   # "…第 4": 20 columns, where the space was not counted
def test_a_wrapped_chinese_line_never_passes_its_columns(tokens, limit):
    """Before: a line ending '…停在 swap() 第 4' took the space before the 4 for nothing, so wrap(text, 98) gave a
    99-column line and chapter 10's p2p diagnosis printed 101-column lines in Chinese."""
    from commlib.ui.wrap import wrap

    text = "".join(tokens)
    lines = wrap(text, limit)
    wider = [line for line in lines if columns.width(line) > limit]
    assert all(line.isascii() and " " not in line for line in wider), wider   # only a Latin word kept whole
    assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_a_table_with_chinese_headers_gives_back_unused_room_to_stay_within_the_column():
    """Before: chapter 9's what-if table in Chinese was 109 columns wide (关键路径通信占比 in a 10-column slot), its
    diagnose table 101: the columns widened for the headers and kept the room the English names need."""
    rows = [["场景", "每步耗时 ms", "相对实测", "计算 ms", "暴露 ms", "等待 ms", "关键路径通信占比"],
            ["dgx_h100，2 × 8 个 GPU", "220.36", "1.00", "38.55", "13.55", "0.00", "12%"]]
    widths, align = [38, 9, 8, 11, 11, 11, 10], "<>>>>>>"
    assert [columns.width(line) for line in columns.fit(rows, widths, align)] == [109, 109]
    lines = columns.fit(rows, widths, align, 100)
    assert [columns.width(line) for line in lines] == [100, 100]
    assert [line.split() for line in lines] == [" ".join(r).split() for r in rows]   # every cell kept
    english = [["scenario", "step ms"], ["measured", "73.64"]]
    assert columns.fit(english, [38, 9], "<>", 100) == columns.fit(english, [38, 9], "<>")   # room to spare
