"""tools/run_notebooks.py: a notebook runs, with its outputs saved, from any folder."""

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_a_notebook_runs_from_a_folder_other_than_its_own(tmp_path, monkeypatch):
    """Its kernel runs in the notebook's folder and talks over Unix sockets: with a relative socket name the
    kernel bound it there and the runner looked for it in its own folder ("Kernel didn't respond in 60 seconds",
    seen running chapter 9 from the repository's root)."""
    from tools.run_notebooks import kernelspec, run

    (tmp_path / "chapters").mkdir()
    path = tmp_path / "chapters" / "one.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(nb, path)
    monkeypatch.chdir(tmp_path)
    run(path, timeout=60)
    saved = nbformat.read(path, as_version=4)
    assert saved.cells[0].outputs[0]["text"] == "42\n"
    assert saved.metadata["kernelspec"] == kernelspec()
