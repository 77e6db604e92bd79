"""assets/ holds generated figures: regenerating them reproduces the committed files exactly."""

import subprocess
import sys
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_knowledge_map_is_generated_by_its_script(tmp_path, monkeypatch):
    sys.path.insert(0, str(ASSETS))
    try:
        import make_knowledge_map as km
    finally:
        sys.path.remove(str(ASSETS))
    committed = (ASSETS / "knowledge_map.svg").read_text()
    monkeypatch.setattr(km, "OUT", tmp_path / "knowledge_map.svg")
    fresh = km.main().read_text()
    assert fresh == committed, "run `python assets/make_knowledge_map.py` and commit the result"
    for words in ("Communication patterns", "Latency + bandwidth", "Topology", "Overlap", "remedies", "65504"):
        assert words in fresh


def test_nbval_markers_stand_alone_on_their_line():
    """nbval only honours '# NBVAL_IGNORE_OUTPUT' alone on a line; with words after it, it compares the output."""
    import json
    import re

    nbdir = ASSETS.parent / "notebooks"
    for path in sorted(nbdir.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for line in "".join(cell["source"]).splitlines():
                if "NBVAL_" in line:
                    assert re.fullmatch(r"\s*#\s*NBVAL_[A-Z_]+\s*", line), f"{path.name}: {line!r}"
