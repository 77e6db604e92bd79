"""The zh_CN edition (book/i18n.py, locales/zh_CN/): the catalogs are complete for the chapters as they are, every
translation keeps its code, math, links, numbers and the glossary's names and terms, and the zh_CN notebooks hold
the English code cells unchanged after one that sets commlib's language (commlib.set_language("zh_CN")), their
stored verdicts rendered in Chinese.

A change to English prose makes its messages new or fuzzy: `python book/i18n.py extract`, translate them in
locales/zh_CN/LC_MESSAGES/, and `python book/i18n.py check` says when the catalogs are complete again. The book in
zh_CN is built and opened in a browser by tests/test_book.py.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from book import i18n

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
LANG = "zh_CN"


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """The message templates extracted afresh from the chapters as they are (Sphinx's gettext builder)."""
    work = tmp_path_factory.mktemp("gettext")
    i18n.extract(work / "pot", work / "src")
    return work / "pot"


def test_the_catalogs_are_complete_and_keep_what_they_must(templates):
    problems = i18n.check(LANG, pot=templates)
    assert problems == [], f"{len(problems)} problem(s); python book/i18n.py check lists them:\n" + "\n".join(
        problems[:30])


def test_one_catalog_per_chapter_and_one_for_the_front_page(templates):
    domains = sorted(p.relative_to(templates).with_suffix("").as_posix() for p in templates.rglob("*.pot"))
    assert domains == ["index", *(f"notebooks/{p.stem}" for p in NOTEBOOKS)]
    for domain in domains:
        assert i18n.catalog_path(LANG, domain).is_file()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("nb") / "build" / f"notebooks-{LANG}"
    paths, lacking, kept = i18n.write_notebooks(LANG, out)
    return out, paths, lacking, kept


def test_every_markdown_block_of_every_chapter_is_translated(written):
    _, paths, lacking, kept = written
    assert [p.name for p in paths] == [p.name for p in NOTEBOOKS] and kept == []
    assert lacking == {}, {k: v[:3] for k, v in lacking.items()}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_zh_CN_notebook_holds_the_english_code_cells_unchanged(written, path):
    out = written[0]
    en = json.loads(path.read_text(encoding="utf-8"))
    zh = json.loads((out / path.name).read_text(encoding="utf-8"))
    code = lambda nb: [c for c in nb["cells"] if c["cell_type"] != "markdown"]  # noqa: E731
    first = i18n.editions.language_cell(LANG)
    assert (code(zh)[0]["id"], code(zh)[0]["source"]) == (first["id"], first["source"]), \
        "commlib speaks the edition's language from the start"
    nb = i18n.editions.with_language_cell(en, LANG)  # the outputs of the Chinese run (tests/test_zh_outputs.py)
    want = i18n.outputs.with_outputs(nb, path.stem, LANG) or i18n.editions.with_verdicts_in(nb, LANG)
    assert code(zh) == code(want), "the English code, the outputs of the run in Chinese"
    assert [c["source"] for c in code(zh)[1:]] == [c["source"] for c in code(en)]
    assert {k: v for k, v in zh["metadata"].items() if k != "commlib"} == want["metadata"], \
        "the English metadata, the widgets' state of the run in Chinese"
    markdown = [c for c in zh["cells"] if c["cell_type"] == "markdown" and not c.get("id", "").startswith("preface-")]
    english = [c for c in en["cells"] if c["cell_type"] == "markdown"]
    assert len(markdown) == len(english)
    assert (path == NOTEBOOKS[0]) == any(c.get("id") == f"preface-{LANG}" for c in zh["cells"]), \
        "chapter 0, and only chapter 0, opens with the edition's preface"
    md = i18n.markdown_parser()
    shape = lambda cell: [t.type for t in md.parse("".join(cell["source"]))]  # noqa: E731
    assert [shape(c) for c in markdown] == [shape(c) for c in english], "blocks that changed their structure"
    text = "".join("".join(c["source"]) for c in markdown)
    cjk = sum("\u3400" <= ch <= "\u9fff" for ch in text)
    assert cjk > 0.3 * len(text.split()), "the chapter's prose is not in Chinese"


def test_the_preface_says_what_stays_english_and_links_resolve_from_the_new_folder(written):
    out = written[0]
    zh = json.loads((out / NOTEBOOKS[0].name).read_text(encoding="utf-8"))
    preface = "".join(zh["cells"][1]["source"])
    assert "英文" in preface and "commlib" in preface and 'set_language("zh_CN")' in preface
    assert "| 仍是英文的 |" in preface and "`--json`" in preface, "the preface's table of what stays English"
    for cell in zh["cells"]:
        for target in i18n.LINK.findall("".join(cell["source"])) if cell["cell_type"] == "markdown" else []:
            path = target.split("#")[0]
            if path and "://" not in path:
                assert (out / path).resolve().is_file() or (ROOT / "notebooks" / path).is_file(), target


def test_the_source_chapters_terms_appear():
    text = " ".join(" ".join(i18n.translations(p).values()) for p in (ROOT / "locales" / LANG).rglob("*.po"))
    for term in ("通信开销", "规约", "收集", "带宽", "延迟", "溢出", "计算与通信重叠", "梯度压缩", "拓扑"):
        assert term in text, term


# ------------------------------------------------------------------ the parts, on small inputs

TABLE = {"Title here": "标题", "Para line one continues $x$.": "第一段 $x$。", "item **one** continues": "第 **一** 项",
         "nested": "嵌套", "quote more": "引文", "a": "甲", "b": "乙", "c `x`": "丙 `x`"}
SOURCE = """## Title here

Para line one
continues $x$.

- item **one**
  continues
  - nested
> quote
> more

| a | b |
|---|---|
| c `x` | d |

$$
t = 1
$$
"""


def test_each_block_is_replaced_behind_its_own_prefix_and_a_missing_one_is_reported():
    missing = []
    out = i18n.translate_markdown(SOURCE, TABLE, missing)
    assert out.split("\n")[:9] == ["## 标题", "", "第一段 $x$。", "", "- 第 **一** 项", "  - 嵌套", "> 引文", "",
                                   "| 甲 | 乙 |"]
    assert "| 丙 `x` | d |" in out and "$$\nt = 1\n$$" in out
    assert missing == ["d"]


def test_a_table_row_keeps_its_empty_cells_and_escapes_pipes():
    missing = []
    out = i18n.translate_markdown("| a | b | c |\n|---|---|---|\n| x \\| y |  | z |\n", {"a": "甲", "z": "Z"}, missing)
    assert out.split("\n")[2] == "| x \\| y |  | Z |" and missing == ["b", "c", "x | y"]


def test_an_image_with_an_editions_version_is_shown_in_it():
    text = "![map](../assets/knowledge_map.svg) ![x](../assets/none.svg)"
    assert i18n.localize_images(text, ROOT / "notebooks", LANG) == \
        "![map](../assets/knowledge_map.zh_CN.svg) ![x](../assets/none.svg)"


def test_links_that_leave_the_notebooks_folder_are_rebased(tmp_path):
    out = i18n.rebase_links("![map](../assets/m.svg) and [ch 1](01_x.ipynb)", ROOT / "notebooks",
                            ROOT / "build" / "notebooks-zh_CN")
    assert out == "![map](../../assets/m.svg) and [ch 1](01_x.ipynb)"


@pytest.mark.parametrize("msgstr, problem", [
    ("发送 `x` 共 $2n$ 字节，3 次，见[第 1 章](01_x.ipynb)", None),
    ("发送 x 共 $2n$ 字节，3 次，见[第 1 章](01_x.ipynb)", "code '`x`' is missing"),
    ("发送 `x` 共 2n 字节，3 次，见[第 1 章](01_x.ipynb)", "math '$2n$' is missing"),
    ("发送 `x` 共 $2n$ 字节，三次，见[第 1 章](01_x.ipynb)", "number 3 is missing"),
    ("发送 `x` 共 $2n$ 字节，3 次，见第 1 章", "link '01_x.ipynb' is missing"),
])
def test_a_translation_that_drops_code_math_numbers_or_links_is_caught(msgstr, problem):
    got = i18n.kept("Send `x`, $2n$ bytes, 3 times; see [chapter 1](01_x.ipynb)", msgstr)
    assert got == ([] if problem is None else [problem])


def test_a_localized_image_counts_as_the_link_kept():
    assert i18n.kept("![map](../assets/knowledge_map.svg)", "![图](../assets/knowledge_map.zh_CN.svg)",
                     lang=LANG) == []


def test_the_glossary_is_read_and_holds_the_source_chapters_words():
    names, terms = i18n.glossary(LANG)
    assert {"AllReduce", "NCCL", "NVLink", "InfiniBand", "ZeRO", "FSDP", "busbw"} <= set(names)
    assert terms["communication overhead"] == "通信开销" and terms["bandwidth"] == "带宽"
    assert terms["latency"] == "延迟" and terms["overlap"] == "重叠" and terms["topology"] == "拓扑"


# The native reviewer's rules (issue 53): (what the English says, what the Chinese must then say, what no
# translation may say). GPU kernels stay "kernel" (内核 is Jupyter's and Linux's); work hidden behind other work is
# 隐藏在…背后, never 之后/后面 (which read as "after"); the tree algorithm is 树形算法; a hook stays hook.
REVIEWED = [
    (r"\b(?:CUDA|NCCL|compute|backward|symmetric-memory)\*{0,2} kernels?\b", "kernel",
     r"(?:CUDA|NCCL|计算|反向传播|memory）)\s*内核"),
    (r"\b(?:hides?|hidden|hiding)\b[^.;:]*?\bbehind\b", "背后", r"(?:藏|隐藏)[^。；，]{0,25}(?:之后|后面)"),
    (None, None, r"(?<!形)树算法|钩子|over TCP"),
]


def test_the_reviewers_words_hold_in_every_catalog():
    import re

    problems = []
    for po in sorted((ROOT / "locales" / LANG / "LC_MESSAGES").rglob("*.po")):
        for en, zh in i18n.translations(po).items():
            for said, must, never in REVIEWED:
                if said and re.search(said, en, re.IGNORECASE) and must not in zh:
                    problems.append(f"{po.stem}: {en[:60]!r} needs {must}")
                if re.search(never, zh):
                    problems.append(f"{po.stem}: {zh[:60]!r} says {re.search(never, zh).group(0)}")
    assert problems == []
    names, terms = i18n.glossary(LANG)
    assert terms["contention"] == "资源争用"


# One word each, as Chinese ML engineers write it (issue 62; the glossary's rows say the same): (what no Chinese
# text may say, the word that belongs there). Every catalog, the preface and the knowledge map are read.
BANNED = [
    (r"(?<!隐)藏|掩盖", "隐藏 (never 藏住, 藏在, 藏不住, 藏起来, 掩盖)"),
    (r"定价|计价|估价", "估算"),
    (r"规约操作", "规约运算 (the glossary's reduce op)"),
    (r"恒等回放", "原样回放"),
    (r"全局 ?batch|全局批(?!大小)", "全局批大小"),
    (r"键块|查询块", "K 块 / Q 块"),
    (r"训练步 ?(?:\{\d\}|\d)|(?<![一那这每该])步时|每步时间|单步时间", "每步耗时 (训练步 12 reads as step number 12)"),
    (r"共到第", "第 1/3 步"),
    (r"(?:\d|\})\s*us\b", "µs"),
    (r"黑色刻度", "黑色短线 (刻度 are an axis's ticks)"),
    (r"[\u4e00-\u9fff][,;:!?](?!//)|[\u4e00-\u9fff]\.(?:\s|$)", "full-width punctuation inside a Chinese sentence"),
]


def chinese_texts():
    """(where, text) for every Chinese text the edition shows: each catalog's msgstr, the preface, the map."""
    for po in sorted((ROOT / "locales" / LANG / "LC_MESSAGES").rglob("*.po")):
        for en, zh in i18n.translations(po).items():
            yield f"{po.relative_to(ROOT / 'locales' / LANG / 'LC_MESSAGES')}: {en[:50]!r}", zh
    yield "preface.md", i18n.preface(LANG)
    sys.path.insert(0, str(ROOT / "assets"))
    import make_knowledge_map as km

    yield from ((f"knowledge map: {k[:40]!r}", v) for k, v in km.ZH_CN.items())


def test_one_word_each_and_no_banned_variant_comes_back():
    import re

    problems = [f"{where} says {m.group(0)!r}: write {word}" for where, zh in chinese_texts()
                for never, word in BANNED  # a formula's arguments keep their comma: max(节点内一跳, 网络开销)
                for m in [re.search(never, re.sub(r"\b(?:max|min)\([^)]*\)", "", zh))] if m]
    assert problems == [], "\n".join(problems)
    never = {word.split()[0]: pattern for pattern, word in BANNED}
    assert re.search(never["隐藏"], "通信藏在反向传播背后") and not re.search(never["隐藏"], "隐藏在反向传播背后")
    assert re.search(never["每步耗时"], "训练步 {0} ms") and not re.search(never["每步耗时"], "三个训练步")
    assert re.search(never["µs"], "等了 {0} us") and not re.search(never["µs"], "等了 {0} µs")
    _, terms = i18n.glossary(LANG)
    text = (ROOT / "locales" / LANG / "glossary.md").read_text(encoding="utf-8")
    for word in ("| 隐藏 |", "| 估算 |", "| 原样回放 |", "| 全局批大小 |", "| K 块 / Q 块 |", "| 每步耗时 |", "µs"):
        assert word in text, word


def test_the_knowledge_map_has_every_label_in_chinese():
    sys.path.insert(0, str(ROOT / "assets"))
    import make_knowledge_map as km

    seen = []
    km.plt.close(km.draw(lambda s: seen.append(s) or s))
    assert set(seen) <= set(km.ZH_CN) and all(km.ZH_CN[s] for s in seen)
    svg = (ROOT / "assets" / "knowledge_map.zh_CN.svg").read_text(encoding="utf-8")
    assert km.ZH_CN[km.ROOT_TITLE] in svg and "拓扑" in svg
    for label in [*km.ZH_CN.values(), svg]:  # the glossary's hook, the collectives by their names
        assert "钩子" not in label and "all-reduce" not in label.lower().replace("allreduce", "")
    assert all(line in svg for label in km.ZH_CN.values() for line in label.split("\n")), "the SVG is not redrawn"


@pytest.mark.parametrize("args, said", [(["notebooks"], "notebooks needs --lang"),
                                        (["lab", "--lang", "xx"], "--lang 'xx': no such edition"),
                                        (["test", "--lang", "xx"], "--lang 'xx': no such edition")])
def test_course_py_refuses_an_edition_it_lacks_in_one_line(args, said):
    done = subprocess.run([sys.executable, str(ROOT / "course.py"), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_lab_opens_the_editions_first_chapter(tmp_path):
    import course

    folder = tmp_path / "build" / "notebooks-zh_CN"
    folder.mkdir(parents=True)
    (folder / "00_start_here.ipynb").write_text("{}")
    cmd = course.lab_command(sys.executable, tmp_path, folder="build/notebooks-zh_CN")
    assert "--LabApp.default_url=/lab/tree/build/notebooks-zh_CN/00_start_here.ipynb" in cmd


def test_a_notebook_the_learner_ran_is_kept_unless_forced(tmp_path):
    out = tmp_path / "zh"
    i18n.write_notebooks(LANG, out)
    ran = out / NOTEBOOKS[1].name
    nb = json.loads(ran.read_text(encoding="utf-8"))
    nb["cells"][-1]["metadata"]["learner"] = "ran it"
    ran.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    mine = ran.read_bytes()
    written, _, kept = i18n.write_notebooks(LANG, out)
    assert kept == [ran] and ran.read_bytes() == mine and len(written) == len(NOTEBOOKS) - 1
    written, _, kept = i18n.write_notebooks(LANG, out, force=True)
    assert kept == [] and ran.read_bytes() != mine


def test_display_math_keeps_its_formula_and_may_translate_its_text_labels():
    missing = []
    out = i18n.translate_markdown("$$t = \\text{bytes}/B$$\n", {"t = \\text{bytes}/B": "t = \\text{字节}/B"}, missing)
    assert out == "$$t = \\text{字节}/B$$\n" and missing == []
    assert i18n.TEXT_LABEL.sub("", "t = \\text{bytes}/B") == i18n.TEXT_LABEL.sub("", "t = \\text{字节}/B")
    assert "B^* = \\frac{\\text{bytes}_0 - \\text{bytes}_c}{t_c + \\text{extra latency}}" in i18n.math_messages()


def test_the_stored_verdicts_are_rendered_as_a_run_in_chinese_prints_them():
    from commlib.exercises import Verdict

    long = ("the replay keeps every compute duration as measured: a change in compute speed is not in the trace. "
            "Links, nodes and buckets change only communication, which it prices.")
    en = repr(Verdict(True, long)) + "\n" + repr(Verdict(False, "Replace the None (or ...) with your answer, then "
                                                                "run the cell again.")) + "\n"
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["rank 0 said hi\n", *en.splitlines(keepends=True)]},
        {"output_type": "execute_result", "data": {"text/plain": repr(Verdict(True, "every rank returned 3."))}}]}]}
    out = i18n.editions.with_verdicts_in(nb, LANG)["cells"][0]["outputs"]
    from commlib.ui import language

    language.set_language(LANG)
    try:
        want = repr(Verdict(True, long)) + "\n" + repr(Verdict(False, "Replace the None (or ...) with your "
                                                                      "answer, then run the cell again.")) + "\n"
    finally:
        language.set_language(None)
    assert "".join(out[0]["text"]) == "rank 0 said hi\n" + want and "\n" in want.strip()
    assert "".join(out[1]["data"]["text/plain"]) == "正确。每个 rank 都返回了 3。"
    assert language.language() is None and repr(Verdict(True, "x")) == "Correct. x"
    state = {"a": {"model_name": "DropdownModel", "state": {"description": "op"}},
             "b": {"model_name": "HTMLModel", "state": {"value": "<td>bottleneck</td><td>3 ms</td>"}}}
    nb["metadata"] = {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}}
    got = i18n.editions.with_verdicts_in(nb, LANG)["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]
    assert got["state"]["a"]["state"]["description"] == "操作"
    assert got["state"]["b"]["state"]["value"] == "<td>瓶颈</td><td>3 ms</td>" and state["a"]["state"]["description"] == "op"


def test_a_cell_showing_a_widget_or_a_report_is_left_out_of_nbvals_comparison_in_the_edition():
    widget = {"output_type": "execute_result", "data": {"text/plain": "VBox(children=(Play(description='play'…",
                                                        "application/vnd.jupyter.widget-view+json": {"model_id": "a"}}}
    plain = {"output_type": "execute_result", "data": {"text/plain": "42"}}
    nb = {"cells": [{"cell_type": "code", "source": "w", "metadata": {}, "outputs": [widget]},
                    {"cell_type": "code", "source": "x", "metadata": {"tags": ["t"]}, "outputs": [plain]}]}
    report = {"output_type": "stream", "name": "stdout", "text": ["# 1 rank(s) of a 2-rank nccl job; hardware: x\n"]}
    nb["cells"].append({"cell_type": "code", "source": "print(r)", "metadata": {}, "outputs": [report]})
    cells = i18n.editions.with_verdicts_in(nb, LANG)["cells"]
    assert cells[0]["metadata"]["tags"] == ["nbval-ignore-output"] and cells[1]["metadata"]["tags"] == ["t"]
    assert nb["cells"][0]["metadata"] == {} and cells[2]["metadata"]["tags"] == ["nbval-ignore-output"]  # a report
