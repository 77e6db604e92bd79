"""A pytest plugin for nbval's run of an edition's notebooks (`course.py test --lang zh_CN` loads it through
PYTEST_PLUGINS=book.nbrecord, so that its pytest-xdist workers load it too): with COMMLIB_RECORD_RUN set to a
folder, each notebook's kernel records what it shows into <folder>/<notebook>/ (COMMLIB_RECORD and IPYTHONDIR, set
before nbval starts the kernel: commlib.ui.shown), and every cell's outputs of this run are written beside
(outputs.jsonl, images left out). tests/test_zh_english.py reads them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RUN = "COMMLIB_RECORD_RUN"
RECORD = "COMMLIB_RECORD"  # commlib.ui.language.RECORD


def _folder(item) -> Path | None:
    run = os.environ.get(RUN)
    path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
    return Path(run) / path.stem if run and path.suffix == ".ipynb" else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before nbval starts the notebook's kernel (its first cell's setup): the kernel inherits where to record."""
    folder = _folder(item)
    if folder is not None:
        from commlib.ui import shown

        os.environ[RECORD] = str(folder)
        os.environ["IPYTHONDIR"] = shown.ipython_dir(folder)  # its startup file starts the record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        folder, outs = _folder(item), getattr(item, "test_outputs", None)
        if folder is not None and outs:
            kept = [{k: v for k, v in o.items() if k != "data"} | (
                {"data": {t: d for t, d in o["data"].items() if not t.startswith("image/")}} if "data" in o else {})
                for o in outs]
            folder.mkdir(parents=True, exist_ok=True)
            line = {"kind": "outputs", "cell": getattr(item, "cell", {}).get("id"), "outputs": kept}
            with open(folder / "outputs.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
