"""commlib.exercises.learner_copies: learner copies lose exactly the solution cells and all outputs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlib.exercises import learner_copies as teaching

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def cells_of(path):
    return json.loads(Path(path).read_text())["cells"]


def test_strip_solutions_on_a_constructed_notebook():
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "**Exercise.** ..."},
        {"cell_type": "code", "metadata": {}, "source": "answer = None", "outputs": [{"output_type": "stream"}],
         "execution_count": 3},
        {"cell_type": "markdown", "metadata": {}, "source": "### Solutions\n"},
        {"cell_type": "code", "metadata": {"tags": ["solution"]}, "source": "answer = 42", "outputs": [],
         "execution_count": 4},
        {"cell_type": "code", "metadata": {}, "source": "c.close()", "outputs": [], "execution_count": 5},
    ]}
    out = teaching.strip_solutions(nb)
    assert [c["source"] for c in out["cells"]] == ["**Exercise.** ...", "answer = None", "c.close()"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in out["cells"] if c["cell_type"] == "code")
    assert len(nb["cells"]) == 5 and nb["cells"][1]["outputs"]  # the original is untouched


def test_drop_solutions_keeps_the_other_outputs():
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": [{"output_type": "stream"}],
         "execution_count": 3},
        {"cell_type": "markdown", "metadata": {}, "source": "## Solutions"},
        {"cell_type": "code", "metadata": {"tags": ["solution"]}, "source": "answer = 42", "outputs": [],
         "execution_count": 4},
    ]}
    out = teaching.drop_solutions(nb)
    assert out["cells"] == nb["cells"][:1] and out["cells"][0]["execution_count"] == 3  # the book shows it as run
    assert len(nb["cells"]) == 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_chapter_has_solutions_and_learner_copies_drop_them(tmp_path, path):
    original = cells_of(path)
    solutions = [c for c in original if teaching.is_solution(c)]
    assert solutions, f"{path.name} has no cell tagged 'solution'"
    (copy,) = teaching.learner_copies(tmp_path, [path])
    cells = cells_of(copy)
    assert not any(teaching.is_solution(c) for c in cells)
    assert len(cells) == len(original) - len(solutions) - 1  # and the "### Solutions" heading
    assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code")
    kept_sources = [teaching._source(c) for c in cells]
    relinked = lambda src: src.replace("](../assets/", "](assets/")  # noqa: E731  (images come along)
    assert all(relinked(teaching._source(c)) in kept_sources for c in original
               if not teaching.is_solution(c) and "Solutions" not in teaching._source(c))


def test_learner_copies_bring_the_images_they_link(tmp_path):
    out = tmp_path / "somewhere" / "handout"
    teaching.learner_copies(out, [ROOT / "notebooks" / "00_start_here.ipynb"])
    text = "".join(teaching._source(c) for c in cells_of(out / "00_start_here.ipynb"))
    assert "](assets/knowledge_map.svg)" in text and "../assets" not in text
    assert (out / "assets" / "knowledge_map.svg").read_bytes() == (ROOT / "assets" / "knowledge_map.svg").read_bytes()


def test_image_links_that_are_urls_or_missing_stay(tmp_path):
    src = "![a](https://example.org/x.png) ![b](missing.png) ![c](data:image/png;base64,AAAA)"
    assert teaching.copy_linked_images(src, tmp_path, tmp_path / "out") == src
    assert not (tmp_path / "out").exists()


def test_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "commlib", "learner-copies", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    assert [p.name for p in (tmp_path / "assets").iterdir()] == ["knowledge_map.svg"]


def learner_copies_cli(*args) -> tuple[int, str, str]:
    """`python -m commlib learner-copies ...` in this process -> (exit code, stdout, stderr)."""
    import contextlib
    import io

    from commlib.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["learner-copies", *map(str, args)])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_learner_copies_never_write_over_their_inputs(tmp_path):
    source = tmp_path / "course"
    source.mkdir()
    nb = source / NOTEBOOKS[0].name
    nb.write_bytes(NOTEBOOKS[0].read_bytes())
    for out in (source, tmp_path / "course" / ".." / "course"):  # the folder of the inputs, however it is written
        code, stdout, stderr = learner_copies_cli(out, nb)
        assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1, stderr
        assert "never overwrite" in stderr and "Traceback" not in stderr
        assert nb.read_bytes() == NOTEBOOKS[0].read_bytes(), "the source notebook is untouched"


def test_learner_copies_refuse_to_overwrite_a_copy_unless_forced(tmp_path):
    """Before: a second learner-copies into the same folder wrote over a learner's work without a word."""
    nb = NOTEBOOKS[0]
    assert learner_copies_cli(tmp_path, nb)[0] == 0
    work = tmp_path / nb.name
    work.write_text("a learner's answers")
    code, stdout, stderr = learner_copies_cli(tmp_path, nb)
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1, stderr
    assert f"{work} exists already" in stderr and "--force" in stderr
    assert work.read_text() == "a learner's answers"
    code, stdout, stderr = learner_copies_cli(tmp_path, nb, "--force")
    assert code == 0 and stdout.strip() == str(work), stderr
    assert json.loads(work.read_text())["nbformat"] == 4


def _unwritable(tmp_path):
    """A folder nobody may write into (root ignores permission bits: use sysfs there)."""
    import os

    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return locked / "handout"
    if Path("/sys/kernel").is_dir():
        return Path("/sys/kernel/commlib-handout")  # sysfs refuses mkdir, even to root
    pytest.skip("running as root without sysfs: no folder here is unwritable to root")


@pytest.mark.parametrize("case", ["missing", "not-json", "wrong-format", "a-list", "a-folder", "output-is-a-file",
                                  "output-under-a-file", "output-unwritable", "same-name-twice"])
def test_bad_inputs_and_outputs_give_one_line_and_exit_2(tmp_path, case):
    good = tmp_path / "good.ipynb"
    good.write_bytes(NOTEBOOKS[0].read_bytes())
    out, inputs, words = tmp_path / "handout", [good], None
    if case == "missing":
        inputs, words = [tmp_path / "nope.ipynb"], "no such file"
    elif case == "not-json":
        (tmp_path / "x.ipynb").write_text("{ not json")
        inputs, words = [good, tmp_path / "x.ipynb"], "not JSON"
    elif case == "wrong-format":
        (tmp_path / "x.ipynb").write_text(json.dumps({"nbformat": 3, "worksheets": []}))
        inputs, words = [tmp_path / "x.ipynb"], "nbformat 4"
    elif case == "a-list":
        (tmp_path / "x.ipynb").write_text("[1, 2]")
        inputs, words = [tmp_path / "x.ipynb"], "nbformat 4"
    elif case == "a-folder":
        (tmp_path / "dir.ipynb").mkdir()
        inputs, words = [tmp_path / "dir.ipynb"], "is a folder"
    elif case == "output-is-a-file":
        out, words = tmp_path / "good.ipynb", "must be a folder"
        inputs = [NOTEBOOKS[0]]
    elif case == "output-under-a-file":
        out, words = tmp_path / "good.ipynb" / "handout", "cannot write"
    elif case == "output-unwritable":
        out, words = _unwritable(tmp_path), "cannot write"
    elif case == "same-name-twice":
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "good.ipynb").write_bytes(good.read_bytes())
        inputs, words = [good, tmp_path / "b" / "good.ipynb"], "two inputs are named good.ipynb"
    code, stdout, stderr = learner_copies_cli(out, *inputs)
    assert code == 2 and stdout == "", (code, stdout, stderr)
    assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr, stderr
    assert words in stderr, stderr
    assert not (out.is_dir() and any(out.iterdir())), "nothing written when an input is bad"
    assert good.read_bytes() == NOTEBOOKS[0].read_bytes()


@pytest.mark.parametrize("out_dir", ["", "  "])
def test_an_empty_out_dir_is_refused_not_the_current_folder(out_dir, tmp_path, monkeypatch):
    """Before: learner-copies "" wrote every notebook into the current folder."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(teaching.CopyError, match="OUT_DIR must name a folder"):
        teaching.learner_copies(out_dir)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("nb, words", [({"nbformat": 4, "cells": 5}, '"cells" must be a list of cells, found int'),
                                       ({"nbformat": 4, "cells": [{"cell_type": "x"}]}, "cell 0 must have cell_type"),
                                       ({"nbformat": 3, "cells": []}, "found nbformat=3"),
                                       ([1], "found a JSON list")])
def test_malformed_notebooks_say_what_is_wrong(nb, words, tmp_path):
    """Before: "cells": 5 said 'not an nbformat 4 notebook (found nbformat=4)'."""
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(teaching.CopyError, match=words):
        teaching.read_notebook(path)
