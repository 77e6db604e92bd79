"""For instructors: learner copies of the notebooks, with the solutions taken out.

    python -m commlib learner-copies OUT_DIR [NOTEBOOK ...]    # default: every notebook in notebooks/

A cell is a solution when its metadata tags include "solution". Learner copies drop those cells,
drop a "Solutions" heading left with nothing under it, and clear every output and execution count,
so learners start from a clean notebook. Images that a notebook links by a relative path (the knowledge
map in ../assets/) are copied into OUT_DIR/assets/ and the links changed to match, so the copies work
wherever OUT_DIR is. Plain JSON: no Jupyter needed to run it.

The book built without solutions (`python3 course.py book --no-solutions`) drops the same cells
(drop_solutions) but keeps every other output: the committed outputs are its content.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

SOLUTION_TAG = "solution"


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def is_solution(cell) -> bool:
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def drop_solutions(nb: dict) -> dict:
    """A copy of the notebook (nbformat 4 as a dict) without solution cells and without a heading that only
    introduced them ("### Solutions"); the other cells keep their outputs (the book shows them)."""
    kept = [cell for cell in nb["cells"] if not is_solution(cell) and not (
        cell["cell_type"] == "markdown" and re.fullmatch(r"\s*#+\s*Solutions\s*", _source(cell), re.I))]
    return {**nb, "cells": kept}


def strip_solutions(nb: dict) -> dict:
    """drop_solutions, and every output and execution count cleared: what a learner starts from."""
    cells = [dict(c, outputs=[], execution_count=None) if c["cell_type"] == "code" else dict(c)
             for c in drop_solutions(nb)["cells"]]
    return {**nb, "cells": cells}


_IMAGE = re.compile(r"(!\[[^\]]*\]\()([^)\s]+)(\))")  # ![alt](path)


def copy_linked_images(source: str, notebook_dir: Path, out_dir: Path) -> str:
    """Copy each image that `source` (markdown) links by a relative path, found next to the notebook, into
    out_dir/assets/; -> the source with those links pointing there. URLs and missing files stay as they are."""

    def local(m: re.Match) -> str:
        link = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", link, re.I) or link.startswith("/"):
            return m.group(0)  # a URL (https:, data:, attachment:) or an absolute path
        found = (notebook_dir / link).resolve()
        if not found.is_file():
            return m.group(0)
        (out_dir / "assets").mkdir(exist_ok=True)
        shutil.copyfile(found, out_dir / "assets" / found.name)
        return f"{m.group(1)}assets/{found.name}{m.group(3)}"

    return _IMAGE.sub(local, source)


def learner_copies(out_dir, notebooks=None) -> list[Path]:
    """Write learner copies of `notebooks` (default: notebooks/NN_*.ipynb) into out_dir; -> the paths written."""
    root = Path(__file__).resolve().parents[1]
    paths = [Path(p) for p in notebooks] if notebooks else sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    if not paths:
        raise ValueError("no notebooks given and none found in notebooks/")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        if nb.get("nbformat") != 4:
            raise ValueError(f"{path}: only nbformat 4 notebooks are supported")
        copy = strip_solutions(nb)
        for cell in copy["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = copy_linked_images(_source(cell), Path(path).resolve().parent, out)
        target = out / Path(path).name
        target.write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(target)
    return written
