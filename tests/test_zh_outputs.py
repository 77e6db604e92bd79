"""The zh_CN edition's own outputs (locales/zh_CN/outputs/, book/outputs.py): a run of every chapter in Chinese,
committed; current for the chapters' code and the catalogs (else `python3 course.py notebooks --lang zh_CN
--execute --only NN` writes them again), and what the zh_CN notebooks and book show."""

import base64
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "book")]
import editions  # noqa: E402
import outputs  # noqa: E402

LANG = "zh_CN"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
CJK = lambda text: any("\u3400" <= ch <= "\u9fff" for ch in text)  # noqa: E731


def english(path: Path) -> dict:
    return editions.with_language_cell(json.loads(path.read_text(encoding="utf-8")), LANG)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chapters_chinese_outputs_are_current(path):
    """Stale when the chapter's code changed or a message its run showed translates otherwise now (a catalog
    edited): the zh_CN notebooks would show what a run no longer prints."""
    why = outputs.stale(LANG, path.stem, english(path))
    assert why == [], (f"the stored zh_CN outputs of {path.stem} are stale; write them again with\n  python3 "
                       f"course.py notebooks --lang zh_CN --execute --only {path.stem[:2]}\n" + "\n".join(why[:20]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_stored_run_speaks_chinese_and_keeps_its_figures_as_png_files(path):
    stored = outputs.load(LANG, path.stem)
    assert stored is not None
    shown = [o for c in stored["cells"].values() for o in c["outputs"]]
    text = json.dumps(shown, ensure_ascii=False)
    assert CJK(text) or not shown, f"{path.stem}: nothing Chinese in its stored outputs"
    pngs = [o["data"][outputs.PNG] for o in shown if outputs.PNG in o.get("data", {})]
    assert all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    raw = json.loads((outputs.folder(LANG) / f"{path.stem}.json").read_text(encoding="utf-8"))
    files = {p.relative_to(outputs.folder(LANG)).as_posix() for p in (outputs.folder(LANG) / path.stem).glob("*")}
    assert outputs.png_files(raw) == files, "PNG files without an output, or outputs without their file"
    assert "base64," not in json.dumps(raw).replace("base64,@", ""), "a PNG kept inside the JSON"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_stored_run_s_printed_lines_fit_the_book_s_column(path):
    """By display width: a Chinese character takes two columns (chapter 9's what-if table was 109 wide, chapter
    10's p2p diagnosis 101, where the English run fits)."""
    from tools.printed import wide_output_lines

    stored = outputs.load(LANG, path.stem)
    cells = [{"cell_type": "code", "id": cid, "outputs": c["outputs"]} for cid, c in stored["cells"].items()]
    assert wide_output_lines({"cells": cells}) == []


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from book import i18n

    out = tmp_path_factory.mktemp("nb") / "build" / f"notebooks-{LANG}"
    i18n.write_notebooks(LANG, out)
    return out


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The zh_CN book's sources as book/build.py stages them."""
    import build

    src = tmp_path_factory.mktemp("book") / "src"
    build.stage(src, lang=LANG, working_tree=True)
    return src


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_zh_CN_notebook_and_book_show_the_chinese_run(written, staged, path):
    """The notebook a learner opens (course.py lab --lang zh_CN) and the page of the zh_CN book: the English code,
    the Chinese run's outputs and widget state, the English edition's nbval tags (nothing more left uncompared)."""
    stored = outputs.load(LANG, path.stem)
    en = english(path)
    if stored["code"] != editions.code_digest(en):
        pytest.skip("its code changed since its Chinese run (test_every_chapters_chinese_outputs_are_current)")
    for folder in (written, staged / "notebooks"):
        nb = json.loads((folder / path.name).read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert [c["source"] for c in code] == [c["source"] for c in en["cells"] if c["cell_type"] == "code"]
        assert [c["outputs"] for c in code] == [stored["cells"][c["id"]]["outputs"] for c in code]
        assert [c["metadata"] for c in code] == [c["metadata"] for c in en["cells"] if c["cell_type"] == "code"]
        assert nb["metadata"].get("widgets", {}) == stored["widgets"]


def test_the_english_notebooks_hold_no_chinese_outputs():
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert not CJK(json.dumps([c.get("outputs", []) for c in nb["cells"]], ensure_ascii=False)), path.name


# ------------------------------------------------------------------ the parts, on a small chapter

def chapter():
    cells = [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": "# T"},
             {"cell_type": "code", "id": "a", "metadata": {}, "execution_count": 2, "source": "plot()",
              "outputs": [{"output_type": "display_data", "metadata": {},
                           "data": {"image/png": base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode(),
                                    "text/plain": "<Figure>"}}]},
             {"cell_type": "code", "id": "b", "metadata": {"tags": ["nbval-ignore-output"]}, "execution_count": 3,
              "source": "print(1)", "outputs": [{"output_type": "stream", "name": "stdout", "text": "正确。\n"}]}]
    return editions.with_language_cell({"cells": cells, "metadata": {"widgets": {"w": 1}}}, LANG)


def test_outputs_are_stored_with_their_pngs_apart_and_shown_only_for_the_same_code(tmp_path):
    record = tmp_path / "record"
    record.mkdir()
    (record / "1.jsonl").write_text('{"kind": "tr", "text": "Correct. ", "said": "正确。"}\n'
                                    '{"kind": "drawn", "text": "带宽"}\n'
                                    '{"kind": "hint", "text": "还不对。", "said": "ch0_x"}\n{"kind": "tr"\n')
    nb = chapter()
    frame = base64.b64encode(b"\x89PNG\r\n\x1a\nframe").decode()
    nb["cells"][3]["outputs"].append({"output_type": "display_data", "metadata": {}, "data": {
        "text/html": f'<img src="data:image/png;base64,{frame}">'
                     f'<script>f = ["data:image/png;base64,{frame}"]</script>'}})
    path = outputs.save(LANG, "01_x", nb, record, locales=tmp_path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    png = raw["cells"]["a"]["outputs"][0]["data"]["image/png"]
    assert png.startswith("@01_x/") and (tmp_path / LANG / "outputs" / png[1:]).read_bytes() == b"\x89PNG\r\n\x1a\nfake"
    html = raw["cells"]["b"]["outputs"][1]["data"]["text/html"]
    assert frame not in html and html.count("data:image/png;base64,@01_x/") == 2
    assert len(outputs.png_files(raw)) == 2 and len(list((tmp_path / LANG / "outputs" / "01_x").glob("*.png"))) == 2
    assert raw["messages"] == {"Correct. ": "正确。"} and raw["drawn"] == ["带宽"]
    assert raw["hints"] == [["ch0_x", "还不对。"]]
    bare = dict(nb, cells=[dict(c, outputs=[]) if c["cell_type"] == "code" else c for c in nb["cells"]], metadata={})
    shown = outputs.with_outputs(bare, "01_x", LANG, locales=tmp_path)
    assert [c.get("outputs") for c in shown["cells"]] == [c.get("outputs") for c in nb["cells"]]
    assert shown["metadata"]["widgets"] == {"w": 1}
    other = dict(nb, cells=[*nb["cells"][:3], dict(nb["cells"][3], source="print(2)")])
    assert outputs.with_outputs(other, "01_x", LANG, locales=tmp_path) is None
    assert outputs.with_outputs(nb, "02_none", LANG, locales=tmp_path) is None


def test_stale_names_the_code_a_message_translated_otherwise_and_a_lost_png(tmp_path):
    nb = chapter()
    record = tmp_path / "record"
    record.mkdir()
    (record / "1.jsonl").write_text('{"kind": "tr", "text": "Correct. ", "said": "正确。"}\n', encoding="utf-8")
    path = outputs.save(LANG, "01_x", nb, record, locales=tmp_path)
    assert outputs.stale(LANG, "01_x", nb, locales=tmp_path) == []
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["messages"]["Correct. "] = "对了。"
    path.write_text(json.dumps(raw, ensure_ascii=False), encoding="utf-8")
    other = dict(nb, cells=[*nb["cells"][:3], dict(nb["cells"][3], source="print(2)")])
    png = raw["cells"]["a"]["outputs"][0]["data"]["image/png"][1:]
    (tmp_path / LANG / "outputs" / png).unlink()
    why = outputs.stale(LANG, "01_x", other, locales=tmp_path)
    assert why == ["01_x: its code changed since the run",
                   "01_x: 'Correct. ' now reads '正确。', the run showed '对了。'", f"01_x: {png} is missing"]
    assert outputs.stale(LANG, "02_none", nb, locales=tmp_path)[0].startswith("02_none: no stored outputs")
