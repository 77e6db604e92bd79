"""For instructors: learner copies of the notebooks, with the solutions taken out.

    python -m commlib learner-copies OUT_DIR [NOTEBOOK ...]    # default: every notebook in notebooks/

A cell is a solution when its metadata tags include "solution". Learner copies drop those cells,
drop a "Solutions" heading left with nothing under it, and clear every output and execution count,
so learners start from a clean notebook. Images that a notebook links by a relative path (the knowledge
map in ../assets/) are copied into OUT_DIR/assets/ and the links changed to match, so the copies work
wherever OUT_DIR is. Plain JSON: no Jupyter needed to run it.

It never writes over an input (OUT_DIR must not hold the notebooks it copies), nor over a file already
in OUT_DIR unless asked to (--force: a learner may have worked in an earlier copy), and reads every
input before writing anything. What stops it is a CopyError: one line naming the path.

The book built without solutions (`python3 course.py book --no-solutions`) drops the same cells
(drop_solutions) but keeps every other output: the committed outputs are its content.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

SOLUTION_TAG = "solution"


class CopyError(ValueError):
    """Learner copies that cannot be made: a missing or malformed input, an output that cannot be written."""


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
        target = out_dir / "assets" / found.name
        target.parent.mkdir(exist_ok=True)
        if target.resolve() != found:  # already there when OUT_DIR/assets is where the image lives
            shutil.copyfile(found, target)
        return f"{m.group(1)}assets/{found.name}{m.group(3)}"

    return _IMAGE.sub(local, source)


def read_notebook(path: Path) -> dict:
    """An nbformat 4 notebook as a dict, or CopyError saying in one line what the file is instead."""
    if not path.exists():
        raise CopyError(f"{path}: no such file")
    if path.is_dir():
        raise CopyError(f"{path}: is a folder; expected a notebook file (.ipynb)")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CopyError(f"{path}: cannot read it ({e.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CopyError(f"{path}: not a notebook, its text is not JSON ({e})") from None
    if not (isinstance(nb, dict) and nb.get("nbformat") == 4):
        found = f"nbformat={nb.get('nbformat')!r}" if isinstance(nb, dict) else f"a JSON {type(nb).__name__}"
        raise CopyError(f"{path}: not an nbformat 4 notebook (found {found}); only those are supported")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        raise CopyError(f"{path}: its \"cells\" must be a list of cells, found {type(cells).__name__}")
    for i, c in enumerate(cells):
        if not (isinstance(c, dict) and c.get("cell_type") in ("code", "markdown", "raw")):
            kind = repr(c.get("cell_type")) if isinstance(c, dict) else f"a {type(c).__name__}"
            raise CopyError(f"{path}: cell {i} must have cell_type 'code', 'markdown' or 'raw', found {kind}")
    return nb


def learner_copies(out_dir, notebooks=None, force: bool = False) -> list[Path]:
    """Write learner copies of `notebooks` (default: notebooks/NN_*.ipynb) into out_dir; -> the paths written.
    CopyError, before anything is written, if an input is unreadable, a copy would overwrite an input, or
    (unless force) a copy's file exists already."""
    root = Path(__file__).resolve().parents[2]
    paths = [Path(p) for p in notebooks] if notebooks else sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    if not paths:
        raise CopyError("no notebooks given and none found in notebooks/")
    if not isinstance(out_dir, (str, Path)) or not str(out_dir).strip():
        raise CopyError(f"OUT_DIR must name a folder, got {out_dir!r}")  # "" would write into the current folder
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise CopyError(f"{out}: is a file; the output must be a folder")
    originals = [read_notebook(path) for path in paths]
    inputs = {path.resolve(): path for path in paths}
    for path in paths:
        target = out / path.name
        if target.resolve() in inputs:
            raise CopyError(f"{target} is an input ({inputs[target.resolve()]}): learner copies never overwrite "
                            f"the notebooks they are made from; choose another output folder")
    names = [path.name for path in paths]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise CopyError(f"two inputs are named {twice[0]}: their copies would overwrite each other in {out}")
    existing = [out / name for name in names if (out / name).exists()]
    if existing and not force:
        more = f" and {len(existing) - 1} more" if len(existing) > 1 else ""
        raise CopyError(f"{existing[0]}{more} exists already: learner copies do not overwrite files in OUT_DIR "
                        f"(a learner's work may be in them); choose another folder, or pass --force")
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, nb in zip(paths, originals):
            copy = strip_solutions(nb)
            for cell in copy["cells"]:
                if cell["cell_type"] == "markdown":
                    cell["source"] = copy_linked_images(_source(cell), path.resolve().parent, out)
            target = out / path.name
            target.write_text(json.dumps(copy, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(target)
    except OSError as e:
        raise CopyError(f"{e.filename or out}: cannot write there ({e.strerror or e})") from None
    return written
